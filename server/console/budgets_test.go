package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
)

// budgetPolicy is create_payment with two budgets, as
// examples/policies/budgets.yaml has them (smaller limits): a count per
// principal that refuses, and a spend per principal and currency that
// asks a person.
const budgetPolicy = `actions:
  create_payment:
    integer_fields: [amount_minor]
    redact_fields: [card_number]
    budgets:
      - {name: daily-payments, count: true, per: [principal], window: 24h, limit: 4, on_exceed: reject}
      - {name: daily-spend, sum: amount_minor, per: [principal, currency], window: 24h, limit: 10000, on_exceed: approval}
  send_email: {}
`

// pay registers a payment of amount in currency as principal of tenant,
// with a claim, and returns the operation (awaiting approval when a
// budget asked a person).
func (e *env) pay(tenant, principal, key string, amount int, currency string) *opjournal.Operation {
	e.t.Helper()
	res, err := e.svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: tenant, Principal: principal},
		Key: key, Action: "create_payment", Payload: json.RawMessage(fmt.Sprintf(`{"amount_minor": %d, "currency": %q, "card_number": "4242424242424242"}`, amount, currency)),
		Claim: &journal.ClaimOptions{WorkerID: "w1"}})
	if err != nil {
		e.t.Fatalf("register %s: %v", key, err)
	}
	return res.Operation
}

// budgetRows reads the Budgets page's table: per row, the text of each
// cell by its class (scope, used, limit, unknown, ops-count, and the
// first two cells as action and budget).
func budgetRows(t *testing.T, body, tableID string) []map[string]string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]string
	var table *html.Node
	var find func(n *html.Node)
	find = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "table" && attr(n, "id") == tableID {
			table = n
		}
		for c := n.FirstChild; c != nil && table == nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if table == nil {
		return nil
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "tr" && n.Parent != nil && n.Parent.Data == "tbody" {
			row := map[string]string{}
			i := 0
			for td := n.FirstChild; td != nil; td = td.NextSibling {
				if td.Type != html.ElementNode || td.Data != "td" {
					continue
				}
				text := strings.Join(strings.Fields(textOf(td)), " ")
				for _, class := range strings.Fields(attr(td, "class")) {
					row[class] = text
				}
				row[fmt.Sprint(i)] = text
				i++
			}
			rows = append(rows, row)
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(table)
	return rows
}

func textOf(n *html.Node) string {
	if n.Type == html.TextNode {
		return n.Data
	}
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.ElementNode && (c.Data == "svg" || c.Data == "br") {
			b.WriteString(" ")
			continue
		}
		b.WriteString(textOf(c))
	}
	return b.String()
}

