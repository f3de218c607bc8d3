package storetest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// The budgets' conformance: a new operation reserves its amount in its
// counter atomically with its insert, never past the limit, whatever
// registers beside it; a definitive failure gives back exactly its
// amount; the window passes on the database clock.

const (
	budgetName   = "daily-spend"
	budgetLimit  = 1000
	budgetWindow = 24 * time.Hour
	budgetScope  = `{"currency":"EUR"}`
)

// spend is a Register of key adding amount to the daily-spend counter of
// scope, as the journal makes it (approve: on_exceed approval).
func spend(key string, amount int64, scope string, approve bool) *protocol.Command {
	c := &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashFor(amount), Payload: payload,
		Budgets: []protocol.BudgetCharge{{Hold: opjournal.BudgetHold{Budget: budgetName, Scope: scope, Amount: amount},
			Action: action, Limit: budgetLimit, Window: budgetWindow, Approve: approve}}}
	if approve {
		c.BudgetApproval = &opjournal.Approval{Required: true, Approvers: []string{"operator", "admin"}, RequestedBy: "agent-1", OnTimeout: opjournal.ApprovalTimeoutReject}
		c.BudgetApprovalTimeout = approvalTimeout
	}
	return c
}

// hashFor is a request hash that differs by amount (a request per amount).
func hashFor(amount int64) string { return fmt.Sprintf("%064x", amount+1) }

// used reads scope's counter.
func used(t *testing.T, s store.Store, ten, scope string) opjournal.BudgetUsage {
	t.Helper()
	us, err := s.Budgets(ctxT(t), store.BudgetParams{Tenant: ten, Queries: []store.BudgetQuery{{Budget: budgetName, Scope: scope, Window: budgetWindow}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 {
		t.Fatalf("%d rows for one scope", len(us))
	}
	return us[0]
}

func wantUsed(t *testing.T, s store.Store, scope string, usedWant, unknownWant, opsWant int64) {
	t.Helper()
	u := used(t, s, tenant, scope)
	if u.Used != usedWant || u.ReservedUnknown != unknownWant || u.Operations != opsWant {
		t.Fatalf("counter %s: used %d, reserved by unknown %d, %d operations; want %d, %d, %d",
			scope, u.Used, u.ReservedUnknown, u.Operations, usedWant, unknownWant, opsWant)
	}
}

// testBudgetReserve: new operations reserve their amounts and record
// their holds; the one that does not fit is BUDGET_EXCEEDED (naming the
// budget, its limit and use, and when enough frees up), writes nothing
// and reserves nothing; a replay reserves nothing, even when full.
func testBudgetReserve(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	for _, c := range []*protocol.Command{spend("p1", 400, budgetScope, false), spend("p2", 500, budgetScope, false)} {
		res, err := s.Apply(ctx, tenant, c)
		if err != nil || !res.Created {
			t.Fatalf("register %s: %+v %v", c.Key, res, err)
		}
		if len(res.Operation.Budgets) != 1 || res.Operation.Budgets[0] != c.Budgets[0].Hold {
			t.Fatalf("%s holds %+v, want %+v", c.Key, res.Operation.Budgets, c.Budgets[0].Hold)
		}
	}
	if got := get(t, s, "p1").Budgets; len(got) != 1 || got[0].Amount != 400 || got[0].Scope != budgetScope {
		t.Fatalf("p1 read back holds %+v", got)
	}
	wantUsed(t, s, budgetScope, 900, 900, 2)
	clk.Advance(time.Hour)
	_, err := s.Apply(ctx, tenant, spend("p3", 200, budgetScope, false))
	wantCode(t, err, opjournal.CodeBudgetExceeded)
	be := asError(err)
	if be == nil || be.Details["budget"] != budgetName || be.Details["limit"] != "1000" || be.Details["used"] != "900" {
		t.Fatalf("refusal %+v", be)
	}
	// 200 fits once p1 (400) leaves the window: 23h from now.
	if be.RetryAfter < 23*time.Hour || be.RetryAfter > 23*time.Hour+2*time.Second || be.Details["retry_after_seconds"] != strconv.Itoa(int(be.RetryAfter/time.Second)) {
		t.Fatalf("retry after %s (%q), want about 23h", be.RetryAfter, be.Details["retry_after_seconds"])
	}
	if _, err := s.Get(ctx, tenant, "p3"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		t.Fatalf("a refused registration wrote its row: %v", err)
	}
	wantUsed(t, s, budgetScope, 900, 900, 2)
	// Alone over the limit: never fits, no retry hint.
	_, err = s.Apply(ctx, tenant, spend("p4", 1001, budgetScope, false))
	wantCode(t, err, opjournal.CodeBudgetExceeded)
	if be = asError(err); be.RetryAfter != 0 || be.Details["retry_after_seconds"] != "" {
		t.Fatalf("an amount over the limit got a retry hint: %+v", be)
	}
	// A replay of p2 (its budgets as the journal evaluates them again)
	// answers the stored record and reserves nothing.
	res, err := s.Apply(ctx, tenant, spend("p2", 500, budgetScope, false))
	if err != nil || res.Created {
		t.Fatalf("replay: %+v %v", res, err)
	}
	// A conflict (another amount under p2) is PAYLOAD_MISMATCH, not a budget question.
	_, err = s.Apply(ctx, tenant, spend("p2", 50, budgetScope, false))
	wantCode(t, err, opjournal.CodePayloadMismatch)
	wantUsed(t, s, budgetScope, 900, 900, 2)
	// What fits exactly is admitted; other scopes and tenants are apart.
	if _, err := s.Apply(ctx, tenant, spend("p5", 100, budgetScope, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tenant, spend("usd", 1000, `{"currency":"USD"}`, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, "other", spend("p1", 1000, budgetScope, false)); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, s, budgetScope, 1000, 1000, 3)
}

// testBudgetRelease: a failed_final gives back exactly its amount (which
// then fits again); success and unknown keep it; an effect reported after
// failed_final takes it again.
func testBudgetRelease(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	mustSpend := func(key string, amount int64) {
		t.Helper()
		if _, err := s.Apply(ctx, tenant, Claiming(spend(key, amount, budgetScope, false), &noRetry)); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	mustSpend("ok", 300)
	mustSpend("lost", 300)
	mustSpend("declined", 400)
	wantUsed(t, s, budgetScope, 1000, 1000, 3)
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "ok", Attempt: 1, ExternalID: "pay_1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "lost", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, s, budgetScope, 1000, 700, 3)
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "declined", Attempt: 1, ErrorCode: "card_declined"}); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, s, budgetScope, 600, 300, 2)
	_, err := s.Apply(ctx, tenant, spend("big", 401, budgetScope, false))
	wantCode(t, err, opjournal.CodeBudgetExceeded)
	mustSpend("fits", 400)
	wantUsed(t, s, budgetScope, 1000, 700, 3)
	// The declined payment's money moved after all: it counts again.
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "declined", Attempt: 1, ExternalID: "pay_late"}); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, s, budgetScope, 1400, 700, 4)
}

