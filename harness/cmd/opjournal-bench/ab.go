package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// abVariant is one client-side setting tried against the bench's default
// connection at the run's levels (--ab).
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

// abServer is one server-side variant (--ab-server): a second "opjournal
// serve", started as the run's server is but from its own binary and with
// arguments of its own, on the same schema.
type abServer struct {
	name string
	bin  string   // the server binary (the flag's "-" or nothing: --bin)
	args []string // "opjournal serve" arguments after --server-args, so that they win over them
}

// what describes the variant for the line printed before the A/B: its
// binary and the arguments that set it apart from the run's server.
func (v abServer) what(c config) string {
	s := "the server " + v.bin
	if v.bin == c.bin {
		s += " (--bin)"
	}
	if len(v.args) == 0 {
		s += " with no arguments of its own"
	} else {
		s += " with " + strings.Join(v.args, " ")
	}
	if len(c.serverArgs) > 0 {
		s += " after --server-args " + strings.Join(c.serverArgs, " ")
	}
	return s
}

// abName is what a variant may be called: it ends up in the scenario
// (OP+NAME), in operation keys and in the table.
var abName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// parseABServer reads one --ab-server, 'NAME=BIN [ARG ...]': BIN is the
// first word after the "=" ("-" or none: defaultBin, the run's --bin), and
// the other words are extra "opjournal serve" arguments, split on spaces
// as --server-args is. The binary must exist and be executable: a typo
// is better refused now than after the run's server has started.
func parseABServer(text, defaultBin string) (abServer, error) {
	bad := func(format string, a ...any) (abServer, error) {
		return abServer{}, fmt.Errorf("--ab-server %q: %s; want 'NAME=BIN [ARG ...]' (BIN - for --bin)", text, fmt.Sprintf(format, a...))
	}
	name, rest, ok := strings.Cut(text, "=")
	name = strings.TrimSpace(name)
	if !ok {
		return bad("no \"=\" after the name")
	}
	if !abName.MatchString(name) {
		return bad("name %q: letters, digits, \".\", \"_\" and \"-\", not empty", name)
	}
	if name == "base" {
		// The base's fused keys are "ab-base"; a variant's would be the same.
		return bad("the name \"base\" is the base's")
	}
	v := abServer{name: name, bin: defaultBin}
	words := strings.Fields(rest)
	if len(words) > 0 {
		v.bin, v.args = words[0], words[1:]
	}
	switch {
	case v.bin == "-":
		v.bin = defaultBin
	case strings.HasPrefix(v.bin, "-"):
		return bad("the binary %q looks like an argument: name the binary first, - for --bin (%s=- %s)", v.bin, name, strings.Join(words, " "))
	case !strings.Contains(v.bin, "/"):
		// A path, as the flag says, not a name looked up in $PATH (which
		// exec.Command would do with a bare name).
		v.bin = "./" + v.bin
	}
	if v.bin == defaultBin {
		// The run's --bin, found as exec.Command finds it.
		if _, err := exec.LookPath(v.bin); err != nil {
			return bad("--bin %s: %v", v.bin, err)
		}
		return v, nil
	}
	fi, err := os.Stat(v.bin)
	switch {
	case err != nil:
		return bad("%v", err)
	case !fi.Mode().IsRegular():
		return bad("%s is not a file", v.bin)
	case fi.Mode().Perm()&0o111 == 0:
		return bad("%s is not executable", v.bin)
	}
	return v, nil
}

// parseABServers reads every --ab-server; the names must differ.
func parseABServers(texts []string, defaultBin string) ([]abServer, error) {
	var out []abServer
	for _, t := range texts {
		v, err := parseABServer(t, defaultBin)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, func(o abServer) bool { return o.name == v.name }) {
			return nil, fmt.Errorf("--ab-server %q: a second variant named %q", t, v.name)
		}
		out = append(out, v)
	}
	return out, nil
}

// clientVariants looks up the --ab names in abVariants.
func clientVariants(names []string) ([]abVariant, error) {
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
	return variants, nil
}