// TestBudgetsPageListsTheTenantsCounters: the page lists every counter of
// the signed-in tenant with its scope in words, its use of the limit (a
// bar and the figures) and the part reserved by unknown outcomes, and
// nothing of another tenant's; the filters narrow it; the navigation
// links it.
func TestBudgetsPageListsTheTenantsCounters(t *testing.T) {
	e := newEnvPolicy(t, true, budgetPolicy, nil)
	ctx := context.Background()
	a := journal.Caller{Tenant: "team-a", Principal: "agent-a"}
	e.pay("team-a", "agent-a", "pay-1", 4000, "EUR")
	e.pay("team-a", "agent-a", "pay-2", 3000, "EUR")
	e.pay("team-a", "agent-a", "pay-3", 2000, "USD")
	e.pay("team-a", "agent-a", "pay-4", 1000, "EUR")
	if _, err := e.svc.MarkSucceeded(ctx, journal.MarkSucceededRequest{Caller: a, Key: "pay-1", Attempt: 1, ExternalID: "pi_1"}); err != nil {
		t.Fatal(err)
	}
	// A definitive failure gives its amount back.
	if _, err := e.svc.MarkFailedFinal(ctx, journal.MarkRequest{Caller: a, Key: "pay-4", Attempt: 1, ErrorCode: "card_declined"}); err != nil {
		t.Fatal(err)
	}
	// Another tenant's agent, with values team-a must never see.
	e.pay("team-b", "agent-b-hidden", "pay-b", 9000, "GBP")

	b := e.browser()
	b.signIn(operA)
	q := b.get("/console/queues")
	if !strings.Contains(q.body, `<a href="/console/budgets">Budgets</a>`) {
		t.Fatal("the navigation does not link the Budgets page")
	}
	p := b.get("/console/budgets?refresh=off")
	if p.status != http.StatusOK || !strings.Contains(p.body, `href="/console/budgets" aria-current="page"`) {
		t.Fatalf("budgets page: %d %.600s", p.status, p.body)
	}
	for _, secret := range []string{"agent-b-hidden", "GBP", "9000", "4242424242424242"} {
		if strings.Contains(p.body, secret) {
			t.Fatalf("team-a's budgets page shows %q", secret)
		}
	}
	rows := budgetRows(t, p.body, "budgets")
	got := map[string]map[string]string{}
	for _, r := range rows {
		got[r["0"]+" "+strings.Fields(r["1"])[0]+" "+r["scope"]] = r
	}
	for key, want := range map[string][3]string{ // used of the limit, reserved by unknown, operations
		"create_payment daily-payments principal: agent-a":                    {"3 of 4 (75%)", "2", "3"},
		"create_payment daily-spend principal: agent-a payload.currency: EUR": {"7000 of 10000 (70%)", "3000", "2"},
		"create_payment daily-spend principal: agent-a payload.currency: USD": {"2000 of 10000 (20%)", "2000", "1"},
	} {
		r, ok := got[key]
		if !ok {
			t.Fatalf("no row %q in %v", key, rows)
		}
		if have := [3]string{r["use"], r["unknown"], r["ops-count"]}; have != want {
			t.Errorf("%s: used of the limit, unknown, operations %v, want %v", key, have, want)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %v", len(rows), rows)
	}
	for _, want := range []string{
		`aria-label="7000 of 10000 used (70%); 3000 of it reserved by operations whose outcome is not yet known"`,
		"sum of amount_minor, per principal, payload.currency", "count of operations, per principal",
		"<td>24h</td>", "<td>approval</td>", "<td>reject</td>",
	} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("the budgets page lacks %q", want)
		}
	}
	if strings.Contains(p.body, `http-equiv="refresh"`) {
		t.Fatal("refresh=off still refreshes")
	}
	if !strings.Contains(b.get("/console/budgets").body, `http-equiv="refresh"`) {
		t.Fatal("the budgets page does not refresh by default")
	}

	// The filters.
	only := budgetRows(t, b.get("/console/budgets?budget=daily-payments").body, "budgets")
	if len(only) != 1 || !strings.HasPrefix(only[0]["1"], "daily-payments") {
		t.Fatalf("?budget=daily-payments: %v", only)
	}
	if rows := budgetRows(t, b.get("/console/budgets?action=create_payment&budget=daily-spend").body, "budgets"); len(rows) != 2 {
		t.Fatalf("?action=create_payment&budget=daily-spend: %v", rows)
	}
	if p := b.get("/console/budgets?action=send_email"); p.status != http.StatusOK || !strings.Contains(p.body, "No budget counters match these filters.") {
		t.Fatalf("an action without budgets: %d", p.status)
	}

	// Team b sees its own counter only; a budget in which nothing counts
	// for it is listed once, without a scope.
	ob := e.browser()
	ob.signIn(operB)
	pb := ob.get("/console/budgets")
	for _, secret := range []string{"agent-a", "EUR", "USD", "7000"} {
		if strings.Contains(pb.body, secret) {
			t.Fatalf("team-b's budgets page shows team-a's %q", secret)
		}
	}
	rowsB := budgetRows(t, pb.body, "budgets")
	if len(rowsB) != 2 || rowsB[0]["use"] != "1 of 4 (25%)" || rowsB[1]["scope"] != "principal: agent-b-hidden payload.currency: GBP" || rowsB[1]["use"] != "9000 of 10000 (90%)" {
		t.Fatalf("team-b's counters: %v", rowsB)
	}
}

