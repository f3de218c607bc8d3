package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/testkit/bench"
)

// newCompare is `opjournal-bench compare A B`: do two runs' summary.json
// agree?
func newCompare() *cobra.Command {
	var o compareOptions
	cmd := &cobra.Command{
		Use:   "compare A B",
		Short: "say whether two runs agree: every ratio of A's summary.json within --within of B's",
		Long: `Compare two runs' summary.json (A and B: each the file or the results directory
holding it, e.g. harness/bench/results/quick-1 and harness/bench/results/quick-2). For every
figure in both, matched by name (the hot path's targets and the other
targets), it prints A's value, B's, their difference as max/min − 1 and a
verdict: AGREE or DIFFER against --within for a ratio; "absolute" for a figure
with a unit (µs, ms, MiB, bytes, operations/s), which measures the machine's
speed and drifts between runs, unless --absolute judges those too. A figure
in one run only prints "only in A" or "only in B", one without a value in
either (SKIP, not measured) "not measured"; neither fails. The last line counts
the ratios that agree.

Exit status: 0 when every judged figure agrees; 4 when one differs; 2 for a
usage error (not two arguments, a bad --within, a file that is not a
summary.json); 1 when a file cannot be read.`,
		Example: `  opjournal-bench compare harness/bench/results/quick-1 harness/bench/results/quick-2
  opjournal-bench compare --within 0.05 a/summary.json b/summary.json
  opjournal-bench compare --absolute harness/bench/results/quick-1 harness/bench/results/quick-2`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if math.IsNaN(o.within) || o.within < 0 {
				return cli.Usage(fmt.Errorf("--within: %v, want a fraction ≥ 0 (0.10 is 10%%)", o.within))
			}
			a, err := readSummary(args[0])
			if err != nil {
				return err
			}
			b, err := readSummary(args[1])
			if err != nil {
				return err
			}
			return compare(cmd.OutOrStdout(), a, b, o)
		},
	}
	cmd.Flags().Float64Var(&o.within, "within", 0.10, "the largest difference, max/min − 1, at which two figures agree (0.10: 10%)")
	cmd.Flags().BoolVar(&o.absolute, "absolute", false, "judge the figures with a unit (µs, ms, MiB, bytes, operations/s) too, not only the ratios")
	return cmd
}

// compareOptions are compare's flags.
type compareOptions struct {
	within   float64 // the largest max/min − 1 at which two figures agree
	absolute bool    // judge the figures with a unit too
}

// errRunsDiffer is compare's error when a judged figure differs: the
// process exits with status 4 (exit).
type errRunsDiffer struct {
	differ, judged int
	within         string // --within in percent: "10"
}

func (e errRunsDiffer) Error() string {
	return fmt.Sprintf("the runs differ: %d of %d judged figures differ by more than %s%%", e.differ, e.judged, e.within)
}

// readSummary reads path, a summary.json or a results directory holding
// one. An unreadable file is an error of its own (status 1), one that is
// not a summary.json a usage error.
func readSummary(path string) (summary, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "summary.json")
	}
	var s summary
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err // the error names the file
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return s, cli.Usage(fmt.Errorf("%s: not a summary.json: %w", path, err))
	}
	if keys["hot_path_targets"] == nil && keys["targets"] == nil {
		return s, cli.Usage(fmt.Errorf("%s: not a summary.json: neither hot_path_targets nor targets in it", path))
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, cli.Usage(fmt.Errorf("%s: not a summary.json: %w", path, err))
	}
	return s, nil
}

// figure is one named value of a summary: a hot path's target or one of
// the other targets.
type figure struct {
	name  string
	unit  string // "" for a ratio, or one whose unit is not known
	ratio bool   // false: an absolute measure, judged only with --absolute
	value *float64
}

// text renders the value with its unit, as the report prints it.
func (f figure) text() string {
	if f.value == nil {
		return "-"
	}
	s := strconv.FormatFloat(*f.value, 'f', bench.Target{Unit: f.unit}.Decimals(), 64)
	if f.unit != "" {
		s += " " + f.unit
	}
	return s
}

// figures are the summary's figures, the hot path's first, in its order.
func figures(s summary) []figure {
	var out []figure
	for _, r := range s.HotPath {
		f := figure{name: r.Name, unit: r.Unit, ratio: r.Unit == "", value: r.Measured}
		if r.Verdict == bench.Skip {
			f.value = nil
		}
		out = append(out, f)
	}
	for _, t := range s.Targets {
		unit, ratio := otherUnit(t.Name)
		f := figure{name: t.Name, unit: unit, ratio: ratio}
		if verdict(t) != "n/a" {
			v := t.Measured
			f.value = &v
		}
		out = append(out, f)
	}
	return out
}

