// Package bench is the measuring core of opjournal-bench: a closed-loop
// load driver with a warm-up, latency percentiles, and the result formats
// (a text table, JSON rows and an SVG chart). It imports nothing outside
// the standard library, so the peers module (harness/bench/peers) uses it too.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Row is one measured point: a system running a scenario at a concurrency.
type Row struct {
	System      string  `json:"system"`
	Scenario    string  `json:"scenario"`
	Store       string  `json:"store"`
	Concurrency int     `json:"concurrency"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50ms       float64 `json:"p50_ms"`
	P99ms       float64 `json:"p99_ms"`
	Errors      int64   `json:"errors,omitempty"`
	Note        string  `json:"note,omitempty"`
	// CPU per operation in µs (RunWithCPU): the bench client, the server
	// process and all of PostgreSQL. Zero when not measured.
	CPUClientUs   float64 `json:"cpu_client_us_per_op,omitempty"`
	CPUServerUs   float64 `json:"cpu_server_us_per_op,omitempty"`
	CPUPostgresUs float64 `json:"cpu_postgres_us_per_op,omitempty"`
	// Round is the round of an alternating schedule the row was measured
	// in (from 1; see Alternate); 0 for a point measured once.
	Round int `json:"round,omitempty"`
	// StealPct is the share of the machine's CPU time, in percent, that
	// the hypervisor gave to other guests while the point ran (ReadSteal);
	// Remeasured counts the earlier measurements of the point that were
	// discarded because that share was above the bench's limit.
	StealPct   float64 `json:"steal_pct,omitempty"`
	Remeasured int     `json:"remeasured,omitempty"`
	// Calls counts every successful operation, warm-up included.
	Calls int64 `json:"-"`
}

// Op is one operation of a scenario. worker is in [0, concurrency); seq
// is unique across all workers of one Run (warm-up included), so it can
// make fresh keys.
type Op func(ctx context.Context, worker int, seq int64) error

// Load says how long to drive a scenario.
type Load struct {
	Concurrency int
	Warmup      time.Duration // operations started before this are not counted
	Duration    time.Duration // the measured window
}

// Run drives op from l.Concurrency goroutines, each issuing the next
// operation as soon as the previous one returns, for l.Warmup+l.Duration.
// Only operations started after the warm-up count; ops/s is their number
// divided by the time from the end of the warm-up to the last completion.
// The first error is kept for the caller to print in Note.
func Run(ctx context.Context, l Load, op Op) Row {
	var seq atomic.Int64
	start := time.Now()
	measureFrom := start.Add(l.Warmup)
	stopAt := measureFrom.Add(l.Duration)
	lat := make([][]time.Duration, l.Concurrency)
	var errs atomic.Int64
	var firstErr atomic.Value
	var lastEnd atomic.Int64
	var calls atomic.Int64
	var wg sync.WaitGroup
	for w := range l.Concurrency {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(stopAt) {
					break
				}
				err := op(ctx, w, seq.Add(1))
				t1 := time.Now()
				if err == nil {
					calls.Add(1)
				}
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				mine = append(mine, t1.Sub(t0))
				for {
					prev := lastEnd.Load()
					if t1.UnixNano() <= prev || lastEnd.CompareAndSwap(prev, t1.UnixNano()) {
						break
					}
				}
			}
			lat[w] = mine
		})
	}
	wg.Wait()
	all := slices.Concat(lat...)
	row := Row{Concurrency: l.Concurrency, Errors: errs.Load(), Calls: calls.Load()}
	if e, ok := firstErr.Load().(string); ok {
		row.Note = "first error: " + e
	}
	if len(all) == 0 {
		return row
	}
	window := time.Unix(0, lastEnd.Load()).Sub(measureFrom)
	row.OpsPerSec = float64(len(all)) / window.Seconds()
	row.P50ms, row.P99ms = Millis(Percentile(all, 50)), Millis(Percentile(all, 99))
	return row
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of d by the
// nearest-rank method; d is sorted in place. It returns 0 for no samples.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	rank := int(math.Ceil(p / 100 * float64(len(d))))
	return d[min(max(rank, 1), len(d))-1]
}

// Millis converts d to milliseconds, rounded to microseconds.
func Millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// WriteTable prints rows as an aligned text table.
func WriteTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tscenario\tstore\tc\tops/s\tp50 ms\tp99 ms\terrors\tCPU µs/op client\tserver\tpostgres\t")
	for _, r := range rows {
		fmt.Fprintln(tw, FormatRow(r))
	}
	tw.Flush()
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(w, "  note %s/%s c=%d: %s\n", r.System, r.Scenario, r.Concurrency, r.Note)
		}
	}
}

// FormatRow renders one row as tab-separated table cells.
func FormatRow(r Row) string {
	return fmt.Sprintf("%s\t%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%d\t%.0f\t%.0f\t%.0f\t",
		r.System, r.Scenario, r.Store, r.Concurrency, r.OpsPerSec, r.P50ms, r.P99ms, r.Errors, r.CPUClientUs, r.CPUServerUs, r.CPUPostgresUs)
}

// WriteJSONFile writes v as indented JSON to path.
func WriteJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Series names one line of the chart: a system and scenario.
func Series(r Row) string {
	if r.Store != "" && r.Store != "postgres" {
		return r.System + " " + r.Scenario + " (" + r.Store + ")"
	}
	return r.System + " " + r.Scenario
}

// WriteSVG draws ops/s by concurrency, one line per system/scenario that
// was measured at more than one concurrency, on a log-2 x axis and a
// linear y axis.
func WriteSVG(w io.Writer, title string, rows []Row) error {
	const width, height, left, right, top, bottom = 900, 460, 70, 300, 40, 50
	series := map[string][]Row{}
	var names []string
	var levels []int
	maxY := 1.0
	for _, r := range rows {
		s := Series(r)
		if _, ok := series[s]; !ok {
			names = append(names, s)
		}
		series[s] = append(series[s], r)
		if !slices.Contains(levels, r.Concurrency) {
			levels = append(levels, r.Concurrency)
		}
		maxY = max(maxY, r.OpsPerSec)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return len(series[n]) < 2 })
	slices.Sort(levels)
	maxY = niceCeil(maxY)
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	x := func(c int) float64 {
		i := slices.Index(levels, c)
		if len(levels) == 1 {
			return float64(left) + pw/2
		}
		return float64(left) + pw*float64(i)/float64(len(levels)-1)
	}
	y := func(v float64) float64 { return float64(top) + ph*(1-v/maxY) }
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="15">%s</text>`+"\n", left, esc(title))
	for i := 0; i <= 5; i++ {
		v := maxY * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			left, width-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for _, c := range levels {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">c=%d</text>`+"\n", x(c), height-bottom+18, c)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">concurrency</text>`+"\n", left+int(pw/2), height-10)
	fmt.Fprintf(&b, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">ops/s</text>`+"\n", top+int(ph/2), top+int(ph/2))
	for i, n := range names {
		col := colors[i%len(colors)]
		pts := series[n]
		slices.SortFunc(pts, func(a, b Row) int { return a.Concurrency - b.Concurrency })
		var path []string
		for _, p := range pts {
			path = append(path, fmt.Sprintf("%.1f,%.1f", x(p.Concurrency), y(p.OpsPerSec)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", col, strings.Join(path, " "))
		for _, p := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(p.Concurrency), y(p.OpsPerSec), col)
		}
		ly := top + 10 + 18*i
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			width-right+16, ly-10, col, width-right+34, ly, esc(n))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
