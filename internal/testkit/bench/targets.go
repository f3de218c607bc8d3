package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// HotPathTargets is the table of the hot path's targets: every figure
// with a target (fused and full-cycle ratios to raw SQL, server CPU, REST
// against gRPC, the replay, one caller, the peers), how it is computed from a run's
// rows, and the comparison it must pass. CheckTargets evaluates it; the
// bench prints the result at the end of every run and writes it into
// summary.json and RESULTS.md.
//
// The scenarios are opjournal-bench's: raw-sql full-cycle (the protocol's three
// statements), opjournal full-cycle-grpc, fused-grpc, fused-rest and
// replay-grpc, grpc noop-health-check (the ceiling of any RPC on the
// connection), the same opjournal scenarios on the SQLite store, the peers
// (dbos workflow-1-step, river unique-job) and the growth row
// (opjournal fused-grpc-at-N). Server CPU is the opjournal server
// process's CPU time from /proc over the point (warm-up included) divided
// by the operations it completed (RunWithCPU).
var HotPathTargets = []Target{
	{
		Name: "fused gRPC / raw SQL (3 statements) at c=32", Cmp: AtLeast, Threshold: 1.3,
		How:           "ops/s of opjournal fused-grpc ÷ ops/s of raw-sql full-cycle, PostgreSQL, c=32",
		Compute:       opsRatio(Ref{"opjournal", "fused-grpc", "postgres", 32}, Ref{"raw-sql", "full-cycle", "postgres", 32}),
		CPUNormalised: cpuRatio(Ref{"opjournal", "fused-grpc", "postgres", 32}, Ref{"raw-sql", "full-cycle", "postgres", 32}),
	},
	{
		Name: "full cycle gRPC / raw SQL at c=32", Cmp: AtLeast, Threshold: 0.9,
		How:           "ops/s of opjournal full-cycle-grpc ÷ ops/s of raw-sql full-cycle, PostgreSQL, c=32",
		Compute:       opsRatio(Ref{"opjournal", "full-cycle-grpc", "postgres", 32}, Ref{"raw-sql", "full-cycle", "postgres", 32}),
		CPUNormalised: cpuRatio(Ref{"opjournal", "full-cycle-grpc", "postgres", 32}, Ref{"raw-sql", "full-cycle", "postgres", 32}),
	},
	{
		Name: "server CPU per fused operation at c=32", Cmp: AtMost, Threshold: 80, Unit: "µs",
		How:     "cpu_server_us_per_op of opjournal fused-grpc, PostgreSQL, c=32",
		Compute: serverCPU(Ref{"opjournal", "fused-grpc", "postgres", 32}),
	},
	{
		Name: "REST fused / gRPC fused at c=32", Cmp: AtLeast, Threshold: 0.85,
		How:           "ops/s of opjournal fused-rest ÷ ops/s of opjournal fused-grpc, PostgreSQL, c=32",
		Compute:       opsRatio(Ref{"opjournal", "fused-rest", "postgres", 32}, Ref{"opjournal", "fused-grpc", "postgres", 32}),
		CPUNormalised: cpuRatio(Ref{"opjournal", "fused-rest", "postgres", 32}, Ref{"opjournal", "fused-grpc", "postgres", 32}),
	},
	{
		Name: "replay / no-op gRPC call ceiling at c=32", Cmp: AtLeast, Threshold: 0.5,
		How:           "ops/s of opjournal replay-grpc ÷ ops/s of grpc noop-health-check (same connection), c=32",
		Compute:       opsRatio(Ref{"opjournal", "replay-grpc", "postgres", 32}, Ref{"grpc", "noop-health-check", "postgres", 32}),
		CPUNormalised: cpuRatio(Ref{"opjournal", "replay-grpc", "postgres", 32}, Ref{"grpc", "noop-health-check", "postgres", 32}),
	},
	{
		Name: "SQLite fused: server CPU per operation at c=32", Cmp: AtMost, Threshold: 250, Unit: "µs",
		How:     "cpu_server_us_per_op of opjournal fused-grpc on the SQLite store (its own server process), c=32",
		Compute: serverCPU(Ref{"opjournal", "fused-grpc", "sqlite", 32}),
	},
	{
		Name: "one caller: fused p50 / raw SQL p50", Cmp: AtMost, Threshold: 1.3,
		How:     "p50_ms of opjournal fused-grpc ÷ p50_ms of raw-sql full-cycle, PostgreSQL, c=1",
		Compute: p50Ratio(Ref{"opjournal", "fused-grpc", "postgres", 1}, Ref{"raw-sql", "full-cycle", "postgres", 1}),
	},
	{
		Name: "one caller: server CPU per fused operation", Cmp: AtMost, Threshold: 250, Unit: "µs",
		How:     "cpu_server_us_per_op of opjournal fused-grpc, PostgreSQL, c=1",
		Compute: serverCPU(Ref{"opjournal", "fused-grpc", "postgres", 1}),
	},
	{
		Name: "gateway HTTP at one caller: added p50 / fused gRPC p50", Cmp: AtMost, Threshold: 1,
		How:     "(p50_ms of gateway gateway-http − p50_ms of gateway direct-http, the provider called straight) ÷ p50_ms of gateway fused-grpc (the fused SDK path, in the gateway's rounds), c=1",
		Compute: gatewayAdded("http"),
	},
	{
		Name: "gateway MCP at one caller: added p50 / fused gRPC p50", Cmp: AtMost, Threshold: 1,
		How:     "(p50_ms of gateway gateway-mcp − p50_ms of gateway direct-mcp) ÷ p50_ms of gateway fused-grpc, c=1",
		Compute: gatewayAdded("mcp"),
	},
	{
		Name: "ahead of DBOS at every c (lowest fused / DBOS)", Cmp: Above, Threshold: 1,
		How:     "lowest, over the levels opjournal fused-grpc ran at, of its ops/s ÷ ops/s of dbos workflow-1-step",
		Compute: aheadAtEveryLevel("dbos", "workflow-1-step"),
	},
	{
		Name: "ahead of River at every c (lowest fused / River)", Cmp: Above, Threshold: 1,
		How:     "lowest, over the levels opjournal fused-grpc ran at, of its ops/s ÷ ops/s of river unique-job",
		Compute: aheadAtEveryLevel("river", "unique-job"),
	},
	{
		Name: "p99 at the grown journal / empty (fused gRPC)", Cmp: AtMost, Threshold: 1.2,
		How:     "p99_ms of opjournal fused-grpc-at-N (a server on a journal of N bulk-loaded operations; N = --growth-rows) ÷ p99_ms of fused-grpc-at-0 (a server on an empty journal), in alternating rounds at the same c",
		Compute: growthP99,
	},
}