// checkAB refuses, before anything starts, the A/B flags that cannot
// work together: an unknown --ab-op or --ab variant, --ab-server without
// --scenarios ab (where nothing would use it), client settings with
// --ab-op rest (they are gRPC dial options, which the REST mirror's HTTP
// client does not have), and two variants of one name (their rows would
// be one scenario).
func checkAB(c config) error {
	if _, ok := abOps[c.abOp]; !ok {
		return fmt.Errorf("--ab-op: %q, want fused, full-cycle, replay, noop or rest", c.abOp)
	}
	if len(c.abServers) > 0 && !c.only["ab"] {
		return errors.New("--ab-server: the server variants run in the A/B only; add --scenarios ab")
	}
	if _, err := clientVariants(c.ab); err != nil {
		return err
	}
	if c.abOp == "rest" && len(c.ab) > 0 {
		return fmt.Errorf("--ab-op rest with --ab %s: the client variants are gRPC dial options and the REST mirror is plain HTTP; "+
			"try them with --ab-op fused, replay or noop, or compare servers over REST with --ab-server alone", strings.Join(c.ab, ","))
	}
	for _, v := range c.abServers {
		if slices.Contains(c.ab, v.name) {
			return fmt.Errorf("--ab-server %s: --ab has a client variant of that name", v.name)
		}
	}
	return nil
}

// abTarget is where an A/B step's operation goes: a gRPC connection and,
// for the rest operation, the same server's REST mirror.
type abTarget struct {
	conn *grpc.ClientConn
	hc   *http.Client
	rest string // "http://" and the server's http_addr ("" for a client variant: not over REST)
}

// step is k for the A/B step named: the servers of an A/B share one
// schema, so each step's keys carry its name, or a variant would find the
// base's keys of the same round registered.
func (k keyer) step(name string) keyer { return keyer(fmt.Sprintf("%s.ab-%s", k, name)) }

// abOps are the operations an A/B can drive (--ab-op): the fused path,
// whose two commits' fsyncs dominate its latency on a busy disk; a replay
// (a whole Register, one read, no commit); the no-op health check, the
// transport alone; the full cycle (Register, then Claim, then
// MarkSucceeded); and the fused path over the REST mirror (the server's
// HTTP gateway and JSON codec besides). The replay and the no-op show a
// transport setting's few µs.
var abOps = map[string]func(t abTarget, name string, replayKeys []string) func(keyer, int) bench.Op{
	"fused": func(t abTarget, name string, _ []string) func(keyer, int) bench.Op {
		cl := pb.NewJournalServiceClient(t.conn)
		return func(k keyer, cc int) bench.Op { return fused(cl, k, "ab-"+name, cc) }
	},
	"replay": func(t abTarget, _ string, keys []string) func(keyer, int) bench.Op {
		cl := pb.NewJournalServiceClient(t.conn)
		return func(keyer, int) bench.Op { return replay(cl, keys) }
	},
	"full-cycle": func(t abTarget, name string, _ []string) func(keyer, int) bench.Op {
		// Register, Claim, MarkSucceeded: the Claim on its own is what
		// reads an operation's action (the journal's action cache).
		cl := pb.NewJournalServiceClient(t.conn)
		return func(k keyer, cc int) bench.Op { return fullCycle(cl, k.step(name), cc) }
	},
	"noop": func(t abTarget, _ string, _ []string) func(keyer, int) bench.Op {
		hc := healthpb.NewHealthClient(t.conn)
		return func(keyer, int) bench.Op { return noop(hc) }
	},
	"rest": func(t abTarget, name string, _ []string) func(keyer, int) bench.Op {
		return func(k keyer, cc int) bench.Op { return restFused(t.hc, t.rest, k.step(name), cc) }
	},
}