// TestBudgetsPageOnlyForItsRoles: without a session the page is the
// sign-in (a bearer token counts for nothing here); agent and metrics
// tokens cannot sign in; a reconciler reads the counters, as ListBudgets
// lets it.
func TestBudgetsPageOnlyForItsRoles(t *testing.T) {
	e := newEnvPolicy(t, true, budgetPolicy, nil)
	e.pay("team-a", "agent-a", "pay-1", 4000, "EUR")
	anon := e.browser()
	if p := anon.get("/console/budgets"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/signin" {
		t.Fatalf("no session: %d %s", p.status, p.header.Get("Location"))
	}
	for _, tok := range []string{agentA, metrA, adminA, operA} {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/console/budgets", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := anon.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		p := read(t, resp)
		if p.status != http.StatusSeeOther || strings.Contains(p.body, "agent-a") {
			t.Fatalf("a bearer token instead of a session: %d", p.status)
		}
	}
	for _, tok := range []string{agentA, metrA} {
		b := e.browser()
		if res, _ := b.signIn(tok); res.status != http.StatusForbidden {
			t.Fatalf("sign-in with an agent or metrics token: %d", res.status)
		}
		if p := b.get("/console/budgets"); p.status != http.StatusSeeOther || strings.Contains(p.body, "agent-a") {
			t.Fatalf("budgets after a refused sign-in: %d", p.status)
		}
	}
	for _, tok := range []string{reconA, adminA} {
		b := e.browser()
		b.signIn(tok)
		p := b.get("/console/budgets")
		if p.status != http.StatusOK || !strings.Contains(p.body, "principal: <strong>agent-a</strong>") || !strings.Contains(p.body, `href="/console/budgets"`) {
			t.Fatalf("budgets as %s: %d", tok, p.status)
		}
	}
	// Without authentication the local admin reads the default tenant's.
	local := newEnvPolicy(t, false, budgetPolicy, nil)
	local.pay("", "agent-local", "pay-l", 500, "EUR")
	if p := local.browser().get("/console/budgets"); p.status != http.StatusOK || !strings.Contains(p.body, "agent-local") || !strings.Contains(p.body, "No authentication.") {
		t.Fatalf("local budgets: %d", p.status)
	}
}

// TestBudgetsPageRefusesOddQueries: a filter that names no action or
// budget of the policy, a huge one, markup, bad encodings: a 400 that
// names the parameter, never a 5xx, never the value echoed whole or
// unescaped, and no counters.
func TestBudgetsPageRefusesOddQueries(t *testing.T) {
	e := newEnvPolicy(t, true, budgetPolicy, nil)
	e.pay("team-a", "agent-a", "pay-1", 4000, "EUR")
	b := e.browser()
	b.signIn(operA)
	huge := strings.Repeat("x", 100_000)
	for path, says := range map[string]string{
		"/console/budgets?action=nope":                                     `action: &#34;nope&#34; is not an action of the policy`,
		"/console/budgets?budget=nope":                                     `budget: &#34;nope&#34; is not a budget of the policy`,
		"/console/budgets?action=send_email&budget=daily-spend":            "is not a budget of action send_email",
		"/console/budgets?action=" + huge:                                  "action: is 100000 bytes",
		"/console/budgets?budget=" + url.QueryEscape("<script>x</script>"): "&lt;script&gt;",
		"/console/budgets?action=%ff%fe":                                   "is not an action of the policy",
		"/console/budgets?action=" + url.QueryEscape("create_payment\x00"): "is not an action of the policy",
	} {
		p := b.get(path)
		if p.status != http.StatusBadRequest || !strings.Contains(p.body, says) {
			t.Fatalf("GET %.80s: %d, want 400 saying %q: %.600s", path, p.status, says, p.body)
		}
		if strings.Contains(p.body, "<script>x") || strings.Contains(p.body, huge[:1000]) || strings.Contains(p.body, "agent-a") {
			t.Fatalf("GET %.80s echoes the value or shows counters", path)
		}
	}
	// Repeated parameters: the first counts, as everywhere in the console.
	if p := b.get("/console/budgets?budget=daily-spend&budget=nope"); p.status != http.StatusOK || len(budgetRows(t, p.body, "budgets")) != 1 {
		t.Fatalf("a repeated parameter: %d", p.status)
	}
	// Unknown parameters are ignored.
	if p := b.get("/console/budgets?tenant=team-b&scope=%7B%7D"); p.status != http.StatusOK || len(budgetRows(t, p.body, "budgets")) != 2 {
		t.Fatalf("unknown parameters: %d", p.status)
	}
	// Only GET: a POST is not a page here.
	_, csrf := b.signIn(operA)
	if p := b.post("/console/budgets", url.Values{"csrf": {csrf}}); p.status != http.StatusNotFound && p.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST /console/budgets: %d", p.status)
	}
}