// Cmp is the comparison a target's figure must pass against its threshold.
type Cmp string

// The comparisons of a target.
const (
	AtLeast Cmp = "≥"
	AtMost  Cmp = "≤"
	Above   Cmp = ">"
)

func (c Cmp) holds(v, threshold float64) bool {
	switch c {
	case AtLeast:
		return v >= threshold
	case AtMost:
		return v <= threshold
	case Above:
		return v > threshold
	}
	return false
}

// Target is one figure with its target: Compute derives the figure from a
// run's rows, and the figure, rounded as it is printed (Decimals), must
// pass Cmp against Threshold.
type Target struct {
	Name      string
	How       string // how the figure is computed, in words: the scenarios and fields it reads
	Cmp       Cmp
	Threshold float64
	Unit      string // "" for a ratio
	// Compute returns the figure and a detail (the inputs). An error
	// wrapping ErrNotRun makes the figure SKIP; any other error is a MISS.
	Compute func(rows []Row) (value float64, detail string, err error)
	// CPUNormalised, for a ratio of throughputs, is the same ratio
	// estimated from the CPU each side spends per operation (all of
	// it: client, server, PostgreSQL): B's over A's. When both sides are
	// CPU-bound on the same cores, as at 32 callers on this machine, ops/s
	// is the CPU they get over their CPU per operation, so the two agree
	// on a quiet machine (within 0.06 in the run of 2026-12-01 15:26);
	// on a shared one another tenant takes CPU from one side and not the
	// other, which moves the ops/s ratio but hardly the CPU per operation.
	// It is reported beside the figure, never instead of it.
	CPUNormalised func(rows []Row) (float64, error)
}

// Decimals is the precision the figure is printed and compared at: whole
// microseconds for CPU, hundredths for ratios.
func (t Target) Decimals() int {
	if t.Unit == "µs" {
		return 0
	}
	return 2
}

