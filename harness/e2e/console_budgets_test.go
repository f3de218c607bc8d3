package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// consoleMetricsA is a metrics scraper's token of team-a: it may read
// /metrics and nothing of the console.
const consoleMetricsA = "tok-console-metrics-4a9c0e17d2"

// budgetsConsoleServer starts `opjournal serve` with the example budgets
// policy (examples/policies/budgets.yaml: 5 payments and 5,000.00 a day
// per agent and currency) and the console's people of two tenants.
func budgetsConsoleServer(t *testing.T) *proc {
	t.Helper()
	dir := t.TempDir()
	tokensYAML := "tokens:\n"
	for _, tk := range []struct{ tok, name, tenant, role string }{
		{consoleOperA, "alice", "team-a", "operator"}, {consoleOperB, "bob", "team-b", "operator"},
		{consoleAgentA, "checkout-agent", "team-a", "agent"}, {consoleReconA, "reconciler-a", "team-a", "reconciler"},
		{csrfAgentB, "checkout-agent-b", "team-b", "agent"}, {consoleMetricsA, "scraper", "team-a", "metrics"},
	} {
		tokensYAML += fmt.Sprintf("  - name: %s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n", tk.name, auth.Digest(tk.tok), tk.tenant, tk.role)
	}
	writeFile(t, filepath.Join(dir, "tokens.yaml"), tokensYAML)
	return startServer(t, "--database-url", "sqlite://"+filepath.Join(dir, "journal.db"), "--auth-file", filepath.Join(dir, "tokens.yaml"),
		"--policy", "../../examples/policies/budgets.yaml", "--purge-interval", "0")
}

// budgetPayment registers a payment as an agent does (with a claim) and
// returns the operation: in progress, or awaiting approval when it would
// pass the daily spend.
func budgetPayment(t *testing.T, agent pb.JournalServiceClient, key string, amount int, currency string) *pb.Operation {
	t.Helper()
	res, err := agent.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
		Payload: mustStruct(t, fmt.Sprintf(`{"order_id": %q, "amount_minor": %d, "currency": %q, "card_number": "4242424242424242"}`, key, amount, currency)),
		Claim:   &pb.ClaimOptions{WorkerId: "checkout-worker-1"}})
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return res.GetOperation()
}

