package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const budgetDoc = `actions:
  create_payment:
    payload_schema:
      type: object
      properties:
        amount_minor: {type: integer}
        currency: {type: string}
    budgets:
      - name: daily-spend
        sum: amount_minor
        per: [principal, currency]
        window: 24h
        limit: 5000000
        on_exceed: approval
      - name: payments-per-hour
        count: true
        per: [principal, refs.customer, action]
        window: 1h
        limit: 20
        on_exceed: reject
  send_email:
    budgets:
      - {name: tenant-sends, count: true, window: 1d, limit: 1000, on_exceed: reject}
`

// TestBudgetsParsed: every field, normalised (a bare member is a payload
// member), in the order written.
func TestBudgetsParsed(t *testing.T) {
	p, err := Parse([]byte(budgetDoc), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pay, _ := p.Action("create_payment")
	if len(pay.Budgets) != 2 {
		t.Fatalf("budgets: %+v", pay.Budgets)
	}
	spend, count := pay.Budget("daily-spend"), pay.Budget("payments-per-hour")
	if spend.Sum != "amount_minor" || spend.Count || strings.Join(spend.Per, ",") != "principal,payload.currency" ||
		spend.Window != 24*time.Hour || spend.Limit != 5000000 || spend.OnExceed != BudgetExceedApproval {
		t.Fatalf("daily-spend: %+v", spend)
	}
	if !count.Count || count.Sum != "" || strings.Join(count.Per, ",") != "principal,refs.customer,action" || count.OnExceed != BudgetExceedReject {
		t.Fatalf("payments-per-hour: %+v", count)
	}
	email, _ := p.Action("send_email")
	if b := email.Budget("tenant-sends"); b == nil || len(b.Per) != 0 || b.Window != 24*time.Hour {
		t.Fatalf("tenant-sends: %+v", b)
	}
	if pay.Budget("nope") != nil {
		t.Fatal("a budget that is not declared")
	}
}

// TestBudgetAmountAndScope: the amount is the whole, non-negative member
// (1 for a count); the scope is canonical, so member order and number
// spelling do not split a budget, and missing members are left out; no
// error quotes a payload value.
func TestBudgetAmountAndScope(t *testing.T) {
	p, err := Parse([]byte(budgetDoc), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pay, _ := p.Action("create_payment")
	spend, count := pay.Budget("daily-spend"), pay.Budget("payments-per-hour")
	for _, tc := range []struct {
		payload string
		want    int64
		problem string
	}{
		{`{"amount_minor":1200,"currency":"EUR"}`, 1200, ""},
		{`{"amount_minor":0}`, 0, ""},
		{`{"amount_minor":1.2e3}`, 0, "must be a whole number"},
		{`{"amount_minor":-5}`, 0, "must not be negative"},
		{`{"amount_minor":"9999"}`, 0, "must be an integer"},
		{`{"amount_minor":null}`, 0, "is required by budget daily-spend"},
		{`{}`, 0, "is required by budget daily-spend"},
		{`[1]`, 0, "is not a JSON object"},
		{`{"amount_minor":99999999999999999999}`, 0, "must be a whole number"},
	} {
		got, err := spend.Amount(json.RawMessage(tc.payload))
		switch {
		case tc.problem == "" && (err != nil || got != tc.want):
			t.Errorf("Amount(%s) = %d, %v; want %d", tc.payload, got, err, tc.want)
		case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem) || !errors.Is(err, ErrBudgetAmount)):
			t.Errorf("Amount(%s): %v, want %q", tc.payload, err, tc.problem)
		case err != nil && (strings.Contains(err.Error(), "9999") || strings.Contains(err.Error(), "-5")):
			t.Errorf("Amount(%s) quotes the value: %v", tc.payload, err)
		}
		if n, err := count.Amount(json.RawMessage(tc.payload)); n != 1 || err != nil {
			t.Errorf("a count's amount of %s: %d, %v", tc.payload, n, err)
		}
	}
	a, err := spend.Scope("agent-1", "create_payment", json.RawMessage(`{"currency":"EUR","amount_minor":1}`), nil)
	b, err2 := spend.Scope("agent-1", "create_payment", json.RawMessage(`{"amount_minor":7,"currency":"EUR"}`), map[string]string{"x": "y"})
	if err != nil || err2 != nil || a != b || a != `{"payload.currency":"EUR","principal":"agent-1"}` {
		t.Fatalf("scopes %q %q (%v %v)", a, b, err, err2)
	}
	if c, _ := spend.Scope("agent-2", "create_payment", json.RawMessage(`{"currency":"EUR"}`), nil); c == a {
		t.Fatal("two principals share a per-principal budget")
	}
	if c, _ := spend.Scope("agent-1", "create_payment", json.RawMessage(`{}`), nil); c != `{"principal":"agent-1"}` {
		t.Fatalf("missing member: %q", c)
	}
	if c, _ := count.Scope("p", "create_payment", json.RawMessage(`{}`), map[string]string{"customer": "c1"}); c != `{"action":"create_payment","principal":"p","refs.customer":"c1"}` {
		t.Fatalf("refs and action: %q", c)
	}
}

