package main

import (
	"context"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/bench"
)

// fakeSteal is a machine whose hypervisor takes the given share of the
// CPU during each successive measurement (100 ticks each).
func fakeSteal(shares ...float64) func() bench.Steal {
	var now bench.Steal
	now.Total = 1000
	n := 0
	return func() bench.Steal {
		// Reads come in pairs around a measurement: the second of each
		// pair advances the clock by that measurement's ticks.
		if n%2 == 1 {
			share := shares[min(n/2, len(shares)-1)]
			now.Total += 100
			now.Stolen += int64(share * 100)
		}
		n++
		return now
	}
}

func TestStealGate(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limit          float64
		budget         time.Duration
		shares         []float64
		wantAttempts   int
		wantSteal      float64
		wantWaits      []time.Duration
		wantRemeasured int
		wantKept       int
	}{
		{name: "quiet machine", limit: 0.1, budget: time.Minute, shares: []float64{0.02},
			wantAttempts: 1, wantSteal: 2},
		{name: "at the limit is kept", limit: 0.1, budget: time.Minute, shares: []float64{0.10},
			wantAttempts: 1, wantSteal: 10},
		{name: "a burst waited out", limit: 0.1, budget: time.Minute, shares: []float64{0.45, 0.30, 0.03},
			wantAttempts: 3, wantSteal: 3, wantWaits: []time.Duration{500 * time.Millisecond, time.Second}, wantRemeasured: 2},
		{name: "steal that lasts: kept after the last attempt", limit: 0.1, budget: time.Hour, shares: []float64{0.5},
			wantAttempts: maxRemeasures + 1, wantSteal: 50,
			wantWaits:      []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second},
			wantRemeasured: maxRemeasures, wantKept: 1},
		{name: "the run's wait spent", limit: 0.1, budget: 1600 * time.Millisecond, shares: []float64{0.5},
			wantAttempts: 3, wantSteal: 50, wantWaits: []time.Duration{500 * time.Millisecond, time.Second}, wantRemeasured: 2, wantKept: 1},
		{name: "gate off", limit: 0, budget: time.Minute, shares: []float64{0.9},
			wantAttempts: 1, wantSteal: 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newStealGate(tc.limit, tc.budget)
			g.read = fakeSteal(tc.shares...)
			var waits []time.Duration
			g.sleep = func(_ context.Context, d time.Duration) { waits = append(waits, d) }
			var attempts []int
			r := g.measure(context.Background(), "r1 fused-grpc c=32", func(attempt int) bench.Row {
				attempts = append(attempts, attempt)
				return bench.Row{OpsPerSec: float64(100 * (attempt + 1))}
			})
			if len(attempts) != tc.wantAttempts {
				t.Fatalf("attempts %v, want %d", attempts, tc.wantAttempts)
			}
			for i, a := range attempts {
				if a != i {
					t.Errorf("attempts %v, want numbered from 0", attempts)
				}
			}
			// The row kept is the last measurement, with its own steal.
			if r.OpsPerSec != float64(100*tc.wantAttempts) || r.StealPct != tc.wantSteal || r.Remeasured != tc.wantAttempts-1 {
				t.Errorf("kept %+v, want the measurement %d with steal %v%%", r, tc.wantAttempts, tc.wantSteal)
			}
			if len(waits) != len(tc.wantWaits) {
				t.Fatalf("waits %v, want %v", waits, tc.wantWaits)
			}
			var waited time.Duration
			for i := range waits {
				if waits[i] != tc.wantWaits[i] {
					t.Errorf("waits %v, want %v", waits, tc.wantWaits)
				}
				waited += waits[i]
			}
			if g.budget != tc.budget-waited || g.remeasured != tc.wantRemeasured || g.kept != tc.wantKept {
				t.Errorf("budget left %s, remeasured %d, kept %d; want %s, %d, %d", g.budget, g.remeasured, g.kept, tc.budget-waited, tc.wantRemeasured, tc.wantKept)
			}
		})
	}
}

// A gate on a run that is being cancelled keeps what it has.
func TestStealGateStopsWithTheRun(t *testing.T) {
	g := newStealGate(0.1, time.Minute)
	g.read = fakeSteal(0.5)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	g.measure(ctx, "r1", func(int) bench.Row { n++; return bench.Row{} })
	if n != 1 {
		t.Errorf("measured %d times after the run was cancelled, want 1", n)
	}
}

// A measurement again registers new operations: its keys are not the
// first attempt's, nor another round's.
func TestAttemptKeys(t *testing.T) {
	k := keyer("run")
	seen := map[string]bool{}
	for r := 1; r <= 2; r++ {
		for a := 0; a <= 2; a++ {
			key := k.round(r).attempt(a).key("fused", 32, 1)
			if seen[key] {
				t.Errorf("round %d attempt %d: key %s used before", r, a, key)
			}
			seen[key] = true
		}
	}
	if k.round(3).attempt(0) != k.round(3) {
		t.Errorf("the first attempt's keyer %q, want the round's own %q", k.round(3).attempt(0), k.round(3))
	}
}
