package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// UnstableSpread is the spread of a figure's per-round values above which
// the figure is printed as unstable: two runs of the same commit should
// agree within it.
const UnstableSpread = 0.10

// Slot is one measurement of an alternating schedule: the round (from 1)
// and the index of the scenario in the list that was scheduled.
type Slot struct{ Round, Index int }

// Alternate is the order in which n scenarios are measured over rounds:
// every scenario once per round, the odd rounds in the given order and the
// even rounds in the reverse (A B, B A, A B, … for two). The figures that
// compare two scenarios are taken within each round, from measurements a
// second or two apart, so a slow drift of the machine (another tenant's
// load, thermal state) moves both sides of a ratio alike and cancels; the
// reversal cancels what is left of it: a machine that speeds up through a
// run favours the second side in one round and the first in the next,
// instead of the same side in every round, and each scenario follows
// each neighbour equally often. The rounds then show how much the ratio
// itself moves.
func Alternate(rounds, n int) []Slot {
	out := make([]Slot, 0, max(rounds, 0)*max(n, 0))
	for r := 1; r <= rounds; r++ {
		for i := range n {
			if r%2 == 0 {
				i = n - 1 - i
			}
			out = append(out, Slot{r, i})
		}
	}
	return out
}

// Median is the median of v (the mean of the middle two for an even
// count); NaN for no values. v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// Spread is (max − min) / |median| of v: the whole range of the rounds
// relative to the figure (with 3–5 rounds an interquartile range would
// drop most of them). It is 0 for fewer than two values, and +Inf when
// the median is 0 and the values differ.
func Spread(v []float64) float64 {
	if len(v) < 2 {
		return 0
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return 0
	}
	m := math.Abs(Median(v))
	if m == 0 {
		return math.Inf(1)
	}
	return (hi - lo) / m
}

// Rounds returns the rounds the rows were measured in, ascending; none
// when every row was measured once (round 0).
func Rounds(rows []Row) []int {
	var out []int
	for _, r := range rows {
		if r.Round > 0 && !slices.Contains(out, r.Round) {
			out = append(out, r.Round)
		}
	}
	slices.Sort(out)
	return out
}

// point is what identifies a row apart from its round.
type point struct {
	system, scenario, store string
	c                       int
}

func pointOf(r Row) point { return point{r.System, r.Scenario, r.Store, r.Concurrency} }

// RoundRows returns the rows of one round: those measured in it, and the
// rows measured only once (round 0: the peers, the growth row, …) whose
// point the round does not have, so that a figure comparing a scenario
// run in rounds with one run once is computed in every round.
func RoundRows(rows []Row, round int) []Row {
	in := map[point]bool{}
	var out []Row
	for _, r := range rows {
		if r.Round == round {
			in[pointOf(r)] = true
			out = append(out, r)
		}
	}
	for _, r := range rows {
		if r.Round == 0 && !in[pointOf(r)] {
			out = append(out, r)
		}
	}
	return out
}

// MedianRows folds the rounds of each point into one row (in the order
// the points first appear) for the table and the chart: the median of
// each figure over the rounds, errors summed, the first note kept, and
// Round 0. Rows measured once are returned as they are.
func MedianRows(rows []Row) []Row {
	var order []point
	groups := map[point][]Row{}
	for _, r := range rows {
		p := pointOf(r)
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], r)
	}
	out := make([]Row, 0, len(order))
	for _, p := range order {
		g := groups[p]
		if len(g) == 1 {
			r := g[0]
			r.Round = 0
			out = append(out, r)
			continue
		}
		med := func(f func(Row) float64) float64 {
			v := make([]float64, len(g))
			for i, r := range g {
				v[i] = f(r)
			}
			return Median(v)
		}
		r := Row{System: p.system, Scenario: p.scenario, Store: p.store, Concurrency: p.c,
			OpsPerSec:     med(func(r Row) float64 { return r.OpsPerSec }),
			P50ms:         med(func(r Row) float64 { return r.P50ms }),
			P99ms:         med(func(r Row) float64 { return r.P99ms }),
			CPUClientUs:   med(func(r Row) float64 { return r.CPUClientUs }),
			CPUServerUs:   med(func(r Row) float64 { return r.CPUServerUs }),
			CPUPostgresUs: med(func(r Row) float64 { return r.CPUPostgresUs }),
		}
		for _, x := range g {
			r.Errors += x.Errors
			r.Calls += x.Calls
			r.Note = cmp.Or(r.Note, x.Note)
		}
		out = append(out, r)
	}
	return out
}

// roundsText renders per-round values at d decimals: "1.21 1.25 1.19".
func roundsText(v []float64, d int) string {
	p := math.Pow(10, float64(d))
	parts := make([]string, len(v))
	for i, x := range v {
		// Rounded as the figure is (CheckTargets), not half to even.
		parts[i] = strconv.FormatFloat(math.Round(x*p)/p, 'f', d, 64)
	}
	return strings.Join(parts, " ")
}

// SpreadText says how far a result's rounds spread, with their figures:
// "spread 4% (rounds 1.21 1.25 1.19)", or "spread 14% > 10%: unstable
// (rounds …)"; "" for a figure not measured in rounds.
func (r TargetResult) SpreadText() string {
	if r.Spread == nil {
		return ""
	}
	s := fmt.Sprintf("spread %.0f%% (rounds %s)", *r.Spread*100, roundsText(r.Rounds, r.decimals()))
	if r.Unstable {
		s = fmt.Sprintf("spread %.0f%% > %.0f%%: unstable (rounds %s)", *r.Spread*100, UnstableSpread*100, roundsText(r.Rounds, r.decimals()))
	}
	if c := r.CPUText(); c != "" {
		s += "; " + c
	}
	return s
}

// CPUText renders the CPU-normalised estimate of a throughput ratio:
// "CPU-normalised 1.08, spread 6%"; "" if there is none.
func (r TargetResult) CPUText() string {
	if r.CPUMedian == nil {
		return ""
	}
	return fmt.Sprintf("CPU-normalised %.2f, spread %.0f%%", *r.CPUMedian, *r.CPUSpread*100)
}
