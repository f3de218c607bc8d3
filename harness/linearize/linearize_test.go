package linearize

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/sqlite"
)

// scale multiplies every run's length: LINEARIZE_SCALE=20 (make linearize)
// for a long run; 1 in `go test ./...`.
func scale(t *testing.T) int {
	if s := os.Getenv("LINEARIZE_SCALE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LINEARIZE_SCALE=%q: want a whole number ≥ 1", s)
		}
		return n
	}
	return 1
}

// seed is LINEARIZE_SEED, else the time: a failure names its seed.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("LINEARIZE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LINEARIZE_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// outDir is where an Illegal history's visualization goes: it must outlive
// the test (LINEARIZE_OUT, else the system's temporary directory).
func outDir() string {
	if d := os.Getenv("LINEARIZE_OUT"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "opjournal-linearize")
}

func parsePolicy(t *testing.T, src string) *policy.Policy {
	t.Helper()
	pol, err := policy.Parse([]byte(src), "linearize.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// clocked is a run on the test's clock against servers on st (one
// in-process server per store given; they share the clock).
type clocked struct {
	pol    *policy.Policy
	clock  *testclock.Clock
	stores []store.Store
}

func newClocked(t *testing.T) *clocked {
	return &clocked{pol: parsePolicy(t, ClockedPolicy), clock: testclock.New()}
}

// base is the time Input.Now 0 stands for: a second before the clock's
// start, so that 0 can mean "unset" in the model and in views.
func (c *clocked) base() time.Time { return c.clock.Now().Add(-time.Second) }

func (c *clocked) add(t *testing.T, st store.Store) {
	t.Helper()
	st.(store.Clock).SetClock(c.clock.Now)
	c.stores = append(c.stores, st)
}

// run serves every store, runs the workload rounds times and fails the
// test on an Illegal history.
func (c *clocked) run(t *testing.T, name string, w Workload, rounds int) {
	t.Helper()
	ctx := context.Background()
	var clients []*Client
	base := c.base()
	for _, st := range c.stores {
		e, stop, err := Serve(ctx, st, c.pol)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		cl, err := Dial(e, base)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		clients = append(clients, cl)
	}
	m := ModelOf(c.pol)
	steps := []int64{0, 0, 1, 999, 1000, 2500, 5000, 5001, 7000}
	for i := range rounds * scale(t) {
		sd := seed(t)
		cfg := Config{Clients: clients, Model: m, Keys: Keys(m, name+"-"+strconv.Itoa(i), 2), Workers: 6, Ops: 40, PerRound: 2,
			Clock: c.clock, Base: base, Workload: w, Seed: sd, Steps: steps}
		if w == DuplicateRace {
			cfg.ExternalIDs = 12
		}
		check(t, cfg, name, sd)
	}
}

func check(t *testing.T, cfg Config, name string, sd uint64) {
	t.Helper()
	res, err := Run(context.Background(), cfg, outDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	report(t, res, name, sd)
}

// report fails the test on an Illegal history, naming the visualization.
func report(t *testing.T, res *Result, name string, sd uint64) {
	t.Helper()
	switch res.Check {
	case porcupine.Illegal:
		t.Fatalf("%s (seed %d): no sequential order of the %d calls explains the answers; visualization: %s\n%s\n%s",
			name, sd, len(res.History), res.Visualization, res.Explanation, res.CountsTable())
	case porcupine.Unknown:
		t.Logf("%s (seed %d): the checker ran out of time on %d calls: inconclusive", name, sd, len(res.History))
	}
	t.Logf("%s (seed %d): %d calls linearizable; run %s, check %s; %s", name, sd, len(res.History), res.Elapsed.Round(time.Millisecond),
		res.CheckElapsed.Round(time.Millisecond), res.CountsTable())
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t *testing.T, url string) store.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLinearizableSQLite: concurrent agents and operators on a few keys,
// over gRPC and REST, on the SQLite store; the test moves the clock
// between rounds (leases end, releases become due, dedup windows pass).
func TestLinearizableSQLite(t *testing.T) {
	t.Parallel()
	c := newClocked(t)
	c.add(t, openSQLite(t))
	c.run(t, "sqlite", Mixed, 12)
}

// TestLinearizablePostgres: the same on PostgreSQL, batched and one
// statement per call.
func TestLinearizablePostgres(t *testing.T) {
	t.Parallel()
	for name, params := range map[string]string{"batched": "", "one-call": "&opjournal_batch_workers=0"} {
		t.Run(name, func(t *testing.T) {
			c := newClocked(t)
			c.add(t, openPostgres(t, pgtest.NewSchema(t)+params))
			c.run(t, "pg-"+name, Mixed, 8)
		})
	}
}

// TestLinearizableTwoServersOnePostgres: two journal servers on one
// database, each call sent to either.
func TestLinearizableTwoServersOnePostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewSchema(t)
	c := newClocked(t)
	c.add(t, openPostgres(t, url))
	c.add(t, openPostgres(t, url+"&opjournal_batch_workers=0"))
	c.run(t, "pg-two", Mixed, 8)
}

// TestLinearizableDuplicateRace: agents reporting other external ids for
// terminal operations while operators acknowledge the reviews, on
// PostgreSQL one statement per call, two servers.
func TestLinearizableDuplicateRace(t *testing.T) {
	t.Parallel()
	url := pgtest.NewSchema(t) + "&opjournal_batch_workers=0"
	c := newClocked(t)
	c.add(t, openPostgres(t, url))
	c.add(t, openPostgres(t, url))
	c.run(t, "pg-duplicates", DuplicateRace, 8)
}

// TestModelAgreesSequentially: one worker, so the calls never overlap and
// the first answer the model would not give is shown as such (a mistake
// of the model or of the journal, without the search).
func TestModelAgreesSequentially(t *testing.T) {
	t.Parallel()
	c := newClocked(t)
	c.add(t, openSQLite(t))
	e, stop, err := Serve(context.Background(), c.stores[0], c.pol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	cl, err := Dial(e, c.base())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	m := ModelOf(c.pol)
	for i := range 20 * scale(t) {
		sd := seed(t)
		cfg := Config{Clients: []*Client{cl}, Model: m, Keys: Keys(m, "seq-"+strconv.Itoa(i), 1), Workers: 1, Ops: 150, PerRound: 1,
			Clock: c.clock, Base: cl.Base, Seed: sd, Steps: []int64{0, 0, 1, 999, 1000, 2500, 5000, 5001, 7000}}
		res, err := Run(context.Background(), cfg, outDir(), "sequential")
		if err != nil {
			t.Fatal(err)
		}
		if d := FirstDisagreement(m, res.History); d != "" {
			t.Fatalf("seed %d: the journal's answer is not the model's:\n%s", sd, d)
		}
	}
}
