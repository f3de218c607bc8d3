package linearize

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	"github.com/opjournal/opjournal/store/postgres"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// opjournalBinary builds cmd/opjournal once per test binary.
func opjournalBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "opjournal-linearize-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "opjournal")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/opjournal/opjournal/cmd/opjournal").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// journalProc is a real `opjournal serve` process on fixed ports, so that
// after a kill -9 it comes back where its clients call.
type journalProc struct {
	t    *testing.T
	args []string
	e    Endpoint
	mu   sync.Mutex
	p    *procs.Proc
}

func startProc(t *testing.T, dbURL, policyPath string) *journalProc {
	t.Helper()
	g, h := freePort(t), freePort(t)
	j := &journalProc{t: t, e: Endpoint{GRPCAddr: g, HTTPURL: "http://" + h},
		args: []string{"serve", "--database-url", dbURL, "--policy", policyPath, "--grpc-addr", g, "--http-addr", h}}
	if err := j.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.p != nil {
			j.p.Kill()
		}
	})
	return j
}

func (j *journalProc) start() error {
	p, err := procs.Start(context.Background(), procs.Spec{Name: "journal", Path: opjournalBinary(j.t), Args: j.args, Ready: "serving"}, 60*time.Second)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.p = p
	j.mu.Unlock()
	return nil
}

// crash kills the process (SIGKILL: no drain, no cleanup) and starts it again.
func (j *journalProc) crash() error {
	j.mu.Lock()
	if j.p != nil { // nil when the last start failed (reported then)
		j.p.Kill()
		j.p = nil
	}
	j.mu.Unlock()
	return j.start()
}

// TestLinearizableProcessesKilled: two real journal processes on one
// PostgreSQL, one of them killed with SIGKILL and restarted again and
// again while the clients call both; calls cut off by a kill are "maybe".
// The processes run on their own clock, with leases and windows longer
// than a run (RealTimePolicy).
func TestLinearizableProcessesKilled(t *testing.T) {
	t.Parallel()
	url := pgtest.NewSchema(t)
	runProcesses(t, "procs-kill", url, url+"&opjournal_batch_workers=0", true)
}

// TestLinearizableThroughPgBouncer: the same, without kills, with both
// processes behind a real PgBouncer in transaction pooling mode.
func TestLinearizableThroughPgBouncer(t *testing.T) {
	t.Parallel()
	b := pgtest.StartPgBouncer(t)
	through := b.NewSchema(t)
	if err := postgres.Migrate(pgtest.DirectURL(t, through)); err != nil {
		t.Fatalf("migrate on the direct URL: %v", err)
	}
	runProcesses(t, "pgbouncer", through, through, false)
}

func runProcesses(t *testing.T, name, url1, url2 string, kill bool) {
	t.Helper()
	dir := t.TempDir()
	polPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(polPath, []byte(RealTimePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	m := ModelOf(parsePolicy(t, RealTimePolicy))
	a, b := startProc(t, url1, polPath), startProc(t, url2, polPath)
	var clients []*Client
	for _, j := range []*journalProc{a, b} {
		c, err := Dial(j.e, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	for i := range 4 * scale(t) {
		sd := seed(t)
		cfg := Config{Clients: clients, Model: m, Keys: Keys(m, name+"-"+strconv.Itoa(i), 2), Workers: 5, Ops: 100,
			Seed: sd, CallTimeout: 5 * time.Second}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		kills := 0
		if kill {
			wg.Go(func() {
				for ctx.Err() == nil {
					select {
					case <-ctx.Done():
						return
					case <-time.After(100 * time.Millisecond):
					}
					if err := a.crash(); err != nil {
						// The port it listened on can be taken, between the
						// kill and the restart, by any connection's local
						// port: then it stays down for the rest of the round
						// (its calls fail, which the checker takes as maybe).
						if !strings.Contains(err.Error(), "address already in use") {
							t.Error(err)
						}
						t.Logf("restart after a kill failed; the process stays down this round: %v", err)
						return
					}
					kills++
				}
			})
		}
		res, err := Run(context.Background(), cfg, outDir(), name)
		cancel()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		report(t, res, name, sd)
		if kill {
			t.Logf("%s: %d kills during the run", name, kills)
		}
	}
}