// TestConsoleBudgetsInABrowser drives the real binary's Budgets page and
// the budgets on an operation's page in headless Chromium: the counters
// of the operator's tenant with their scope in words, a bar and the
// figures, filtered by budget; the payment a budget sent for approval,
// which says which budget it would pass, approved past the limit; no
// sideways scrolling at 200% zoom. And as an attacker would: no session,
// an agent's bearer token, another tenant's operator. `opjournal budgets`
// prints the same counters.
func TestConsoleBudgetsInABrowser(t *testing.T) {
	p := budgetsConsoleServer(t)
	agent, agentB := as(t, p, consoleAgentA), as(t, p, csrfAgentB)
	ctx := ctxFor(t)
	budgetPayment(t, agent, "pay-2026-12-01-o3001", 200000, "EUR")
	budgetPayment(t, agent, "pay-2026-12-01-o3002", 250000, "EUR")
	// The first went through: its part of the counters is known.
	if _, err := agent.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "pay-2026-12-01-o3001", Attempt: 1, ExternalId: "pi_3001"}); err != nil {
		t.Fatal(err)
	}
	budgetPayment(t, agent, "pay-2026-12-01-o3003", 5000, "USD")
	over := budgetPayment(t, agent, "pay-2026-12-01-o3004", 100000, "EUR")
	if over.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL || over.GetApproval().GetRule() != "budget" || strings.Join(over.GetApproval().GetBudgets(), ",") != "daily-spend" {
		t.Fatalf("the payment past the daily spend: %s %v", over.GetStatus(), over.GetApproval())
	}
	budgetPayment(t, agentB, "pay-b-secret", 77700, "GBP")
	base := p.BaseURL + "/console/"

	// No session: an agent's bearer token counts for nothing; the page is
	// the sign-in, with nothing of the counters.
	if status, _, body := doAs(t, consoleAgentA, http.MethodGet, base+"budgets", ""); status != http.StatusOK || !strings.Contains(body, `id="token"`) || strings.Contains(body, "checkout-agent") {
		t.Fatalf("the budgets with an agent's bearer token: %d %.300s", status, body)
	}

	b := browserFor(t)
	run(t, b, "opening the budgets without a session", chromedp.Navigate(base+"budgets"), chromedp.WaitVisible(chromedp.ID("token")))
	// A metrics token cannot sign in.
	run(t, b, "signing in as the scraper", chromedp.SendKeys(chromedp.ID("token"), consoleMetricsA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".problem")))
	if text := mainText(t, b); !strings.Contains(text, "cannot sign in to the console") {
		t.Fatalf("metrics sign-in: %s", text)
	}

	// The operator finds the Budgets page in the navigation.
	run(t, b, "signing in as alice", chromedp.SendKeys(chromedp.ID("token"), consoleOperA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")),
		chromedp.Click(chromedp.CSS(`header.top nav a[href="/console/budgets"]`)), chromedp.WaitVisible(chromedp.ID("budgets")))
	rows := value(t, b, "reading the counters", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#budgets tbody tr')].map(tr => [...tr.cells].map(td => td.innerText.replace(/\s+/g, ' ').trim()).join(' | '))`))
	want := []string{
		"create_payment | daily-payments count of operations, per principal | principal: checkout-agent | 4 of 5 (80%) | 3 | 4 | 24h | reject",
		"create_payment | daily-spend sum of amount_minor, per principal, payload.currency | principal: checkout-agent payload.currency: EUR | 450000 of 500000 (90%) | 250000 | 2 | 24h | approval",
		"create_payment | daily-spend sum of amount_minor, per principal, payload.currency | principal: checkout-agent payload.currency: USD | 5000 of 500000 (1%) | 5000 | 1 | 24h | approval",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the counters:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if label := value(t, b, "reading a bar", chromedp.Evaluate[string](`document.querySelectorAll('#budgets svg.bar')[1].getAttribute('aria-label')`)); label != "450000 of 500000 used (90%); 250000 of it reserved by operations whose outcome is not yet known" {
		t.Fatalf("the bar's label: %q", label)
	}
	if text := mainText(t, b); strings.Contains(text, "GBP") || strings.Contains(text, "checkout-agent-b") || strings.Contains(text, "77700") {
		t.Fatalf("team-a's budgets show team-b's: %s", text)
	}
	screenshot(t, b, "budgets")

	// The filter: only the daily spend.
	run(t, b, "filtering by budget", chromedp.SetValue(chromedp.ID("b-budget"), "daily-spend"), chromedp.Click(chromedp.CSS("form.filters button")),
		chromedp.WaitReady(chromedp.CSS(`#b-budget option[selected]`)))
	if n := value(t, b, "counting the rows", chromedp.Evaluate[int](`document.querySelectorAll('#budgets tbody tr').length`)); n != 2 {
		t.Fatalf("filtered by daily-spend: %d rows: %s", n, mainText(t, b))
	}
	if url := value(t, b, "reading the location", chromedp.Location()); !strings.Contains(url, "budget=daily-spend") {
		t.Fatalf("the filter is not in the URL: %s", url)
	}

	// The payment past the daily spend: the approvals queue and its page
	// say which budget it would pass; its page shows what it holds.
	run(t, b, "opening the approvals", chromedp.Navigate(base+"approvals?refresh=off"), chromedp.WaitVisible(chromedp.ID("approvals")))
	if text := mainText(t, b); !strings.Contains(text, "it would pass the limit of budget daily-spend") {
		t.Fatalf("the approvals queue does not say which budget asked: %s", text)
	}
	run(t, b, "opening the payment", chromedp.Click(chromedp.CSS(`a[href="/console/operation?key=pay-2026-12-01-o3004"]`)), chromedp.WaitVisible(chromedp.ID("held-budgets")))
	if why := value(t, b, "reading why", chromedp.Text(chromedp.ID("approval-why"))); why != "it would pass the limit of budget daily-spend, whose on_exceed asks a person" {
		t.Fatalf("why: %q", why)
	}
	if over := value(t, b, "reading the budget it passes", chromedp.Text(chromedp.ID("approval-budgets"))); !strings.Contains(over, "daily-spend (principal checkout-agent, payload.currency EUR): this operation adds 100000, to 450000 of its limit 500000 used now (in the last 24h)") {
		t.Fatalf("over budget: %q", over)
	}
	held := value(t, b, "reading the holds", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#held-budgets tbody tr')].map(tr => [...tr.cells].map(td => td.innerText.replace(/\s+/g, ' ').trim()).join(' | '))`))
	if len(held) != 2 || !strings.HasPrefix(held[0], "daily-payments count of operations, per principal | principal: checkout-agent | 1 counts until ") ||
		!strings.HasPrefix(held[1], "daily-spend sum of amount_minor, per principal, payload.currency | principal: checkout-agent payload.currency: EUR | 100000 over the limit not counted yet") {
		t.Fatalf("the holds:\n%s", strings.Join(held, "\n"))
	}
	screenshot(t, b, "budget-approval")

	// Approved: the confirmation says it goes past the limit, and then
	// the counter is past it.
	run(t, b, "approving", chromedp.SendKeys(chromedp.ID("ap-reason"), "o-3004 confirmed by the customer: a one-off above the daily spend"),
		chromedp.Click(chromedp.ID("ap-submit")), chromedp.WaitVisible(chromedp.CSS(".consequence")))
	if text := mainText(t, b); !strings.Contains(text, "It is admitted over the limit of budget daily-spend") {
		t.Fatalf("the confirmation: %s", text)
	}
	run(t, b, "confirming", chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.CSS(".done")))
	if op := lookup(t, ctx, agent, "pay-2026-12-01-o3004"); op.Status != pb.Status_STATUS_PENDING {
		t.Fatalf("after the approval: %s", op.Status)
	}
	run(t, b, "opening the daily spend", chromedp.Navigate(base+"budgets?budget=daily-spend&refresh=off"), chromedp.WaitVisible(chromedp.ID("budgets")))
	if text := mainText(t, b); !strings.Contains(text, "550000 of 500000 (110%) past the limit") {
		t.Fatalf("the counter after the approval: %s", text)
	}

	// At 200% zoom the pages do not scroll sideways (a wide table scrolls
	// in its own region).
	run(t, b, "zooming to 200%", chromedp.EmulateViewport(640, 900))
	for _, path := range []string{"budgets?refresh=off", "operation?key=pay-2026-12-01-o3004"} {
		run(t, b, "opening "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		if over := value(t, b, "measuring "+path, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`)); over {
			width := value(t, b, "measuring", chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
			t.Fatalf("%s scrolls sideways at 200%% zoom: %d CSS pixels wide in 640", path, width)
		}
	}
	run(t, b, "back to 100%", chromedp.ResetViewport())

	// Another tenant's operator sees its own counters only.
	run(t, b, "signing in as bob", chromedp.Navigate(base+"budgets"), chromedp.Click(chromedp.CSS(`button.link`)), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleOperB), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")),
		chromedp.Navigate(base+"budgets?refresh=off"), chromedp.WaitVisible(chromedp.ID("budgets")))
	if text := mainText(t, b); !strings.Contains(text, "payload.currency: GBP") || !strings.Contains(text, "checkout-agent-b") ||
		strings.Contains(text, "EUR") || strings.Contains(text, "USD") || strings.Contains(text, "550000") {
		t.Fatalf("bob's budgets: %s", text)
	}
	// A reconciler reads them too (ListBudgets' roles), and may not decide.
	run(t, b, "signing in as the reconciler", chromedp.Click(chromedp.CSS(`button.link`)), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleReconA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")),
		chromedp.Click(chromedp.CSS(`header.top nav a[href="/console/budgets"]`)), chromedp.WaitVisible(chromedp.ID("budgets")))
	if text := mainText(t, b); !strings.Contains(text, "550000 of 500000") {
		t.Fatalf("the reconciler's budgets: %s", text)
	}

	// The command line prints the same counters, and refuses an agent.
	code, out, errOut := runSplit(t, []string{"OPJOURNAL_TOKEN=" + consoleOperA}, "opjournal", "budgets", "--journal-addr", p.GRPCAddr, "--budget", "daily-spend")
	if code != 0 || !strings.Contains(out, "payload.currency=EUR principal=checkout-agent  550000  500000  110%") || strings.Contains(out, "GBP") {
		t.Fatalf("opjournal budgets: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runSplit(t, []string{"OPJOURNAL_TOKEN=" + consoleAgentA}, "opjournal", "budgets", "--journal-addr", p.GRPCAddr)
	if code != 1 || out != "" || !strings.Contains(errOut, "budgets: PERMISSION_DENIED") {
		t.Fatalf("opjournal budgets as the agent: exit %d\n%s\n%s", code, out, errOut)
	}
	if os.Getenv("OPJOURNAL_SCREENSHOTS") != "" {
		t.Logf("screenshots written to %s", os.Getenv("OPJOURNAL_SCREENSHOTS"))
	}
}
