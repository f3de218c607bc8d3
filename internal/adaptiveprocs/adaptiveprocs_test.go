package adaptiveprocs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
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

func TestOneCallOneP(t *testing.T) {
	def := runtime.GOMAXPROCS(0)
	if def < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	g := New(20 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { g.Run(ctx); close(done) }()
	defer func() {
		cancel()
		<-done
		if n := runtime.GOMAXPROCS(0); n != def {
			t.Errorf("GOMAXPROCS %d after the governor stopped, want the default %d", n, def)
		}
	}()

	g.Enter() // one call at a time
	await(t, "GOMAXPROCS=1 after a quiet spell of one call", func() bool { return runtime.GOMAXPROCS(0) == 1 })

	g.Enter() // a second call in flight: the default at once, not after a tick
	await(t, "the default back with two calls in flight", func() bool { return runtime.GOMAXPROCS(0) == def })

	// While two are in flight it stays at the default, however long.
	from := g.ticks.Load()
	await(t, "ten more ticks", func() bool { return g.ticks.Load() >= from+10 })
	if n := runtime.GOMAXPROCS(0); n != def {
		t.Fatalf("GOMAXPROCS %d with two calls in flight, want %d", n, def)
	}

	g.Exit() // back to one: lowered again after the quiet spell
	await(t, "GOMAXPROCS=1 again", func() bool { return runtime.GOMAXPROCS(0) == 1 })
	g.Exit()
}

// TestHandlerCountsTheRequestsItIsTold counts the requests in flight
// through Handler over a real loopback server: every request without a
// predicate, only the accepted ones with it, and none after they end;
// a nil governor serves the handler as it is.
func TestHandlerCountsTheRequestsItIsTold(t *testing.T) {
	g := New(time.Second)
	var seen atomic.Int32
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen.Store(g.inflight.Load()) })
	posts := func(r *http.Request) bool { return r.Method == http.MethodPost }
	for _, tc := range []struct {
		name   string
		counts func(*http.Request) bool
		method string
		want   int32
	}{
		{"every request", nil, http.MethodGet, 1},
		{"an accepted request", posts, http.MethodPost, 1},
		{"a request it is told to leave out", posts, http.MethodGet, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(g.Handler(inner, tc.counts))
			defer srv.Close()
			req, _ := http.NewRequest(tc.method, srv.URL, nil)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := seen.Load(); got != tc.want {
				t.Errorf("calls in flight while serving: %d, want %d", got, tc.want)
			}
			if n := g.inflight.Load(); n != 0 {
				t.Errorf("calls in flight after the request: %d, want 0", n)
			}
		})
	}
	var none *Governor
	rec := httptest.NewRecorder()
	none.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }), nil).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("through a nil governor: status %d, want the handler's %d", rec.Code, http.StatusTeapot)
	}
}
