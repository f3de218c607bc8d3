package journal_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"context"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// budgetJournal is a Service whose send_email has a per-principal count
// and a sum of chars (no payload_schema: the journal checks the amount).
func budgetJournal(t *testing.T) *journal.Service {
	t.Helper()
	pol, err := policy.Parse([]byte(`actions:
  send_email:
    budgets:
      - {name: hourly-mails, count: true, per: [principal], window: 1h, limit: 2, on_exceed: reject}
      - {name: hourly-chars, sum: chars, window: 1h, limit: 100, on_exceed: approval}
  create_ticket: {}
`), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return journal.New(st, pol, journal.Limits{})
}

func mailReq(who, key, payload string) journal.RegisterRequest {
	return journal.RegisterRequest{Caller: journal.Caller{Principal: who, Label: who + "-token"}, Key: key, Action: "send_email", Payload: json.RawMessage(payload)}
}

// TestBudgetAmountIsCheckedAndScopedByPrincipal: a payload without the
// summed member, or with one that is not a whole number, is refused
// (naming the member, never the value) and stores nothing; the principal
// scope is the authenticated principal, never a request field.
func TestBudgetAmountIsCheckedAndScopedByPrincipal(t *testing.T) {
	t.Parallel()
	svc := budgetJournal(t)
	ctx := context.Background()
	for _, p := range []string{`{"to":"a"}`, `{"chars":"12"}`, `{"chars":1.5}`, `{"chars":-3}`, `{"chars":null}`} {
		_, err := svc.Register(ctx, mailReq("alice", "bad", p))
		if opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument || !strings.Contains(err.Error(), "chars") || !strings.Contains(err.Error(), "hourly-chars") {
			t.Fatalf("%s: %v", p, err)
		}
		if strings.Contains(err.Error(), "1.5") || strings.Contains(err.Error(), "-3") {
			t.Fatalf("%s: the error quotes the value: %v", p, err)
		}
		if _, err := svc.Lookup(ctx, "", "bad"); opjournal.ErrorCode(err) != opjournal.CodeNotFound {
			t.Fatalf("%s: stored: %v", p, err)
		}
	}
	for i, who := range []string{"alice", "alice", "bob"} {
		res, err := svc.Register(ctx, mailReq(who, "m"+string(rune('0'+i)), `{"chars":10}`))
		if err != nil || !res.Created {
			t.Fatalf("%s %d: %v", who, i, err)
		}
		if res.Operation.Budgets[0].Scope != `{"principal":"`+who+`"}` {
			t.Fatalf("scope %q", res.Operation.Budgets[0].Scope)
		}
	}
	_, err := svc.Register(ctx, mailReq("alice", "m3", `{"chars":10}`))
	if opjournal.ErrorCode(err) != opjournal.CodeBudgetExceeded {
		t.Fatalf("alice's third: %v", err)
	}
	// Over the sum (approval): created awaiting a person.
	res, err := svc.Register(ctx, mailReq("bob", "long", `{"chars":95}`))
	if err != nil || res.Operation.Status != opjournal.StatusAwaitingApproval || res.Operation.Approval.Rule != "budget" ||
		res.Operation.Approval.RequestedBy != "bob" || !res.Operation.Approval.DistinctFromRequester {
		t.Fatalf("over the sum: %+v %v", res.Operation, err)
	}
	held, err := svc.HeldBudgets(ctx, "", res.Operation)
	if err != nil || len(held) != 2 || held[1].Budget != "hourly-chars" || held[1].Used != 30 || held[1].Limit != 100 {
		t.Fatalf("held %+v %v", held, err)
	}
}

// TestListBudgets: every budget of the policy, one row per scope in use
// and the idle ones alone; filters are checked.
func TestListBudgets(t *testing.T) {
	t.Parallel()
	svc := budgetJournal(t)
	ctx := context.Background()
	bs, err := svc.ListBudgets(ctx, "", journal.BudgetFilter{})
	if err != nil || len(bs) != 2 || bs[0].Used != 0 || bs[0].Scope != "" {
		t.Fatalf("idle: %+v %v", bs, err)
	}
	for i, who := range []string{"alice", "bob"} {
		if _, err := svc.Register(ctx, mailReq(who, "m"+string(rune('0'+i)), `{"chars":10}`)); err != nil {
			t.Fatal(err)
		}
	}
	bs, err = svc.ListBudgets(ctx, "", journal.BudgetFilter{Action: "send_email", Budget: "hourly-mails"})
	if err != nil || len(bs) != 2 || bs[0].Scope != `{"principal":"alice"}` || bs[1].Used != 1 || bs[0].Policy.OnExceed != "reject" {
		t.Fatalf("mails: %+v %v", bs, err)
	}
	if bs, err := svc.ListBudgets(ctx, "other-tenant", journal.BudgetFilter{Budget: "hourly-chars"}); err != nil || len(bs) != 1 || bs[0].Used != 0 {
		t.Fatalf("another tenant sees: %+v %v", bs, err)
	}
	for _, f := range []journal.BudgetFilter{{Action: "wire_money"}, {Budget: "nope"}, {Action: "create_ticket", Budget: "hourly-mails"}, {Budget: "a\x00b"}, {Budget: strings.Repeat("b", 300)}} {
		if _, err := svc.ListBudgets(ctx, "", f); err == nil {
			t.Fatalf("%+v: no error", f)
		}
	}
	if bs, err := svc.ListBudgets(ctx, "", journal.BudgetFilter{Action: "create_ticket"}); err != nil || len(bs) != 0 {
		t.Fatalf("an action without budgets: %+v %v", bs, err)
	}
}

// TestListBudgetsShared: a budget shared by two actions is one counter,
// listed once under each action (never once per action per action).
func TestListBudgetsShared(t *testing.T) {
	t.Parallel()
	pol, err := policy.Parse([]byte(`actions:
  send_email:
    budgets: [{name: outbound, count: true, window: 1h, limit: 3, on_exceed: reject}]
  create_ticket:
    budgets: [{name: outbound, count: true, window: 1h, limit: 3, on_exceed: reject}]
`), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := journal.New(st, pol, journal.Limits{})
	ctx := context.Background()
	for _, r := range []journal.RegisterRequest{
		{Key: "mail", Action: "send_email", Payload: json.RawMessage(`{"to":"a"}`)},
		{Key: "ticket", Action: "create_ticket", Payload: json.RawMessage(`{"title":"t"}`)},
	} {
		if _, err := svc.Register(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := svc.ListBudgets(ctx, "", journal.BudgetFilter{})
	if err != nil || len(bs) != 2 || bs[0].Action == bs[1].Action || bs[0].Used != 2 || bs[1].Used != 2 {
		t.Fatalf("shared budget listed as %+v %v; want once per action, 2 used", bs, err)
	}
	if tot, err := svc.BudgetTotals(ctx); err != nil || len(tot) != 2 || tot[0].Used != 2 {
		t.Fatalf("totals %+v %v", tot, err)
	}
}