// TestBudgetsRefused: every bad budget fails the load with its line and
// path, a summed member checked against payload_schema.
func TestBudgetsRefused(t *testing.T) {
	schema := `    payload_schema:
      type: object
      properties:
        amount_minor: {type: integer}
        amount: {type: number}
`
	ok := "window: 24h, limit: 10, on_exceed: reject"
	for name, tc := range map[string]struct{ block, want string }{
		"not a list":                    {"    budgets: {name: x}\n", `p.yaml:3: actions.a.budgets: must be a list of budgets`},
		"no name":                       {"    budgets: [{count: true, " + ok + "}]\n", `p.yaml:3: actions.a.budgets[0]: needs a name`},
		"bad name":                      {"    budgets: [{name: Daily_Spend, count: true, " + ok + "}]\n", `actions.a.budgets[0].name: Daily_Spend is not a budget name`},
		"twice":                         {"    budgets:\n      - {name: x, count: true, " + ok + "}\n      - {name: x, count: true, " + ok + "}\n", `p.yaml:5: actions.a.budgets[1].name: "x" is already the name of a budget of this action (line 4)`},
		"neither":                       {"    budgets: [{name: x, " + ok + "}]\n", `budgets[0]: needs sum`},
		"both":                          {"    budgets: [{name: x, sum: n, count: true, " + ok + "}]\n", `budgets[0].count: is not allowed with sum`},
		"count false":                   {"    budgets: [{name: x, count: false, " + ok + "}]\n", `budgets[0].count: false is not a budget`},
		"nested sum":                    {"    budgets: [{name: x, sum: a.b, " + ok + "}]\n", `budgets[0].sum: a.b is not a top-level payload member name`},
		"sum not listed":                {schema + "    budgets: [{name: x, sum: cost, " + ok + "}]\n", `p.yaml:8: actions.a.budgets[0].sum: "cost" is not a property of payload_schema (its properties: amount, amount_minor)`},
		"sum not integer":               {schema + "    budgets: [{name: x, sum: amount, " + ok + "}]\n", `budgets[0].sum: "amount" must be an integer in payload_schema`},
		"tenant":                        {"    budgets: [{name: x, count: true, per: [tenant], " + ok + "}]\n", `budgets[0].per[0]: tenant is always part of a budget's scope`},
		"bad dimension":                 {"    budgets: [{name: x, count: true, per: ['refs.'], " + ok + "}]\n", `budgets[0].per[0]: refs. is not one`},
		"dimension twice":               {"    budgets: [{name: x, count: true, per: [currency, payload.currency], " + ok + "}]\n", `budgets[0].per[1]: "payload.currency" is listed twice`},
		"no window":                     {"    budgets: [{name: x, count: true, limit: 1, on_exceed: reject}]\n", `budgets[0]: needs window`},
		"zero window":                   {"    budgets: [{name: x, count: true, window: 0s, limit: 1, on_exceed: reject}]\n", `budgets[0].window: "0s" is outside 1s..8784h`},
		"long window":                   {"    budgets: [{name: x, count: true, window: 400d, limit: 1, on_exceed: reject}]\n", `budgets[0].window: "400d" is outside`},
		"no limit":                      {"    budgets: [{name: x, count: true, window: 1h, on_exceed: reject}]\n", `budgets[0]: needs limit`},
		"zero limit":                    {"    budgets: [{name: x, count: true, window: 1h, limit: 0, on_exceed: reject}]\n", `budgets[0].limit: 0 is out of range`},
		"text limit":                    {"    budgets: [{name: x, count: true, window: 1h, limit: lots, on_exceed: reject}]\n", `budgets[0].limit: must be an integer`},
		"no on_exceed":                  {"    budgets: [{name: x, count: true, window: 1h, limit: 1}]\n", `budgets[0]: needs on_exceed (reject or approval)`},
		"bad on_exceed":                 {"    budgets: [{name: x, count: true, window: 1h, limit: 1, on_exceed: warn}]\n", `budgets[0].on_exceed: "warn" is not one of reject, approval`},
		"unknown field":                 {"    budgets: [{name: x, count: true, " + ok + ", limits: 5}]\n", `budgets[0].limits: unknown field`},
		"window past retention":         {"    retention: 7d\n    budgets: [{name: x, count: true, window: 30d, limit: 1, on_exceed: reject}]\n", `p.yaml:3: actions.a.retention: retention 168h is shorter than budget x's window (720h)`},
		"window past default retention": {"    budgets: [{name: x, count: true, window: 31d, limit: 1, on_exceed: reject}]\n", `actions.a.budgets[0].window: retention 720h is shorter than budget x's window (744h)`},
		"redacted sum":                  {"    redact_fields: [amount_minor]\n    budgets: [{name: x, sum: amount_minor, " + ok + "}]\n", `p.yaml:4: actions.a.budgets[0]: budget x reads payload.amount_minor, which is in redact_fields`},
		"redacted scope":                {"    redact_fields: [email]\n    budgets: [{name: x, count: true, per: [principal, email], " + ok + "}]\n", `actions.a.budgets[0]: budget x reads payload.email, which is in redact_fields`},
		"shared disagree":               {"    budgets: [{name: x, count: true, " + ok + "}]\n  b:\n    budgets: [{name: x, count: true, window: 1h, limit: 10, on_exceed: reject}]\n", `actions.b.budgets: budget "x" is also declared by action a with another per, window or limit`},
	} {
		_, err := Parse([]byte("actions:\n  a:\n"+tc.block), "p.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
	// Shared budgets that agree load (each action may sum its own member).
	shared := "actions:\n  a:\n    budgets: [{name: x, sum: n, " + ok + "}]\n  b:\n    budgets: [{name: x, sum: m, " + ok + "}]\n"
	if _, err := Parse([]byte(shared), "p.yaml"); err != nil {
		t.Fatal(err)
	}
}