// The verdicts of a target.
const (
	Met  = "MET"
	Miss = "MISS"
	Skip = "SKIP"
)

// TargetResult is a target evaluated on one run, as summary.json holds it.
type TargetResult struct {
	Name       string   `json:"name"`
	How        string   `json:"how"`
	Comparison Cmp      `json:"comparison"`
	Threshold  float64  `json:"threshold"`
	Unit       string   `json:"unit,omitempty"`
	Measured   *float64 `json:"measured,omitempty"` // nil when the figure could not be computed
	Verdict    string   `json:"verdict"`
	Detail     string   `json:"detail,omitempty"` // the inputs, or why it was skipped or missed
	// Measured in rounds: the figure of each round, their median (the
	// figure Measured holds and the verdict is on) and their spread,
	// (max − min) / median; Unstable when the spread is above
	// UnstableSpread. Absent for a run without rounds.
	Rounds   []float64 `json:"rounds,omitempty"`
	Median   *float64  `json:"median,omitempty"`
	Spread   *float64  `json:"spread,omitempty"`
	Unstable bool      `json:"unstable,omitempty"`
	// The CPU-normalised estimate of a throughput ratio
	// (Target.CPUNormalised) in each round, its median and spread.
	CPURounds []float64 `json:"cpu_normalised_rounds,omitempty"`
	CPUMedian *float64  `json:"cpu_normalised_median,omitempty"`
	CPUSpread *float64  `json:"cpu_normalised_spread,omitempty"`
}

// ErrNotRun marks a figure whose scenario did not run (SKIP).
var ErrNotRun = errors.New("not run")

// CheckTargets evaluates targets on rows: MET or MISS for each figure
// computed, on its value rounded to t.Decimals(); MISS, with why, for a
// figure whose scenario ran without one successful operation; SKIP, with
// why, for one whose scenario did not run or left no CPU figure.
//
// When the rows were measured in rounds (Row.Round), each figure is
// computed in every round from that round's rows (RoundRows), and the
// verdict is on the median of the rounds; Rounds, Median and Spread hold
// them, and a spread above UnstableSpread marks the figure Unstable. A
// round in which a scenario failed makes the figure a MISS.
func CheckTargets(targets []Target, rows []Row) []TargetResult {
	rounds := Rounds(rows)
	out := make([]TargetResult, 0, len(targets))
	for _, t := range targets {
		r := TargetResult{Name: t.Name, How: t.How, Comparison: t.Cmp, Threshold: t.Threshold, Unit: t.Unit}
		if len(rounds) == 0 {
			v, detail, err := t.Compute(rows)
			r.judge(t, v, detail, err)
			out = append(out, r)
			continue
		}
		var vals []float64
		var details []string
		var failed, skipped, stalled error
		var used []int
		for _, n := range rounds {
			v, detail, err := t.Compute(RoundRows(rows, n))
			switch {
			case errors.Is(err, ErrNotRun):
				skipped = cmp.Or(skipped, err)
			case errors.Is(err, errStalled):
				stalled = cmp.Or(stalled, fmt.Errorf("round %d left out: %w", n, err))
			case err == nil && (math.IsNaN(v) || math.IsInf(v, 0)):
				failed = cmp.Or(failed, fmt.Errorf("round %d: no finite figure (%v): %s", n, v, detail))
			case err != nil:
				failed = cmp.Or(failed, fmt.Errorf("round %d: %w", n, err))
			default:
				vals, details, used = append(vals, v), append(details, detail), append(used, n)
			}
		}
		switch {
		case failed != nil:
			r.judge(t, 0, "", failed)
		case len(vals) == 0 && stalled != nil:
			r.judge(t, 0, "", fmt.Errorf("every round stalled: %w", stalled))
		case len(vals) == 0:
			r.judge(t, 0, "", skipped)
		default:
			med := Median(vals)
			// The detail of the round nearest the median: its inputs.
			near := 0
			for i, v := range vals {
				if math.Abs(v-med) < math.Abs(vals[near]-med) {
					near = i
				}
			}
			r.judge(t, med, details[near], nil)
			spread := math.Round(Spread(vals)*1e4) / 1e4
			r.Spread, r.Unstable = &spread, spread > UnstableSpread
			r.Median = r.Measured
			for _, v := range vals {
				r.Rounds = append(r.Rounds, math.Round(v*1e4)/1e4)
			}
			r.Detail = "median round: " + r.Detail
			if stalled != nil {
				r.Detail += "; " + stalled.Error()
			}
			r.cpuNormalised(t, rows, used)
		}
		out = append(out, r)
	}
	return out
}

