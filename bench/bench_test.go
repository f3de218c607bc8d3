package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("Percentile(1..100 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("Percentile(nil) = %v", got)
	}
	if got := Percentile([]time.Duration{7}, 50); got != 7 {
		t.Errorf("Percentile of one sample = %v", got)
	}
}

func TestMillisAndFormat(t *testing.T) {
	if got := Millis(1234567 * time.Nanosecond); got != 1.235 {
		t.Errorf("Millis = %v, want 1.235", got)
	}
	r := Row{System: "opjournal", Scenario: "fused-grpc", Store: "postgres", Concurrency: 32, OpsPerSec: 1234.4, P50ms: 1.234, P99ms: 9.876}
	if got, want := FormatRow(r), "opjournal\tfused-grpc\tpostgres\t32\t1234\t1.23\t9.88\t0\t0\t0\t0\t"; got != want {
		t.Errorf("FormatRow = %q, want %q", got, want)
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, "t <&>", []Row{r, {System: "opjournal", Scenario: "fused-grpc", Concurrency: 64, OpsPerSec: 2000}}); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, "<polyline") || !strings.Contains(s, "t &lt;&amp;&gt;") {
		t.Errorf("SVG lacks the series or the escaped title:\n%s", s)
	}
	if niceCeil(1234) != 2000 || niceCeil(5000) != 5000 {
		t.Errorf("niceCeil(1234) = %v, niceCeil(5000) = %v", niceCeil(1234), niceCeil(5000))
	}
}

func TestReadCPU(t *testing.T) {
	before := ReadCPU(0)
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
	}
	after := ReadCPU(0)
	if after.Client <= before.Client || after.Server != 0 {
		t.Errorf("ReadCPU around 100 ms of spinning: before %+v, after %+v", before, after)
	}
}

func TestRunCountsOnlyAfterWarmup(t *testing.T) {
	var n int
	r := Run(context.Background(), Load{Concurrency: 1, Warmup: 20 * time.Millisecond, Duration: 50 * time.Millisecond},
		func(context.Context, int, int64) error { n++; time.Sleep(time.Millisecond); return nil })
	if r.OpsPerSec <= 0 || r.P50ms < 1 || float64(n) <= r.OpsPerSec*0.05 {
		t.Errorf("Run = %+v after %d calls", r, n)
	}
}
