package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines decodes JSON log lines.
func lines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		got = append(got, m)
	}
	return got
}

func TestBufferedLogWritesEveryLineInOrder(t *testing.T) {
	var out syncBuffer
	b, err := newBufferedLog("info", "json", &out, 1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000 // past kickBytes, so the writer also runs before the tick
	for i := range n {
		b.Logger.Info("journal call", "i", i)
	}
	b.Flush()
	got := lines(t, out.String())
	if len(got) != n {
		t.Fatalf("%d lines after Flush, want %d", len(got), n)
	}
	for i, m := range got {
		if m["i"] != float64(i) {
			t.Fatalf("line %d is %v: out of order", i, m["i"])
		}
	}
	b.Stop()
	b.Logger.Info("after stop") // written through, at once
	if got := lines(t, out.String()); len(got) != n+1 || got[n]["msg"] != "after stop" {
		t.Fatalf("the line logged after Stop was not written: %d lines", len(got))
	}
}

// A reader of the log that stops reading (a full pipe) must not hold up
// the calls that log; what does not fit is dropped, counted, and said.
func TestBufferedLogNeverBlocksOnAStalledOutput(t *testing.T) {
	pr, pw := io.Pipe() // every Write blocks until the test reads
	b, err := newBufferedLog("info", "json", pw, 64<<10, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	logged := make(chan struct{})
	const n = 5000 // about 400 KiB of lines: six times the buffer
	go func() {
		for i := range n {
			b.Logger.Info("journal call", "i", i, "pad", strings.Repeat("x", 40))
		}
		close(logged)
	}()
	select {
	case <-logged:
	case <-time.After(30 * time.Second):
		t.Fatal("logging blocked on an output nobody reads")
	}
	dropped := b.Dropped()
	if dropped == 0 {
		t.Fatal("nothing dropped, though the output took nothing and the buffer holds a sixth of the lines")
	}
	var out syncBuffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, pr); close(copied) }()
	b.Stop()
	_ = pw.Close()
	<-copied
	got := lines(t, out.String())
	// Lines dropped while a drain is blocked are reported by the next one,
	// so there may be several warnings; together they account for all.
	warned, warnings := 0.0, 0
	last := -1.0
	for _, m := range got {
		if m["msg"] == "log lines dropped: the log's output fell behind" {
			if m["level"] != "WARN" {
				t.Fatalf("warning %v not at WARN", m)
			}
			warned += m["dropped"].(float64)
			warnings++
			continue
		}
		if i := m["i"].(float64); i <= last {
			t.Fatalf("line %v after %v: out of order", i, last)
		} else {
			last = i
		}
	}
	// A warning may itself be dropped (and reported by the next one), so
	// Dropped is read after Stop, and it may exceed the journal lines lost.
	all := b.Dropped()
	if warned != float64(all) {
		t.Fatalf("warnings account for %v dropped lines, Dropped says %d", warned, all)
	}
	if lost := n - (len(got) - warnings); lost < int(dropped) || lost > int(all) {
		t.Fatalf("%d of %d lines lost, but %d were dropped while logging and %d in all", lost, n, dropped, all)
	}
}

// Warnings and errors do not wait for the tick.
func TestBufferedLogWritesWarningsAtOnce(t *testing.T) {
	var out syncBuffer
	b, err := newBufferedLog("info", "text", &out, 1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	b.Logger.Info("quiet")
	b.Logger.Warn("loud")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "msg=loud") {
		if time.Now().After(deadline) {
			t.Fatal("a warning waited for the tick")
		}
		time.Sleep(time.Millisecond) // polling a condition, not a guess at timing
	}
	if !strings.Contains(out.String(), "msg=quiet") {
		t.Fatal("the info line before the warning was not written with it")
	}
}