// cpuNormalised sets r's CPU-normalised figures, if t has them and every
// round has CPU figures for both sides.
func (r *TargetResult) cpuNormalised(t Target, rows []Row, rounds []int) {
	if t.CPUNormalised == nil {
		return
	}
	var vals []float64
	for _, n := range rounds {
		v, err := t.CPUNormalised(RoundRows(rows, n))
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		vals = append(vals, v)
	}
	med := math.Round(Median(vals)*100) / 100
	spread := math.Round(Spread(vals)*1e4) / 1e4
	r.CPUMedian, r.CPUSpread = &med, &spread
	for _, v := range vals {
		r.CPURounds = append(r.CPURounds, math.Round(v*1e4)/1e4)
	}
}

// judge sets r's verdict for the figure v (rounded to t.Decimals()) or the
// error of computing it.
func (r *TargetResult) judge(t Target, v float64, detail string, err error) {
	switch {
	case errors.Is(err, ErrNotRun):
		r.Verdict, r.Detail = Skip, err.Error()
	case err != nil:
		r.Verdict, r.Detail = Miss, err.Error()
	case math.IsNaN(v) || math.IsInf(v, 0):
		r.Verdict, r.Detail = Miss, fmt.Sprintf("no finite figure (%v): %s", v, detail)
	default:
		p := math.Pow(10, float64(t.Decimals()))
		v = math.Round(v*p) / p
		r.Measured, r.Detail = &v, detail
		r.Verdict = Miss
		if t.Cmp.holds(v, t.Threshold) {
			r.Verdict = Met
		}
	}
}

// Missed returns how many results are MISS.
func Missed(results []TargetResult) int {
	n := 0
	for _, r := range results {
		if r.Verdict == Miss {
			n++
		}
	}
	return n
}

// Value renders the measured figure ("0.84", "209 µs"; "-" if none).
func (r TargetResult) Value() string {
	if r.Measured == nil {
		return "-"
	}
	return withUnit(strconv.FormatFloat(*r.Measured, 'f', r.decimals(), 64), r.Unit)
}

// decimals is the precision of the figure, as Target.Decimals.
func (r TargetResult) decimals() int { return Target{Unit: r.Unit}.Decimals() }

// Want renders the comparison and threshold ("≥ 1.3", "≤ 80 µs").
func (r TargetResult) Want() string {
	return string(r.Comparison) + " " + withUnit(strconv.FormatFloat(r.Threshold, 'g', -1, 64), r.Unit)
}

func withUnit(v, unit string) string {
	if unit == "" {
		return v
	}
	return v + " " + unit
}

// WriteTargets prints results as aligned lines, one per figure, each
// after prefix:
//
//	MET  fused gRPC / raw SQL (3 statements) at c=32  1.34 ≥ 1.3  4000 vs 3000 ops/s
func WriteTargets(w io.Writer, prefix string, results []TargetResult) {
	var nameW, valueW, wantW int
	for _, r := range results {
		nameW = max(nameW, utf8.RuneCountInString(r.Name))
		valueW = max(valueW, utf8.RuneCountInString(r.Value()))
		wantW = max(wantW, utf8.RuneCountInString(r.Want()))
	}
	for _, r := range results {
		detail := r.Detail
		if s := r.SpreadText(); s != "" {
			detail = s + "; " + detail
		}
		line := fmt.Sprintf("%s%-4s %s  %s %s  %s", prefix, r.Verdict, Pad(r.Name, nameW, false), Pad(r.Value(), valueW, true), Pad(r.Want(), wantW, false), detail)
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

// Pad pads s with spaces to n runes, on the left if right is set (fmt's
// widths count bytes, and "≥" and "µ" take more than one).
func Pad(s string, n int, right bool) string {
	sp := strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s)))
	if right {
		return sp + s
	}
	return s + sp
}

