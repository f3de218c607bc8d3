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
// Processes that cannot be read count as zero (Linux only). The time is
// the scheduler's, in ns, summed over a process's threads
// (/proc/<pid>/task/*/schedstat): utime and stime count 10 ms ticks, which
// over a point of a second and a dozen PostgreSQL backends is noise of
// 10–20% in a CPU figure. PostgreSQL's processes also count their reaped
// children's ticks, so that a backend which exits during a measurement
// (its time moves to the postmaster's) does not take its CPU out of the
// sum.
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

// schedCPU returns the time the threads of /proc/<pid> have run, in µs,
// from their schedstat (ns); false if it cannot be read.
func schedCPU(pid string) (int64, bool) {
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/[0-9]*/schedstat")
	if len(tasks) == 0 {
		return 0, false
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		ns += v
	}
	return ns / 1000, true
}

// procCPU returns the CPU time of /proc/<pid> in µs (schedCPU, or
// utime+stime where schedstat cannot be read), plus cutime+cstime (its
// waited-for children's) if children is set.
func procCPU(pid string, children bool) int64 {
	own, precise := schedCPU(pid)
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return own
	}
	// The command name may contain spaces: fields start after its ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 15 {
		return 0
	}
	from, to := 11, 13 // utime, stime
	if precise {
		from = 13
	}
	if children {
		to = 15 // cutime, cstime
	}
	var ticks int64
	for _, v := range f[from:to] {
		t, _ := strconv.ParseInt(v, 10, 64)
		ticks += t
	}
	return own + ticks*clockTick
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

// Steal is the machine's CPU time so far, in ticks, from the "cpu" line of
// /proc/stat: all of it (every state) and the part the hypervisor ran
// other guests on while this one had work (steal).
type Steal struct{ Total, Stolen int64 }

// ReadSteal samples /proc/stat; zero if it cannot be read (not Linux).
func ReadSteal() Steal {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Steal{}
	}
	return parseSteal(string(b))
}

// parseSteal reads the "cpu" line of a /proc/stat: user nice system idle
// iowait irq softirq steal (guest time is already in user). Lines from
// kernels without the steal column give no steal.
func parseSteal(stat string) Steal {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return Steal{}
	}
	var s Steal
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Steal{}
		}
		s.Total += n
		if i == 7 {
			s.Stolen = n
		}
	}
	return s
}

// StolenSince is the fraction of the machine's CPU time from s to later
// that the hypervisor took (what vmstat prints as st, over 100): 0 when
// nothing was read or no time passed.
func (s Steal) StolenSince(later Steal) float64 {
	total := later.Total - s.Total
	if total <= 0 || s.Total == 0 {
		return 0
	}
	return float64(later.Stolen-s.Stolen) / float64(total)
}
