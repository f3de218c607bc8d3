package server

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// await polls a condition the governor's goroutine makes true.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestProcsGovernorOneCallOneP(t *testing.T) {
	def := runtime.GOMAXPROCS(0)
	if def < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	g := newProcsGovernor(20 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.run(ctx); close(done) }()
	defer func() {
		cancel()
		<-done
		if n := runtime.GOMAXPROCS(0); n != def {
			t.Errorf("GOMAXPROCS %d after the governor stopped, want the default %d", n, def)
		}
	}()

	g.enter() // one call at a time
	await(t, "GOMAXPROCS=1 after a quiet spell of one call", func() bool { return runtime.GOMAXPROCS(0) == 1 })

	g.enter() // a second call in flight: the default at once, not after a tick
	await(t, "the default back with two calls in flight", func() bool { return runtime.GOMAXPROCS(0) == def })

	// While two are in flight it stays at the default, however long.
	from := g.ticks.Load()
	await(t, "ten more ticks", func() bool { return g.ticks.Load() >= from+10 })
	if n := runtime.GOMAXPROCS(0); n != def {
		t.Fatalf("GOMAXPROCS %d with two calls in flight, want %d", n, def)
	}

	g.exit() // back to one: lowered again after the quiet spell
	await(t, "GOMAXPROCS=1 again", func() bool { return runtime.GOMAXPROCS(0) == 1 })
	g.exit()
}