// otherUnit is the unit of one of the other targets (type target has no
// field for it), read from its name: "(ms)", "MiB", "bytes", "µs",
// "operations/s"; ratio is false for those. A name without a unit is a
// ratio when it has " / " (a quotient); any other is taken for an absolute
// figure whose unit it does not name, so that it is not judged by default.
func otherUnit(name string) (unit string, ratio bool) {
	for _, u := range []struct{ mark, unit string }{
		{"(ms)", "ms"}, {"MiB", "MiB"}, {"bytes", "bytes"}, {"µs", "µs"}, {"operations/s", "operations/s"}, {"ops/s", "operations/s"},
	} {
		if strings.Contains(name, u.mark) {
			return u.unit, false
		}
	}
	return "", strings.Contains(name, " / ")
}

// difference is max/min − 1 of a and b; when the smaller is 0 or less,
// |a − b| / max(|a|, |b|) (0 when both are 0).
func difference(a, b float64) float64 {
	lo, hi := min(a, b), max(a, b)
	if lo > 0 {
		return hi/lo - 1
	}
	if a == b {
		return 0
	}
	return math.Abs(a-b) / max(math.Abs(a), math.Abs(b))
}

// agree reports whether a and b agree within within: both 0 do, one 0
// and the other not never do.
func agree(a, b, within float64) bool {
	if (a == 0) != (b == 0) {
		return false
	}
	// The figures are printed rounded: 1.10 against 1.00 is 10%, not the
	// 10.000000000000009% of its floating-point quotient.
	return difference(a, b) <= within+1e-9
}

// compareLine is one line of compare's table.
type compareLine struct {
	name, a, b, diff, verdict string
}

// compare prints a line per figure of a and b and the tally; its error is
// errRunsDiffer when a judged figure differs.
func compare(w io.Writer, a, b summary, o compareOptions) error {
	fa, fb := figures(a), figures(b)
	inB := map[string]figure{}
	for _, f := range fb {
		inB[f.name] = f
	}
	inA := map[string]bool{}
	var lines []compareLine
	var ratios, ratiosAgree, abs, absAgree int
	for _, x := range fa {
		inA[x.name] = true
		y, ok := inB[x.name]
		l := compareLine{name: x.name, a: x.text(), b: "-", diff: "-"}
		switch {
		case !ok:
			l.verdict = "only in A"
		case x.value == nil || y.value == nil:
			l.b, l.verdict = y.text(), "not measured"
		default:
			l.b = y.text()
			l.diff = fmt.Sprintf("%.1f%%", difference(*x.value, *y.value)*100)
			same := agree(*x.value, *y.value, o.within)
			switch {
			case !x.ratio || !y.ratio:
				l.verdict = "absolute"
				if !o.absolute {
					break
				}
				abs++
				l.verdict = "absolute DIFFER"
				if same {
					absAgree++
					l.verdict = "absolute AGREE"
				}
			default:
				ratios++
				l.verdict = "DIFFER"
				if same {
					ratiosAgree++
					l.verdict = "AGREE"
				}
			}
		}
		lines = append(lines, l)
	}
	for _, y := range fb {
		if !inA[y.name] {
			lines = append(lines, compareLine{name: y.name, a: "-", b: y.text(), diff: "-", verdict: "only in B"})
		}
	}
	writeCompare(w, lines)
	pct := strconv.FormatFloat(o.within*100, 'g', 4, 64)
	fmt.Fprintf(w, "%d of %d ratios agree within %s%%", ratiosAgree, ratios, pct)
	if o.absolute {
		fmt.Fprintf(w, "; %d of %d absolute figures", absAgree, abs)
	}
	fmt.Fprintln(w)
	// The hypervisor's steal in each run: runs that differ on a shared
	// host often differ in it.
	if a.Machine["steal"] != "" || b.Machine["steal"] != "" {
		fmt.Fprintf(w, "steal: A %s; B %s\n", cmp.Or(a.Machine["steal"], "not recorded"), cmp.Or(b.Machine["steal"], "not recorded"))
	}
	if judged, agreed := ratios+abs, ratiosAgree+absAgree; agreed < judged {
		return errRunsDiffer{differ: judged - agreed, judged: judged, within: pct}
	}
	return nil
}

// writeCompare prints the lines in aligned columns, under a header.
func writeCompare(w io.Writer, lines []compareLine) {
	lines = append([]compareLine{{name: "figure", a: "A", b: "B", diff: "diff", verdict: "verdict"}}, lines...)
	var nameW, aW, bW, diffW int
	for _, l := range lines {
		nameW = max(nameW, utf8.RuneCountInString(l.name))
		aW = max(aW, utf8.RuneCountInString(l.a))
		bW = max(bW, utf8.RuneCountInString(l.b))
		diffW = max(diffW, utf8.RuneCountInString(l.diff))
	}
	for _, l := range lines {
		fmt.Fprintf(w, "%s  %s  %s  %s  %s\n", bench.Pad(l.name, nameW, false), bench.Pad(l.a, aW, true), bench.Pad(l.b, bW, true), bench.Pad(l.diff, diffW, true), l.verdict)
	}
}
