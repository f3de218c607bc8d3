//go:build linux

package e2e

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill a server if the test binary dies
// before its cleanups run (a panic, a timeout), so no server outlives it.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
