package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTick is the unit of utime/stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux for every architecture Go supports).
const clockTick = 10_000 // µs

// CPU is the CPU time, in µs, used so far by the bench client (this
// process), the server process, and every process named "postgres".
type CPU struct{ Client, Server, Postgres int64 }

// ReadCPU samples CPU time from /proc. serverPid 0 means no server.
// Processes that cannot be read count as zero (Linux only).
func ReadCPU(serverPid int) CPU {
	c := CPU{Client: procCPU("self")}
	if serverPid > 0 {
		c.Server = procCPU(strconv.Itoa(serverPid))
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if comm, err := os.ReadFile(d + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
			c.Postgres += procCPU(filepath.Base(d))
		}
	}
	return c
}

// procCPU returns utime+stime of /proc/<pid> in µs.
func procCPU(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The command name may contain spaces: fields start after its ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return (ut + st) * clockTick
}

// RunWithCPU is Run, with the CPU each side spent per operation (warm-up
// included in both the CPU time and the operation count) set on the row.
func RunWithCPU(ctx context.Context, l Load, serverPid int, op Op) Row {
	before := ReadCPU(serverPid)
	r := Run(ctx, l, op)
	after := ReadCPU(serverPid)
	if r.Calls > 0 {
		per := func(a, b int64) float64 { return float64(a-b) / float64(r.Calls) }
		r.CPUClientUs = per(after.Client, before.Client)
		r.CPUServerUs = per(after.Server, before.Server)
		r.CPUPostgresUs = per(after.Postgres, before.Postgres)
	}
	return r
}
