package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/bench"
)

// stealGate measures each point of a schedule again while the hypervisor
// takes more than limit of the machine's CPU during it. A shared host's
// other guests slow the CPU-bound side of a ratio and not its fsync-bound
// side (the disk is not stolen), so a point measured under steal moves a
// ratio by what the neighbours did, not by what opjournal does: two runs
// of one commit, one through minutes of 40–50% steal, differed by up to
// 58% on the same ratios that agreed within 6% on a quiet host. The gate
// waits between the attempts (0.5 s, doubling to 8 s) and spends at most
// budget waiting in the whole run; then, or after maxRemeasures, a point
// is kept as measured, its steal on its row.
type stealGate struct {
	limit  float64       // a fraction of the CPU; 0 turns the gate off
	budget time.Duration // waiting left for the run
	// The run's counts, for the report: points measured again, and points
	// kept though the steal was over the limit.
	remeasured, kept int
	// sleep waits d or until ctx ends, and read samples the machine's
	// steal (bench.ReadSteal); a test replaces both.
	sleep func(ctx context.Context, d time.Duration)
	read  func() bench.Steal
}

// maxRemeasures bounds the attempts at one point: 0.5+1+2+4+8 s of
// waiting, about the length of a burst of steal on this project's hosts.
const maxRemeasures = 5

func newStealGate(limit float64, budget time.Duration) *stealGate {
	return &stealGate{limit: limit, budget: budget, read: bench.ReadSteal, sleep: func(ctx context.Context, d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}}
}

// measure runs point (attempt 0, then 1, … for each measurement again,
// so that every attempt can use keys of its own) until the share of the
// CPU stolen during it is at most the limit, and returns the row kept,
// with its StealPct and Remeasured set. name says which point in the
// progress lines.
func (g *stealGate) measure(ctx context.Context, name string, point func(attempt int) bench.Row) bench.Row {
	read := bench.ReadSteal
	if g != nil {
		read = g.read
	}
	for attempt := 0; ; attempt++ {
		before := read()
		r := point(attempt)
		stolen := before.StolenSince(read())
		r.StealPct, r.Remeasured = math.Round(stolen*1000)/10, attempt
		if !g.again(ctx, name, stolen, attempt) {
			return r
		}
	}
}

// again decides whether a measurement (a point, or a whole pass of a
// scenario whose points cannot be repeated alone) made while stolen of
// the CPU was taken, on its attempt-th try, is to be made again, and
// waits before saying so: 0.5 s before the second try, doubling to 8 s.
// A nil gate, or one turned off, never asks again.
func (g *stealGate) again(ctx context.Context, name string, stolen float64, attempt int) bool {
	if g == nil || g.limit <= 0 || stolen <= g.limit || ctx.Err() != nil {
		return false
	}
	wait := min(500*time.Millisecond<<attempt, 8*time.Second)
	pct := math.Round(stolen * 100)
	if attempt >= maxRemeasures || wait > g.budget {
		g.kept++
		why := fmt.Sprintf("after %d measurements", attempt+1)
		if wait > g.budget {
			why = "the run's --steal-wait is spent"
		}
		fmt.Printf("     %s: the hypervisor took %.0f%% of the CPU (limit %.0f%%); kept, %s\n", name, pct, g.limit*100, why)
		return false
	}
	g.remeasured++
	fmt.Printf("     %s: the hypervisor took %.0f%% of the CPU (limit %.0f%%); measuring again in %s\n", name, pct, g.limit*100, wait)
	g.sleep(ctx, wait)
	g.budget -= wait
	return true
}
