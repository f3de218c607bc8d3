// Package adaptiveprocs runs a Go server on one P (GOMAXPROCS=1) while it
// serves at most one call at a time, and gives the runtime its default
// back (the CPUs, or the cgroup's CPU limit: runtime.SetDefaultGOMAXPROCS)
// the moment a second call is in flight. opjournal serve counts its gRPC
// calls (REST included, through the same interceptor); opjournal-gateway
// counts the requests of its doors.
//
// Why: one caller's call is a chain of goroutine hand-offs (grpc's reader
// to a stream worker, the worker to the loopy writer, the netpoller to
// pgx or to the next hop), and with an idle second P every hand-off wakes
// a sleeping thread with a futex and lets it go back to sleep: on these
// 2-CPU machines perf counted 25.7 context switches and 699 µs of server
// CPU per fused operation at one caller with the default, 18.4 and 531 µs
// on one P (harness/bench/ANALYSIS.md, "One caller"). With two or more calls in
// flight the second P does useful work, so the governor never holds it
// back then.
package adaptiveprocs

import (
	"context"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"
)

// Governor lowers GOMAXPROCS to 1 after a quiet spell of at most one call
// in flight, and raises it back at the second. Calls are counted with
// Enter and Exit (or Handler); Run does the lowering.
type Governor struct {
	inflight atomic.Int32
	crowded  atomic.Bool // a second call was in flight since the last tick
	one      atomic.Bool // GOMAXPROCS is 1 now
	raise    chan struct{}
	quiet    int           // ticks without a second call before lowering
	tick     time.Duration // how often the governor looks
	ticks    atomic.Int64  // ticks looked at, for tests
}

// New returns a governor that lowers to one P after quiet of one call at
// a time. It does nothing until Run.
func New(quiet time.Duration) *Governor {
	tick := 100 * time.Millisecond
	if quiet < tick {
		tick = quiet
	}
	return &Governor{raise: make(chan struct{}, 1), tick: tick, quiet: max(1, int(quiet/tick))}
}

// Enter counts a call in; a second call in flight on one P asks for the
// default back at once.
func (g *Governor) Enter() {
	if g.inflight.Add(1) > 1 {
		g.crowded.Store(true)
		if g.one.Load() {
			select {
			case g.raise <- struct{}{}:
			default:
			}
		}
	}
}

// Exit counts a call out.
func (g *Governor) Exit() { g.inflight.Add(-1) }

// Handler counts each request h serves as a call, or only those counts
// accepts (nil: all). A request that holds a connection open while it
// waits for nothing (an MCP client's event stream, say) must not count:
// it would keep the second P for a caller that does no work. A nil
// governor returns h as it is.
func (g *Governor) Handler(h http.Handler, counts func(*http.Request) bool) http.Handler {
	if g == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if counts == nil || counts(r) {
			g.Enter()
			defer g.Exit()
		}
		h.ServeHTTP(w, r)
	})
}

// Run governs GOMAXPROCS until ctx is done, then gives the default back.
func (g *Governor) Run(ctx context.Context) {
	defer g.restore()
	t := time.NewTicker(g.tick)
	defer t.Stop()
	calm := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.raise:
			g.restore()
			calm = 0
		case <-t.C:
			g.ticks.Add(1)
			if g.crowded.Swap(false) || g.inflight.Load() > 1 {
				calm = 0
				continue
			}
			if calm++; calm >= g.quiet && !g.one.Load() && runtime.GOMAXPROCS(0) > 1 {
				runtime.GOMAXPROCS(1)
				g.one.Store(true)
				// A second call that came in while lowering is seen now.
				if g.inflight.Load() > 1 {
					g.restore()
				}
			}
		}
	}
}

func (g *Governor) restore() {
	if g.one.Swap(false) {
		runtime.SetDefaultGOMAXPROCS()
	}
}