// TestOperationPageShowsItsBudgets: an operation's page lists the
// budgets it holds, in its scope, whether the hold counts now and the
// counter now; an operation a budget sent for approval says which budget
// it would pass, the approvals queue and the confirmation say so too,
// and once approved the counter is past its limit.
func TestOperationPageShowsItsBudgets(t *testing.T) {
	e := newEnvPolicy(t, true, budgetPolicy, nil)
	ctx := context.Background()
	a := journal.Caller{Tenant: "team-a", Principal: "agent-a"}
	e.pay("team-a", "agent-a", "pay-1", 6000, "EUR")
	e.pay("team-a", "agent-a", "pay-gone", 1500, "EUR")
	if _, err := e.svc.MarkFailedFinal(ctx, journal.MarkRequest{Caller: a, Key: "pay-gone", Attempt: 1, ErrorCode: "card_declined"}); err != nil {
		t.Fatal(err)
	}
	over := e.pay("team-a", "agent-a", "pay-over", 5000, "EUR")
	if over.Status != opjournal.StatusAwaitingApproval || over.Approval == nil || over.Approval.Rule != "budget" || strings.Join(over.Approval.Budgets, ",") != "daily-spend" {
		t.Fatalf("pay-over: %s %+v", over.Status, over.Approval)
	}
	b := e.browser()
	_, csrf := b.signIn(operA)

	p := b.get("/console/operation?key=pay-1")
	held := budgetRows(t, p.body, "held-budgets")
	if len(held) != 2 {
		t.Fatalf("pay-1 holds %v", held)
	}
	if !strings.HasPrefix(held[0]["0"], "daily-payments") || held[0]["scope"] != "principal: agent-a" || !strings.HasPrefix(held[0]["held"], "1 counts until ") ||
		held[0]["use"] != "2 of 4 (50%)" {
		t.Fatalf("pay-1's count budget: %v", held[0])
	}
	if held[1]["scope"] != "principal: agent-a payload.currency: EUR" || !strings.HasPrefix(held[1]["held"], "6000 counts until ") ||
		held[1]["use"] != "6000 of 10000 (60%)" || held[1]["unknown"] != "6000" {
		t.Fatalf("pay-1's spend budget: %v", held[1])
	}
	if !strings.Contains(p.body, `href="/console/budgets?action=create_payment"`) {
		t.Fatal("the operation page does not link its action's budgets")
	}
	gone := budgetRows(t, b.get("/console/operation?key=pay-gone").body, "held-budgets")
	if len(gone) != 2 || !strings.Contains(gone[1]["held"], "not counted: the operation failed finally") {
		t.Fatalf("pay-gone: %v", gone)
	}

	// The operation over its spend budget, awaiting approval.
	p = b.get("/console/operation?key=pay-over")
	for _, want := range []string{
		`<dd id="approval-why">it would pass the limit of budget daily-spend, whose on_exceed asks a person</dd>`,
		"(principal <strong>agent-a</strong>, payload.currency <strong>EUR</strong>): this operation adds 5000, to 6000 of its limit 10000 used now (in the last 24h). Approving admits it past the limit.",
		"over the limit", "not counted yet: it is over the limit and counts only once a person approves it",
	} {
		if !strings.Contains(p.body, want) {
			t.Fatalf("pay-over's page lacks %q", want)
		}
	}
	if q := b.get("/console/approvals"); !strings.Contains(q.body, "it would pass the limit of budget daily-spend") {
		t.Fatal("the approvals queue does not say which budget asked")
	}
	form := url.Values{"csrf": {csrf}, "key": {"pay-over"}, "verdict": {"approve"}, "request_hash": {over.RequestHash}, "reason": {"the customer confirmed the order"}}
	confirm := b.post("/console/decide", form)
	if confirm.status != http.StatusOK || !strings.Contains(confirm.body, "It is admitted over the limit of budget daily-spend") {
		t.Fatalf("approval confirmation: %d %.600s", confirm.status, confirm.body)
	}
	form.Set("step", "apply")
	if done := b.post("/console/decide", form); done.status != http.StatusSeeOther {
		t.Fatalf("approve: %d %.400s", done.status, done.body)
	}
	rows := budgetRows(t, b.get("/console/budgets?budget=daily-spend").body, "budgets")
	if len(rows) != 1 || rows[0]["use"] != "11000 of 10000 (110%) past the limit" {
		t.Fatalf("after the approval: %v", rows)
	}
	if h := budgetRows(t, b.get("/console/operation?key=pay-over").body, "held-budgets"); !strings.Contains(h[1]["held"], "counts until") {
		t.Fatalf("pay-over after its approval: %v", h)
	}
}
