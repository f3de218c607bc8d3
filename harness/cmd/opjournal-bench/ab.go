package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// abVariant is one client-side setting of the fused path tried against
// the bench's default connection at the one-caller levels (--ab).
type abVariant struct {
	name, what string
	dial       []grpc.DialOption
	gomaxprocs int // the bench process's GOMAXPROCS during the variant's runs; 0 leaves it
}

// abVariants are the settings --ab can try. Keepalive is not among them:
// its pings go out only after a connection has been idle for their
// interval (10 s at the least the server allows), which a closed loop
// never is. Nor is grpc.WithSharedWriteBuffer: the shared write buffer is
// grpc-go's default now (the option is deprecated and does nothing more).
var abVariants = []abVariant{
	{name: "no-buffers", what: "grpc.WithWriteBufferSize(0), WithReadBufferSize(0): frames go to the socket without the transport's buffers",
		dial: []grpc.DialOption{grpc.WithWriteBufferSize(0), grpc.WithReadBufferSize(0)}},
	{name: "static-window", what: "grpc.WithInitialWindowSize and WithInitialConnWindowSize (1 MiB): a fixed flow-control window, which turns off the BDP estimator's pings",
		dial: []grpc.DialOption{grpc.WithInitialWindowSize(1 << 20), grpc.WithInitialConnWindowSize(1 << 20)}},
	{name: "client-gomaxprocs-1", what: "runtime.GOMAXPROCS(1) in the calling process: its goroutine hand-offs stay on one thread",
		gomaxprocs: 1},
}

// abOps are the operations an A/B can drive (--ab-op): the fused path,
// whose two commits' fsyncs dominate its latency on a busy disk; a replay
// (a whole Register, one read, no commit); and the no-op health check,
// the transport alone. The last two show a transport setting's few µs.
var abOps = map[string]func(conn *grpc.ClientConn, k keyer, name string, replayKeys []string) func(keyer, int) bench.Op{
	"fused": func(conn *grpc.ClientConn, _ keyer, name string, _ []string) func(keyer, int) bench.Op {
		cl := pb.NewJournalServiceClient(conn)
		return func(k keyer, cc int) bench.Op { return fused(cl, k, "ab-"+name, cc) }
	},
	"replay": func(conn *grpc.ClientConn, _ keyer, _ string, keys []string) func(keyer, int) bench.Op {
		cl := pb.NewJournalServiceClient(conn)
		return func(keyer, int) bench.Op { return replay(cl, keys) }
	},
	"noop": func(conn *grpc.ClientConn, _ keyer, _ string, _ []string) func(keyer, int) bench.Op {
		hc := healthpb.NewHealthClient(conn)
		return func(keyer, int) bench.Op { return noop(hc) }
	},
}

// abRows measures an operation (c.abOp of abOps) over the bench's
// connection (scenario OP of system "ab") against each named variant
// (OP+NAME), alternating in rounds at each one-caller level, all on the
// same server.
func abRows(ctx context.Context, c config, addr string, serverPid int, k keyer, names []string, replayKeys []string) ([]bench.Row, error) {
	mk, ok := abOps[c.abOp]
	if !ok {
		return nil, fmt.Errorf("--ab-op: %q, want fused, replay or noop", c.abOp)
	}
	var variants []abVariant
	for _, n := range names {
		i := slices.IndexFunc(abVariants, func(v abVariant) bool { return v.name == n })
		if i < 0 {
			var known []string
			for _, v := range abVariants {
				known = append(known, v.name)
			}
			return nil, fmt.Errorf("--ab: no variant %q (known: %s)", n, strings.Join(known, ", "))
		}
		variants = append(variants, abVariants[i])
	}
	base, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer base.Close()
	steps := []step{{system: "ab", scenario: c.abOp, op: mk(base, k, "base", replayKeys)}}
	for _, v := range variants {
		fmt.Printf("ab: %s = %s\n", v.name, v.what)
		conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, v.dial...)...)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		steps = append(steps, step{system: "ab", scenario: c.abOp + "+" + v.name, op: mk(conn, k, v.name, replayKeys), gomaxprocs: v.gomaxprocs})
	}
	var rows []bench.Row
	for _, cc := range c.oneCaller {
		rows = append(rows, runRounds(ctx, c, cc, serverPid, k, "postgres", steps)...)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

// abTable renders, per variant and level, the median over the rounds of
// the variant's figure over the base's in the same round: p50, p99 and
// the client's and server's CPU per operation (below 1 is better).
func abTable(rows []bench.Row) string {
	var b strings.Builder
	rounds := bench.Rounds(rows)
	type key struct {
		scenario string
		c        int
	}
	byRound := map[key]map[int]bench.Row{}
	var order []key
	for _, r := range rows {
		if r.System != "ab" {
			continue
		}
		kk := key{r.Scenario, r.Concurrency}
		if byRound[kk] == nil {
			byRound[kk] = map[int]bench.Row{}
			order = append(order, kk)
		}
		byRound[kk][r.Round] = r
	}
	for _, kk := range order {
		op, variant, ok := strings.Cut(kk.scenario, "+")
		if !ok {
			continue
		}
		base := byRound[key{op, kk.c}]
		var p50, p99, cli, srv []float64
		for _, n := range rounds {
			v, okV := byRound[kk][n]
			a, okA := base[n]
			if !okV || !okA || a.P50ms <= 0 || v.P50ms <= 0 {
				continue
			}
			p50 = append(p50, v.P50ms/a.P50ms)
			p99 = append(p99, v.P99ms/a.P99ms)
			cli = append(cli, v.CPUClientUs/a.CPUClientUs)
			srv = append(srv, v.CPUServerUs/a.CPUServerUs)
		}
		if len(p50) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| operation | variant | c | p50 variant/base (spread) | p99 | client CPU/op | server CPU/op | rounds |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
		}
		f := func(v []float64) string {
			m := bench.Median(v)
			if math.IsNaN(m) || math.IsInf(m, 0) {
				return "-"
			}
			return fmt.Sprintf("%.3f", m)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s (%.0f%%) | %s | %s | %s | %d |\n", op, variant, kk.c,
			f(p50), bench.Spread(p50)*100, f(p99), f(cli), f(srv), len(p50))
	}
	return b.String()
}
