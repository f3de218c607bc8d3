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
// Processes that cannot be read count as zero (Linux only). PostgreSQL's
// processes count with their reaped children, so that a backend which
// exits during a measurement (its time moves to the postmaster's) does
// not take its CPU out of the sum.
func ReadCPU(serverPid int) CPU {
	c := CPU{Client: procCPU("self", false)}
	if serverPid > 0 {
		c.Server = procCPU(strconv.Itoa(serverPid), false)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if comm, err := os.ReadFile(d + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "postgres" {
			c.Postgres += procCPU(filepath.Base(d), true)
		}
	}
	return c
}

// procCPU returns utime+stime of /proc/<pid> in µs, plus cutime+cstime
// (its waited-for children's) if children is set.
func procCPU(pid string, children bool) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The command name may contain spaces: fields start after its ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 15 {
		return 0
	}
	n := 2
	if children {
		n = 4
	}
	var ticks int64
	for _, v := range f[11 : 11+n] {
		t, _ := strconv.ParseInt(v, 10, 64)
		ticks += t
	}
	return ticks * clockTick
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