// testBudgetWindow: holds stop counting once the window has passed their
// registration, on the database clock; the refusal's hint says when.
func testBudgetWindow(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	if _, err := s.Apply(ctx, tenant, spend("a", 600, budgetScope, false)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Hour)
	if _, err := s.Apply(ctx, tenant, spend("b", 400, budgetScope, false)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Apply(ctx, tenant, spend("c", 500, budgetScope, false))
	be := asError(err)
	if be == nil || be.Code != opjournal.CodeBudgetExceeded || be.RetryAfter < 14*time.Hour || be.RetryAfter > 14*time.Hour+2*time.Second {
		t.Fatalf("c: %v (retry after %v), want BUDGET_EXCEEDED in 14h", err, be)
	}
	clk.Advance(14*time.Hour - time.Second)
	_, err = s.Apply(ctx, tenant, spend("c", 500, budgetScope, false))
	wantCode(t, err, opjournal.CodeBudgetExceeded)
	clk.Advance(time.Second) // a's registration is now exactly the window ago: it has passed
	wantUsed(t, s, budgetScope, 400, 400, 1)
	if _, err := s.Apply(ctx, tenant, spend("c", 500, budgetScope, false)); err != nil {
		t.Fatalf("c once a left the window: %v", err)
	}
	wantUsed(t, s, budgetScope, 900, 900, 2)
}

// testBudgetApproval: under on_exceed approval, what does not fit is
// created awaiting approval (the approval names the budget, its hold is
// over the limit and does not count); an approval admits it over the
// limit, a rejection gives back nothing.
func testBudgetApproval(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	if _, err := s.Apply(ctx, tenant, spend("small", 800, budgetScope, true)); err != nil {
		t.Fatal(err)
	}
	if op := get(t, s, "small"); op.Status != opjournal.StatusPending || op.Approval != nil {
		t.Fatalf("a fitting operation asked a person: %+v", op)
	}
	for _, key := range []string{"large", "larger"} {
		res, err := s.Apply(ctx, tenant, Claiming(spend(key, 700, budgetScope, true), &noRetry))
		if err != nil || !res.Created || res.Claimed {
			t.Fatalf("%s: %+v %v", key, res, err)
		}
		op := res.Operation
		wantStatus(t, op, opjournal.StatusAwaitingApproval)
		if op.Approval == nil || op.Approval.Rule != "budget" || len(op.Approval.Budgets) != 1 || op.Approval.Budgets[0] != budgetName ||
			op.Approval.Deadline.IsZero() || len(op.Budgets) != 1 || !op.Budgets[0].OverLimit {
			t.Fatalf("%s: approval %+v holds %+v", key, op.Approval, op.Budgets)
		}
	}
	wantUsed(t, s, budgetScope, 800, 800, 1)
	if _, err := decide(t, s, protocol.CmdReject, "larger", "alice", hashFor(700)); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, s, budgetScope, 800, 800, 1)
	if _, err := decide(t, s, protocol.CmdApprove, "large", "alice", hashFor(700)); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, s, budgetScope, 1500, 1500, 2) // admitted over the limit, as the person decided
	// A policy approval beside a fitting budget: the hold counts while it waits.
	c := spend("asked", 0, `{"currency":"CHF"}`, false)
	c.Approval, c.ApprovalTimeout = askApproval(false, opjournal.ApprovalTimeoutReject), approvalTimeout
	if _, err := s.Apply(ctx, tenant, c); err != nil {
		t.Fatal(err)
	}
	if op := get(t, s, "asked"); op.Approval == nil || len(op.Approval.Budgets) != 0 || op.Approval.Rule == "budget" {
		t.Fatalf("policy approval: %+v", op.Approval)
	}
	wantUsed(t, s, `{"currency":"CHF"}`, 0, 0, 1)
}