// TargetsMarkdown renders results as a Markdown table.
func TargetsMarkdown(results []TargetResult) string {
	var b strings.Builder
	rounds := slices.ContainsFunc(results, func(r TargetResult) bool { return r.Spread != nil })
	if !rounds {
		b.WriteString("| verdict | figure | measured | target | how it is computed | detail |\n|---|---|--:|---|---|---|\n")
		for _, r := range results {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Verdict, mdCell(r.Name), r.Value(), r.Want(), mdCell(r.How), mdCell(r.Detail))
		}
		return b.String()
	}
	b.WriteString("| verdict | figure | median | target | spread | rounds | CPU-normalised (spread) | how it is computed | detail |\n|---|---|--:|---|--:|---|--:|---|---|\n")
	for _, r := range results {
		spread, perRound := "-", "-"
		if r.Spread != nil {
			spread = fmt.Sprintf("%.0f%%", *r.Spread*100)
			if r.Unstable {
				spread = "**" + spread + " unstable**"
			}
			perRound = roundsText(r.Rounds, r.decimals())
		}
		cpu := "-"
		if r.CPUMedian != nil {
			cpu = fmt.Sprintf("%.2f (%.0f%%)", *r.CPUMedian, *r.CPUSpread*100)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Verdict, mdCell(r.Name), r.Value(), r.Want(), spread, perRound, cpu, mdCell(r.How), mdCell(r.Detail))
	}
	return b.String()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Ref names one row: a system's scenario on a store at a concurrency.
type Ref struct {
	System, Scenario, Store string
	C                       int
}

func (r Ref) String() string {
	return fmt.Sprintf("%s %s (%s) c=%d", r.System, r.Scenario, r.Store, r.C)
}

// flag is the --scenarios name of opjournal-bench that runs the row.
func (r Ref) flag() string {
	switch {
	case r.Store == "sqlite":
		return "sqlite"
	case r.System == "raw-sql" || r.System == "grpc":
		return r.System
	case r.System == "dbos" || r.System == "river":
		return "peers"
	case strings.HasPrefix(r.Scenario, "fused-grpc-at-"):
		return "growth"
	case r.System == "gateway":
		return "gateway"
	}
	return r.Scenario
}

// row returns the row ref names. It fails with ErrNotRun if there is
// none, and otherwise if the row has no successful operation.
func row(rows []Row, ref Ref) (Row, error) {
	i := slices.IndexFunc(rows, func(r Row) bool {
		return r.System == ref.System && r.Scenario == ref.Scenario && r.Store == ref.Store && r.Concurrency == ref.C
	})
	if i < 0 {
		levels := "--concurrency"
		if ref.System == "gateway" {
			levels = "--gateway-concurrency"
		}
		return Row{}, fmt.Errorf("%s %w (--scenarios %s, %s %d)", ref, ErrNotRun, ref.flag(), levels, ref.C)
	}
	r := rows[i]
	if r.OpsPerSec <= 0 && r.Errors == 0 && r.Round > 0 {
		return r, fmt.Errorf("%s %w: no operation started and ended in the round's window, and none failed", ref, errStalled)
	}
	if r.OpsPerSec <= 0 {
		return r, fmt.Errorf("%s completed no operation (%d errors) %s", ref, r.Errors, r.Note)
	}
	return r, nil
}

// errStalled marks a round in which a scenario completed nothing and
// failed nothing: one call outlasted the whole window, which a loaded
// machine does. CheckTargets leaves such a round out of the figure (and
// says so) instead of failing it; a figure with every round stalled is a
// MISS.
var errStalled = errors.New("stalled")

