package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/bench"
)

// peersProc is the peers binary (harness/bench/peers), started once per run with
// both peers set up, measuring one point per request: DBOS's points go
// into the same alternating rounds as the fused path's, so that the
// "ahead of DBOS" ratio compares points seconds apart.
type peersProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner

	mu   sync.Mutex
	dead error // the first failure: every later point reports it

	closeOnce sync.Once
	closed    error // what close returned
}

// startPeers starts the peers binary with schemas named after schema, for
// points of at most maxC callers.
func startPeers(ctx context.Context, c config, schema string, maxC int) (*peersProc, error) {
	if _, err := os.Stat(c.peersBin); err != nil {
		return nil, fmt.Errorf("peers binary not built (%w); build it with: make bench-build", err)
	}
	cmd := exec.CommandContext(ctx, c.peersBin, "--database-url", c.databaseURL, "--schema-prefix", schema,
		"--max-concurrency", strconv.Itoa(maxC), "--pool-max-conns", strconv.Itoa(c.poolMax))
	cmd.Stderr = os.Stdout
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return &peersProc{cmd: cmd, in: in, out: sc}, nil
}

// measure runs one point of system ("dbos" or "river") and returns its
// row; a failure is the row's Note (no calls), so that the targets report
// it.
func (p *peersProc) measure(system string, l bench.Load) bench.Row {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, err := p.ask(system, l)
	if err != nil {
		p.dead = cmp.Or(p.dead, err)
		return bench.Row{System: system, Store: "postgres", Concurrency: l.Concurrency, Note: "failed: " + p.dead.Error()}
	}
	return r
}

func (p *peersProc) ask(system string, l bench.Load) (bench.Row, error) {
	if p.dead != nil {
		return bench.Row{}, p.dead
	}
	if _, err := fmt.Fprintf(p.in, "%s %d %s %s\n", system, l.Concurrency, l.Warmup, l.Duration); err != nil {
		return bench.Row{}, fmt.Errorf("peers: %w", err)
	}
	if !p.out.Scan() {
		return bench.Row{}, fmt.Errorf("peers exited: %w", cmp.Or(p.out.Err(), io.ErrUnexpectedEOF))
	}
	var r bench.Row
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return bench.Row{}, fmt.Errorf("peers output: %w", err)
	}
	return r, nil
}

// close ends the peers' stdin, so that they stop and drop their schemas,
// and waits for them; once, however often it is called (a run closes the
// peers after the levels, and again, deferred, on an early return).
func (p *peersProc) close() error {
	p.closeOnce.Do(func() { p.closed = p.stop() })
	return p.closed
}

func (p *peersProc) stop() error {
	_ = p.in.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		return errors.Join(errors.New("peers did not stop within 30s"), <-done)
	}
}

// dbosStep is the DBOS point of a level's rounds.
func (p *peersProc) dbosStep() step {
	return step{system: "dbos", scenario: "workflow-1-step", run: func(_ context.Context, l bench.Load) bench.Row {
		return p.measure("dbos", l)
	}}
}

// riverRows measures River once at each level: its completer records
// completions every 250 ms, so a point is a handful of calls at one caller
// and needs seconds, not the rounds' fraction of one; and at 20× and
// more behind the fused path, its figure has no margin to move in.
func (p *peersProc) riverRows(c config, levels []int) []bench.Row {
	var rows []bench.Row
	for _, cc := range levels {
		r := p.measure("river", bench.Load{Concurrency: cc, Warmup: c.warmup, Duration: max(c.pointDuration(cc), 2*time.Second)})
		r.System, r.Scenario, r.Store = "river", "unique-job", "postgres"
		rows = append(rows, r)
		progress(r)
	}
	return rows
}

// allLevels are the levels the fused path runs at, ascending.
func (c config) allLevels() []int {
	all := slices.Clone(c.levels)
	for _, l := range c.oneCaller {
		if !slices.Contains(all, l) {
			all = append(all, l)
		}
	}
	slices.Sort(all)
	return all
}