// testBudgetPurge: a purge takes the holds with their operations, and a
// key registered again after its purge holds only its own.
func testBudgetPurge(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	if _, err := s.Apply(ctx, tenant, Claiming(spend("k", 300, budgetScope, false), &noRetry)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k", Attempt: 1, ExternalID: "pay_1"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(budgetWindow)
	if res, err := s.Purge(ctx, store.PurgeParams{Action: action, Retention: budgetWindow, Limit: 10}); err != nil || res.Operations != 1 {
		t.Fatalf("purge: %+v %v", res, err)
	}
	if _, err := s.Apply(ctx, tenant, spend("k", 1000, budgetScope, false)); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, s, budgetScope, 1000, 1000, 1)
}

// testBudgetListing: every scope with something counted, and the total
// over tenants.
func testBudgetListing(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	for i, sc := range []string{`{"currency":"USD"}`, budgetScope, budgetScope} {
		if _, err := s.Apply(ctx, tenant, spend("k"+strconv.Itoa(i), int64(100*(i+1)), sc, false)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Apply(ctx, "other", spend("k", 50, budgetScope, false)); err != nil {
		t.Fatal(err)
	}
	us, err := s.Budgets(ctx, store.BudgetParams{Tenant: tenant, Queries: []store.BudgetQuery{{Budget: budgetName, AnyScope: true, Window: budgetWindow}, {Budget: "none", AnyScope: true, Window: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 2 || us[0].Scope != budgetScope || us[0].Used != 500 || us[1].Scope != `{"currency":"USD"}` || us[1].Used != 100 {
		t.Fatalf("scopes %+v", us)
	}
	all, err := s.Budgets(ctx, store.BudgetParams{AllTenants: true, Queries: []store.BudgetQuery{{Budget: budgetName, Window: budgetWindow}}})
	if err != nil || len(all) != 1 || all[0].Used != 650 || all[0].Operations != 4 {
		t.Fatalf("all tenants %+v %v", all, err)
	}
}

// testConcurrentBudget: registrations racing on one counter through two
// stores on one database (two servers) never admit past the limit; the
// counter holds exactly what was admitted, and every refusal was right
// (at its time the counter held at most what it holds at the end).
func testConcurrentBudget(t *testing.T, newDB NewDatabase) {
	open := newDB(t)
	stores := []store.Store{open(t), open(t)}
	ctx := ctxT(t)
	const n = 40
	amounts := make([]int64, n)
	rng := rand.New(rand.NewPCG(7, 38))
	var total int64
	for i := range amounts {
		amounts[i] = 1 + rng.Int64N(2*budgetLimit/n*2-1)
		total += amounts[i]
	}
	var mu sync.Mutex
	var admitted int64
	var refused []int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := stores[i%2].Apply(ctx, tenant, spend("race-"+strconv.Itoa(i), amounts[i], budgetScope, false))
			mu.Lock()
			defer mu.Unlock()
			switch opjournal.ErrorCode(err) {
			case "":
				admitted += amounts[i]
			case opjournal.CodeBudgetExceeded:
				refused = append(refused, amounts[i])
			default:
				t.Errorf("race-%d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if admitted > budgetLimit {
		t.Fatalf("admitted %d of amounts summing to %d: past the limit %d", admitted, total, budgetLimit)
	}
	u := used(t, stores[0], tenant, budgetScope)
	if u.Used != admitted {
		t.Fatalf("counter %d, admitted %d", u.Used, admitted)
	}
	for _, r := range refused {
		if admitted+r <= budgetLimit {
			t.Fatalf("refused %d although %d was all ever admitted (limit %d)", r, admitted, budgetLimit)
		}
	}
	t.Logf("admitted %d of %d (limit %d) in %d registrations, refused %d", admitted, total, budgetLimit, n-len(refused), len(refused))
}