// abRows measures an operation (c.abOp of abOps) over the bench's
// connection to the run's server srv (scenario OP of system "ab") against
// each client variant (c.ab: the same server over a connection dialed
// with the variant's options) and each server variant (c.abServers: a
// server of its own, started by startABServer on the run's schema and
// dialed as srv is, its CPU the row's server CPU), as scenario OP+NAME,
// alternating in rounds at each of the run's levels (the one-caller
// ones and --concurrency). The variants' servers are stopped at the end.
func abRows(ctx context.Context, c config, srv *procs.Proc, dbURL string, log io.Writer, k keyer, replayKeys []string) ([]bench.Row, error) {
	if err := checkAB(c); err != nil {
		return nil, err
	}
	mk := abOps[c.abOp]
	variants, err := clientVariants(c.ab)
	if err != nil {
		return nil, err
	}
	// Each target's HTTP client has its own idle connections, so that
	// no step reuses another server's (or the base's warm) connections.
	newHTTP := func() *http.Client { return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}} }
	var closers []func()
	defer func() {
		for _, f := range slices.Backward(closers) {
			f()
		}
	}()
	// The base is dialed as the run's connection and every server
	// variant's are (dial: the SDK's codec), so that a server variant
	// differs from the base by its server alone, and a client variant by
	// its options alone.
	base, err := dial(srv)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { base.Close() })
	baseHTTP := newHTTP()
	closers = append(closers, baseHTTP.CloseIdleConnections)
	fmt.Printf("ab: base = the run's server %s (pid %d), the bench's default connection\n", c.bin, srv.Pid())
	steps := []step{{system: "ab", scenario: c.abOp, op: mk(abTarget{conn: base, hc: baseHTTP, rest: "http://" + srv.Field("http_addr")}, "base", replayKeys)}}
	for _, v := range variants {
		fmt.Printf("ab: %s = %s\n", v.name, v.what)
		conn, err := dial(srv, v.dial...)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { conn.Close() })
		steps = append(steps, step{system: "ab", scenario: c.abOp + "+" + v.name, op: mk(abTarget{conn: conn}, v.name, replayKeys), gomaxprocs: v.gomaxprocs})
	}
	for _, v := range c.abServers {
		vs, err := startABServer(ctx, c, v, dbURL, log)
		if err != nil {
			return nil, fmt.Errorf("--ab-server %s: %w", v.name, err)
		}
		closers = append(closers, func() {
			if err := vs.Stop(10 * time.Second); err != nil {
				fmt.Fprintf(os.Stderr, "ab: server %s: %v\n", v.name, err)
			}
		})
		fmt.Printf("ab: %s = %s (pid %d, gRPC %s, REST %s), on the run's schema\n", v.name, v.what(c), vs.Pid(), vs.Field("grpc_addr"), vs.Field("http_addr"))
		conn, err := dial(vs)
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { conn.Close() })
		hc := newHTTP()
		closers = append(closers, hc.CloseIdleConnections)
		steps = append(steps, step{system: "ab", scenario: c.abOp + "+" + v.name, pid: vs.Pid(),
			op: mk(abTarget{conn: conn, hc: hc, rest: "http://" + vs.Field("http_addr")}, v.name, replayKeys)})
	}
	var rows []bench.Row
	for _, cc := range c.allLevels() {
		rows = append(rows, runRounds(ctx, c, cc, srv.Pid(), k, "postgres", steps)...)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

// startABServer starts a server variant exactly as startServer starts the
// run's server (the same database URL and schema, --server-env and
// --server-args), from the variant's binary and with its arguments after
// the run's; its log lines, if copied, carry the variant's name.
func startABServer(ctx context.Context, c config, v abServer, dbURL string, log io.Writer) (*procs.Proc, error) {
	c.bin = v.bin
	c.serverArgs = append(slices.Clone(c.serverArgs), v.args...)
	return startServer(ctx, c, "opjournal (ab "+v.name+")", dbURL, log)
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
			b.WriteString("| operation | variant | c | p50 variant/base (spread) | p99 | client CPU/op | server CPU/op (rounds above 1) | rounds |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
		}
		f := func(v []float64) string {
			m := bench.Median(v)
			if math.IsNaN(m) || math.IsInf(m, 0) {
				return "-"
			}
			return fmt.Sprintf("%.3f", m)
		}
		// How many rounds the variant cost the server more: a ratio's
		// median says how much, the count how consistently (a sign test:
		// 8 of 9 by chance alone is 2%).
		above := 0
		for _, r := range srv {
			if r > 1 {
				above++
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s (%.0f%%) | %s | %s | %s (%d/%d) | %d |\n", op, variant, kk.c,
			f(p50), bench.Spread(p50)*100, f(p99), f(cli), f(srv), above, len(srv), len(p50))
	}
	return b.String()
}
