package linearize

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol/model"
)

// TestLinearizableBudgetsTwoProcessesOnePostgres: agents on two real
// journal processes over one PostgreSQL (one batched, one a statement per
// call) race to register operations charging one budget whose limit is
// about half of what they ask, replay earlier keys and fail some admitted
// operations for good; no order of the calls may admit past the limit,
// reserve on a replay, or give an amount back before or after its
// failure.
func TestLinearizableBudgetsTwoProcessesOnePostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.NewSchema(t)
	runBudgetProcesses(t, "budget-pg-two", 6, url, url+"&opjournal_batch_workers=0")
}

// TestLinearizableBudgetsSQLite: the same on one real process over the
// SQLite store.
func TestLinearizableBudgetsSQLite(t *testing.T) {
	t.Parallel()
	runBudgetProcesses(t, "budget-sqlite", 4, "sqlite://"+filepath.Join(t.TempDir(), "journal.db"))
}

// runBudgetProcesses starts one `opjournal serve` per database URL with
// BudgetPolicy and checks budget runs against them (each run on a counter
// of its own).
func runBudgetProcesses(t *testing.T, name string, workers int, urls ...string) {
	t.Helper()
	polPath := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(polPath, []byte(BudgetPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := BudgetModelOf(parsePolicy(t, BudgetPolicy))
	if err != nil {
		t.Fatal(err)
	}
	var clients []*Client
	for _, u := range urls {
		c, err := Dial(startProc(t, u, polPath).e, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	for i := range scale(t) {
		sd := seed(t)
		cfg := BudgetConfig{Clients: clients, Model: m, Run: fmt.Sprintf("%s-%d-%d", name, i, sd), Workers: workers, Ops: 40,
			Seed: sd, CallTimeout: 10 * time.Second}
		res, err := RunBudget(context.Background(), cfg, outDir(), name)
		if err != nil {
			t.Fatal(err)
		}
		report(t, res, name, sd)
		if res.Counts["Register admitted"] == 0 || res.Counts["Register BUDGET_EXCEEDED"] == 0 || res.Counts["MarkFailedFinal ok"] == 0 {
			t.Errorf("%s (seed %d): the run never met the limit, or never gave an amount back: %s", name, sd, res.CountsTable())
		}
	}
}

// budgetCall is one call of a hand-built history: in on worker w from
// call to ret, answering out.
func budgetCall(w int, call, ret int64, in model.BudgetInput, out model.BudgetOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret}
}

func reg(key string, amount int64) model.BudgetInput {
	return model.BudgetInput{Kind: model.BudgetRegister, Key: key, Amount: amount, Claim: true, Worker: "w"}
}

var (
	admitted = model.BudgetOutput{Created: true, Claimed: true, Status: model.InProgress}
	replayed = model.BudgetOutput{Status: model.InProgress}
	failed   = model.BudgetOutput{Status: model.FailedFinal}
	fail     = func(key string) model.BudgetInput {
		return model.BudgetInput{Kind: model.BudgetFail, Key: key, Attempt: 1}
	}
	exceeded = func(used int64) model.BudgetOutput { return model.BudgetOutput{Err: "BUDGET_EXCEEDED", Used: used} }
	read     = model.BudgetInput{Kind: model.BudgetRead}
	usage    = func(used, ops int64) model.BudgetOutput {
		return model.BudgetOutput{Used: used, ReservedUnknown: used, Operations: ops}
	}
)

// TestBudgetCheckerCatches feeds the budget check hand-built histories
// under a limit of 1000: the ones that admit past the limit, reserve on a
// replay or see an amount given back at the wrong time must be found not
// linearizable, and their near twins that a correct journal could give
// must pass, so that a pass of the real runs means something.
func TestBudgetCheckerCatches(t *testing.T) {
	t.Parallel()
	m := &model.BudgetModel{Limit: 1000}
	cases := []struct {
		name    string
		history []porcupine.Operation
		ok      bool
	}{
		{"admitted past the limit, one after the other", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(1, 20, 30, reg("b", 600), admitted),
		}, false},
		{"admitted past the limit, racing", []porcupine.Operation{
			budgetCall(0, 0, 30, reg("a", 600), admitted),
			budgetCall(1, 5, 25, reg("b", 600), admitted),
			budgetCall(2, 10, 20, reg("c", 300), exceeded(600)),
		}, false},
		{"racing: one admitted, the other refused naming its use", []porcupine.Operation{
			budgetCall(0, 0, 30, reg("a", 600), admitted),
			budgetCall(1, 5, 25, reg("b", 600), exceeded(600)),
			budgetCall(2, 40, 50, read, usage(600, 1)),
		}, true},
		{"a refusal naming a use the counter never had", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(1, 20, 30, reg("b", 600), exceeded(500)),
		}, false},
		{"exactly the limit fits", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(1, 20, 30, reg("b", 400), admitted),
			budgetCall(1, 40, 50, reg("c", 1), exceeded(1000)),
		}, true},
		{"a replay reserves nothing", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(1, 20, 30, reg("a", 600), replayed),
			budgetCall(2, 40, 50, reg("b", 400), admitted),
		}, true},
		{"a replay that reserved again", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(1, 20, 30, reg("a", 600), replayed),
			budgetCall(2, 40, 50, reg("b", 400), exceeded(1000)),
		}, false},
		{"a failure gives the amount back", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(0, 20, 30, fail("a"), failed),
			budgetCall(1, 40, 50, reg("b", 600), admitted),
			budgetCall(2, 60, 70, read, usage(600, 1)),
		}, true},
		{"the amount still held after the failure returned", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(0, 20, 30, fail("a"), failed),
			budgetCall(1, 40, 50, reg("b", 600), exceeded(600)),
		}, false},
		{"racing the failure, either answer", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(0, 20, 50, fail("a"), failed),
			budgetCall(1, 30, 40, reg("b", 600), exceeded(600)),
			budgetCall(2, 25, 45, reg("c", 600), admitted),
		}, true},
		{"given back before the failure was called", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(1, 20, 30, reg("b", 600), admitted),
			budgetCall(0, 40, 50, fail("a"), failed),
		}, false},
		{"a read that saw more than was admitted", []porcupine.Operation{
			budgetCall(0, 0, 10, reg("a", 600), admitted),
			budgetCall(1, 20, 30, read, usage(1200, 2)),
		}, false},
	}
	for _, c := range cases {
		res, info := CheckBudgetHistory(m, c.history, 10*time.Second)
		switch {
		case c.ok && res != porcupine.Ok:
			t.Errorf("%s: %s, want linearizable\n%s", c.name, res, ExplainBudget(m, c.history, info))
		case !c.ok && res != porcupine.Illegal:
			t.Errorf("%s: %s, want not linearizable", c.name, res)
		}
	}
	// A failure is readable: the explanation names the call no order can
	// place and the model's answer there, and the visualization renders.
	history := cases[0].history
	_, info := CheckBudgetHistory(m, history, 10*time.Second)
	got := ExplainBudget(m, history, info)
	for _, want := range []string{"Register b amount=600 claim=true (grpc) → IN_PROGRESS created=true claimed=true", "BUDGET_EXCEEDED used=600", "used 600: a=600/IN_PROGRESS"} {
		if !strings.Contains(got, want) {
			t.Errorf("the explanation lacks %q:\n%s", want, got)
		}
	}
	if err := porcupine.VisualizePath(budgetPorcupineModel(m), info, filepath.Join(t.TempDir(), "budget.html")); err != nil {
		t.Errorf("visualization: %v", err)
	}
}

// TestBudgetPolicy: the harness's budget policy parses, and its limit is
// the model's.
func TestBudgetPolicy(t *testing.T) {
	t.Parallel()
	m, err := BudgetModelOf(parsePolicy(t, BudgetPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if m.Limit != BudgetLimit {
		t.Fatalf("limit %d, want %d", m.Limit, BudgetLimit)
	}
	if _, err := BudgetModelOf(parsePolicy(t, RealTimePolicy)); err == nil {
		t.Fatal("a policy without the budget gave a model")
	}
}