// combine joins errs on one line. The result is ErrNotRun (SKIP) only if
// every error is: a scenario that ran and failed makes the figure a MISS
// even when another one it needs did not run.
func combine(errs ...error) error {
	var msgs []string
	notRun, stalled := true, false
	failed := false
	for _, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
			notRun = notRun && errors.Is(err, ErrNotRun)
			stalled = stalled || errors.Is(err, errStalled)
			failed = failed || !errors.Is(err, ErrNotRun) && !errors.Is(err, errStalled)
		}
	}
	switch {
	case len(msgs) == 0:
		return nil
	case notRun:
		return notRunError(strings.Join(msgs, "; "))
	case stalled && !failed:
		return stalledError(strings.Join(msgs, "; "))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// stalledError is a combined message whose only failures are stalls: it
// matches errStalled.
type stalledError string

func (e stalledError) Error() string        { return string(e) }
func (e stalledError) Is(target error) bool { return target == errStalled }

// notRunError is a message that is ErrNotRun.
type notRunError string

func (e notRunError) Error() string        { return string(e) }
func (e notRunError) Is(target error) bool { return target == ErrNotRun }

// errorsNote says how many calls of the rows failed, if any did.
func errorsNote(rs ...Row) string {
	var parts []string
	for _, r := range rs {
		if r.Errors > 0 {
			parts = append(parts, fmt.Sprintf("%s %s: %d errors", r.System, r.Scenario, r.Errors))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// opsRatio is the ops/s of a over the ops/s of b.
func opsRatio(a, b Ref) func([]Row) (float64, string, error) {
	return func(rows []Row) (float64, string, error) {
		ra, errA := row(rows, a)
		rb, errB := row(rows, b)
		if err := combine(errA, errB); err != nil {
			return 0, "", err
		}
		return ra.OpsPerSec / rb.OpsPerSec, fmt.Sprintf("%.0f vs %.0f ops/s%s", ra.OpsPerSec, rb.OpsPerSec, errorsNote(ra, rb)), nil
	}
}

// cpuRatio is the CPU per operation (client + server + PostgreSQL) of b
// over that of a: a's throughput over b's, estimated from their costs.
func cpuRatio(a, b Ref) func([]Row) (float64, error) {
	return func(rows []Row) (float64, error) {
		ra, errA := row(rows, a)
		rb, errB := row(rows, b)
		if err := combine(errA, errB); err != nil {
			return 0, err
		}
		ca, cb := ra.CPUClientUs+ra.CPUServerUs+ra.CPUPostgresUs, rb.CPUClientUs+rb.CPUServerUs+rb.CPUPostgresUs
		if ca <= 0 || cb <= 0 {
			return 0, notRunError(fmt.Sprintf("%s or %s has no CPU figure", a, b))
		}
		return cb / ca, nil
	}
}

// p50Ratio is the p50 latency of a over that of b.
func p50Ratio(a, b Ref) func([]Row) (float64, string, error) {
	return func(rows []Row) (float64, string, error) {
		ra, errA := row(rows, a)
		rb, errB := row(rows, b)
		if err := combine(errA, errB); err != nil {
			return 0, "", err
		}
		return ra.P50ms / rb.P50ms, fmt.Sprintf("p50 %.3f vs %.3f ms%s", ra.P50ms, rb.P50ms, errorsNote(ra, rb)), nil
	}
}

// gatewayAdded is what the gateway adds to the p50 of a call through the
// door (http or mcp) at one caller, over the p50 of the fused SDK path:
// the gateway journals the call with the same two RPCs, so the added time
// above them is the gateway's own.
func gatewayAdded(door string) func([]Row) (float64, string, error) {
	return func(rows []Row) (float64, string, error) {
		g, errG := row(rows, Ref{"gateway", "gateway-" + door, "postgres", 1})
		d, errD := row(rows, Ref{"gateway", "direct-" + door, "postgres", 1})
		f, errF := row(rows, Ref{"gateway", "fused-grpc", "postgres", 1})
		if errors.Is(errF, ErrNotRun) {
			// A run from before the gateway measured its own reference.
			if o, err := row(rows, Ref{"opjournal", "fused-grpc", "postgres", 1}); err == nil {
				f, errF = o, nil
			}
		}
		if err := combine(errG, errD, errF); err != nil {
			return 0, "", err
		}
		added := g.P50ms - d.P50ms
		return added / f.P50ms, fmt.Sprintf("added p50 %.3f ms (%.3f through the gateway vs %.3f direct) vs fused p50 %.3f ms; the gateway's CPU %.0f µs per call%s",
			added, g.P50ms, d.P50ms, f.P50ms, g.CPUServerUs, errorsNote(g, d, f)), nil
	}
}

// serverCPU is the server's CPU per operation of a row.
func serverCPU(ref Ref) func([]Row) (float64, string, error) {
	return func(rows []Row) (float64, string, error) {
		r, err := row(rows, ref)
		if err != nil {
			return 0, "", err
		}
		if r.CPUServerUs <= 0 {
			return 0, "", notRunError(fmt.Sprintf("%s has no server CPU figure (was /proc readable?)", ref))
		}
		detail := fmt.Sprintf("%.0f ops/s; bench client %.0f µs/op", r.OpsPerSec, r.CPUClientUs)
		if ref.Store == "postgres" {
			detail += fmt.Sprintf(", PostgreSQL %.0f µs/op", r.CPUPostgresUs)
		}
		return r.CPUServerUs, detail + errorsNote(r), nil
	}
}

// aheadAtEveryLevel is the lowest ratio of opjournal fused-grpc's ops/s to
// the peer's at each level the fused path ran at on PostgreSQL.
func aheadAtEveryLevel(system, scenario string) func([]Row) (float64, string, error) {
	return func(rows []Row) (float64, string, error) {
		var levels []int
		for _, r := range rows {
			if r.System == "opjournal" && r.Scenario == "fused-grpc" && r.Store == "postgres" && !slices.Contains(levels, r.Concurrency) {
				levels = append(levels, r.Concurrency)
			}
		}
		slices.Sort(levels)
		if len(levels) == 0 {
			return 0, "", fmt.Errorf("opjournal fused-grpc (postgres) %w (--scenarios fused-grpc)", ErrNotRun)
		}
		lowest := math.Inf(1)
		var parts []string
		var errs []error
		for _, l := range levels {
			f, errF := row(rows, Ref{"opjournal", "fused-grpc", "postgres", l})
			p, errP := row(rows, Ref{system, scenario, "postgres", l})
			if err := combine(errF, errP); err != nil {
				errs = append(errs, err)
				continue
			}
			v := f.OpsPerSec / p.OpsPerSec
			lowest = min(lowest, v)
			// Rounded as the figure is (CheckTargets), not as %.2f does (half to even).
			parts = append(parts, fmt.Sprintf("c=%d %.2f (%.0f vs %.0f ops/s)", l, math.Round(v*100)/100, f.OpsPerSec, p.OpsPerSec))
		}
		// Every level must be measured for "at every concurrency": a
		// level that failed is a MISS, one the peer did not run a SKIP.
		if err := combine(errs...); err != nil {
			if len(parts) > 0 {
				err = fmt.Errorf("%w; measured: %s", err, strings.Join(parts, ", "))
			}
			return 0, "", err
		}
		return lowest, strings.Join(parts, ", "), nil
	}
}

// growthP99 is the p99 of the fused path on a journal grown by N
// bulk-loaded operations (fused-grpc-at-N) over its p99 on an empty
// journal at the same concurrency: fused-grpc-at-0, measured in the same
// rounds by a server of its own, or, in runs from before that row
// existed, the level's fused-grpc row.
func growthP99(rows []Row) (float64, string, error) {
	i := slices.IndexFunc(rows, func(r Row) bool {
		return r.System == "opjournal" && strings.HasPrefix(r.Scenario, "fused-grpc-at-") && r.Scenario != emptyJournal && r.Store == "postgres"
	})
	if i < 0 {
		return 0, "", fmt.Errorf("opjournal fused-grpc-at-N (postgres) %w (--scenarios growth, --growth-rows > 0)", ErrNotRun)
	}
	g := rows[i]
	ref := Ref{"opjournal", emptyJournal, "postgres", g.Concurrency}
	if !slices.ContainsFunc(rows, func(r Row) bool { return pointOf(r) == point{ref.System, ref.Scenario, ref.Store, ref.C} }) {
		ref.Scenario = "fused-grpc"
	}
	grown, errG := row(rows, Ref{g.System, g.Scenario, g.Store, g.Concurrency})
	empty, errE := row(rows, ref)
	if err := combine(errG, errE); err != nil {
		return 0, "", err
	}
	return grown.P99ms / empty.P99ms, fmt.Sprintf("%s vs %s c=%d: p99 %.3f vs %.3f ms%s", grown.Scenario, empty.Scenario, grown.Concurrency, grown.P99ms, empty.P99ms, errorsNote(grown, empty)), nil
}

// emptyJournal is the growth figure's reference row: the fused path on a
// journal without the bulk load.
const emptyJournal = "fused-grpc-at-0"
