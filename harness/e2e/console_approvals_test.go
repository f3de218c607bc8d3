package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// awaitingPayment registers a big payment as an agent does (with a claim
// asked) and checks that it waits for a person: not claimed, next step
// AWAIT_APPROVAL.
func awaitingPayment(t *testing.T, agent pb.JournalServiceClient, key string, amount int) *pb.Operation {
	t.Helper()
	res, err := agent.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: key, ActionType: "big_payment",
		Payload: mustStruct(t, fmt.Sprintf(`{"order_id": "o-%s", "amount_minor": %d, "currency": "EUR", "card_number": "4242424242424242"}`, key, amount)),
		Claim:   &pb.ClaimOptions{WorkerId: "checkout-worker-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed || res.Next != pb.NextStep_NEXT_STEP_AWAIT_APPROVAL || res.Operation.Status != pb.Status_STATUS_AWAITING_APPROVAL {
		t.Fatalf("%s: claimed=%v next=%s status=%s", key, res.Claimed, res.Next, res.Operation.Status)
	}
	return res.Operation
}

// TestConsoleApprovalsInABrowser drives the approvals of the real
// binary's console in headless Chromium: the queue oldest first with ages
// and amounts, one approval with its reason and confirmation (the journal
// then has it pending, by the operator, and the agent's claim succeeds),
// a bulk rejection (failed_final, and the agent's retry gets the refusal),
// the requester refused, a reconciler's session refused the queue, and a
// forged form without the CSRF token changing nothing.
func TestConsoleApprovalsInABrowser(t *testing.T) {
	p := consoleServer(t)
	agent, dave := as(t, p, consoleAgentA), as(t, p, consoleDaveA)
	ctx := ctxFor(t)
	old := awaitingPayment(t, agent, "pay-2026-12-01-o2001", 250000)
	// The queue orders by creation (milliseconds): register the second
	// once the clock has passed the first's.
	eventually(t, 5*time.Second, func() (bool, string) {
		return time.Now().After(old.CreatedAt.AsTime().Add(5 * time.Millisecond)), "the clock passing the first registration"
	})
	newer := awaitingPayment(t, agent, "pay-2026-12-01-o1999", 180000)
	forge := awaitingPayment(t, agent, "pay-forge-approval", 990000)
	davesOwn := awaitingPayment(t, dave, "pay-by-dave", 120000)
	base := p.BaseURL + "/console/"
	b := browserFor(t)

	// A reconciler may sign in, but the approvals are not for it.
	run(t, b, "signing in as the reconciler", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleReconA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")))
	if nav := value(t, b, "reading the navigation", chromedp.Text(chromedp.CSS("header.top nav"))); strings.Contains(nav, "Approvals") {
		t.Fatalf("the reconciler's navigation offers approvals: %s", nav)
	}
	run(t, b, "opening the approvals as the reconciler", chromedp.Navigate(base+"approvals"), chromedp.WaitVisible(chromedp.CSS(".problem")))
	if text := mainText(t, b); !strings.Contains(text, "may not see or decide approvals") || strings.Contains(text, "pay-2026") {
		t.Fatalf("the reconciler's approvals page: %s", text)
	}
	// No session (an agent's bearer token counts for nothing here): the
	// sign-in page, after the redirect, and nothing of the queue.
	if status, _, body := doAs(t, consoleAgentA, http.MethodGet, base+"approvals", ""); status != http.StatusOK || !strings.Contains(body, `id="token"`) || strings.Contains(body, "pay-2026") {
		t.Fatalf("the approvals with an agent's bearer token: %d %.300s", status, body)
	}
	run(t, b, "signing out", chromedp.Click(chromedp.CSS(`button.link`)), chromedp.WaitVisible(chromedp.ID("token")))

	// The operator: the queue, oldest first, with ages and amounts.
	run(t, b, "signing in as alice", chromedp.SendKeys(chromedp.ID("token"), consoleOperA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")),
		chromedp.Click(chromedp.CSS(`a[href="/console/approvals"]`)), chromedp.WaitVisible(chromedp.ID("approvals")))
	rows := value(t, b, "reading the queue", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#approvals tbody tr td:nth-child(3)')].map(td => td.textContent.trim())`))
	if strings.Join(rows, " ") != "pay-2026-12-01-o2001 pay-2026-12-01-o1999 pay-forge-approval pay-by-dave" {
		t.Fatalf("the queue, oldest first: %v", rows)
	}
	text := mainText(t, b)
	for _, want := range []string{"amount_minor 250000", "amount_minor 180000", "currency EUR", " ago", "checkout-agent", "dave", "0 of 1", "payload.amount_minor > 100000"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the queue lacks %q: %s", want, text)
		}
	}
	if strings.Contains(text, "4242424242424242") {
		t.Fatal("the queue shows the card number")
	}
	screenshot(t, b, "approvals")

	// One approval: payload and hash, a required reason, a confirmation
	// stating the consequence, then pending by alice.
	run(t, b, "opening the oldest", chromedp.Click(chromedp.CSS(`a[href="/console/operation?key=pay-2026-12-01-o2001"]`)), chromedp.WaitVisible(chromedp.ID("approval-h")))
	if hash := value(t, b, "reading the hash", chromedp.Text(chromedp.ID("request-hash"))); hash != old.RequestHash {
		t.Fatalf("the page shows hash %q, the journal has %q", hash, old.RequestHash)
	}
	if text := mainText(t, b); !strings.Contains(text, `"card_number": "[redacted]"`) || !strings.Contains(text, `"amount_minor": 250000`) || strings.Contains(text, "4242424242424242") {
		t.Fatalf("the payload on the operation page: %s", text)
	}
	run(t, b, "approving without a reason", chromedp.Click(chromedp.ID("ap-submit")))
	if missing := value(t, b, "reading the form's validity", chromedp.Evaluate[bool](`document.getElementById('ap-reason').validity.valueMissing`)); !missing {
		t.Fatal("the form does not say the reason is missing")
	}
	if url := value(t, b, "reading the location", chromedp.Location()); !strings.Contains(url, "/console/operation?key=") {
		t.Fatalf("the form without reason was sent: %s", url)
	}
	run(t, b, "approving with a reason", chromedp.SendKeys(chromedp.ID("ap-reason"), "order o-2001 confirmed by the customer on the phone"),
		chromedp.Click(chromedp.ID("ap-submit")), chromedp.WaitVisible(chromedp.CSS(".consequence")))
	want := "Approving lets the agent call big_payment with exactly this payload (hash " + old.RequestHash + ") once"
	if text := mainText(t, b); !strings.Contains(text, want) {
		t.Fatalf("the confirmation does not say %q: %s", want, text)
	}
	screenshot(t, b, "approve")
	if op := lookup(t, ctx, agent, old.OperationKey); op.Status != pb.Status_STATUS_AWAITING_APPROVAL {
		t.Fatalf("the confirmation page changed it: %s", op.Status)
	}
	run(t, b, "confirming", chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.CSS(".done")))
	if op := lookup(t, ctx, agent, old.OperationKey); op.Status != pb.Status_STATUS_PENDING {
		t.Fatalf("after the approval: %s", op.Status)
	}
	status, _, body := doAs(t, consoleOperA, http.MethodGet, p.BaseURL+"/v1/operations:events?operation_key="+old.OperationKey, "")
	if status != http.StatusOK || !strings.Contains(body, `"actor":"alice"`) || !strings.Contains(body, "confirmed by the customer on the phone") {
		t.Fatalf("the history does not show alice's approval: %d %s", status, body)
	}
	if res, err := agent.Claim(ctx, &pb.ClaimRequest{OperationKey: old.OperationKey, WorkerId: "checkout-worker-1"}); err != nil || !res.Claimed {
		t.Fatalf("the agent's claim after the approval: %v %v", err, res)
	}

	// The requester may not approve his own: dave signs in and is refused
	// in the journal's words.
	run(t, b, "signing out", chromedp.Navigate(base+"approvals?refresh=off"), chromedp.Click(chromedp.CSS(`button.link`)), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleDaveA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")),
		chromedp.Navigate(base+"operation?key=pay-by-dave"), chromedp.WaitVisible(chromedp.ID("approval-h")))
	if text := mainText(t, b); !strings.Contains(text, "You registered this operation") {
		t.Fatalf("dave is not warned: %s", text)
	}
	run(t, b, "approving his own", chromedp.SendKeys(chromedp.ID("ap-reason"), "mine, and fine"), chromedp.Click(chromedp.ID("ap-submit")),
		chromedp.WaitVisible(chromedp.CSS(".consequence")), chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.CSS(".problem")))
	if text := mainText(t, b); !strings.Contains(text, "Not done") {
		t.Fatalf("dave's own approval: %s", text)
	}
	if op := lookup(t, ctx, agent, davesOwn.OperationKey); op.Status != pb.Status_STATUS_AWAITING_APPROVAL {
		t.Fatalf("the requester approved his own: %s", op.Status)
	}
	run(t, b, "signing out", chromedp.Navigate(base+"approvals?refresh=off"), chromedp.Click(chromedp.CSS(`button.link`)), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleOperA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")))

	// A bulk rejection: tick, one reason, confirm.
	run(t, b, "selecting", chromedp.Navigate(base+"approvals?refresh=off"), chromedp.WaitVisible(chromedp.ID("approvals")),
		chromedp.Click(chromedp.CSS(`input[value^="pay-2026-12-01-o1999 "]`)),
		chromedp.SendKeys(chromedp.ID("rj-reason"), "o-1999 was cancelled by the customer"), chromedp.Submit(chromedp.ID("rj-reason")),
		chromedp.WaitVisible(chromedp.ID("rejecting")))
	if text := mainText(t, b); !strings.Contains(text, "Confirm: reject 1 operation") || !strings.Contains(text, "the agent's retries get this refusal") || strings.Contains(text, "pay-forge-approval") {
		t.Fatalf("the bulk confirmation: %s", text)
	}
	run(t, b, "confirming the rejection", chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.ID("decided")))
	if n := value(t, b, "reading the result", chromedp.Text(chromedp.ID("decided"))); n != "1" {
		t.Fatalf("rejected %s, want 1", n)
	}
	if op := lookup(t, ctx, agent, newer.OperationKey); op.Status != pb.Status_STATUS_FAILED_FINAL || op.ErrorCode != "approval_rejected" {
		t.Fatalf("after the rejection: %s %s", op.Status, op.ErrorCode)
	}
	retry, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: newer.OperationKey, ActionType: "big_payment",
		Payload: mustStruct(t, `{"order_id": "o-pay-2026-12-01-o1999", "amount_minor": 180000, "currency": "EUR", "card_number": "4242424242424242"}`),
		Claim:   &pb.ClaimOptions{WorkerId: "checkout-worker-1"}})
	if err != nil || retry.Claimed || retry.Next != pb.NextStep_NEXT_STEP_FAILED_FINAL {
		t.Fatalf("the agent's retry after the rejection: %v %v", err, retry)
	}

	// A forged approval from another page: no CSRF token, nothing changes.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>win a prize</title><form method="post" action="%sdecide">
<input type="hidden" name="key" value="%s"><input type="hidden" name="verdict" value="approve">
<input type="hidden" name="request_hash" value="%s"><input type="hidden" name="reason" value="forged"><input type="hidden" name="step" value="apply">
<button id="go" type="submit">Claim your prize</button></form>`, base, forge.OperationKey, forge.RequestHash)
	}))
	defer evil.Close()
	run(t, b, "submitting the forged form", chromedp.Navigate(evil.URL), chromedp.Click(chromedp.ID("go")), chromedp.WaitVisible(chromedp.CSS(".problem")))
	if text := mainText(t, b); !strings.Contains(text, "nothing was changed") {
		t.Fatalf("forged form: %s", text)
	}
	if op := lookup(t, ctx, agent, forge.OperationKey); op.Status != pb.Status_STATUS_AWAITING_APPROVAL {
		t.Fatalf("the forged form changed it: %s", op.Status)
	}

	// At 200% zoom (640 CSS pixels) the queue and an awaiting operation's
	// page do not scroll sideways.
	run(t, b, "zooming to 200%", chromedp.EmulateViewport(640, 900))
	for _, path := range []string{"approvals?refresh=off", "operation?key=" + forge.OperationKey} {
		run(t, b, "opening "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		if over := value(t, b, "measuring "+path, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`)); over {
			width := value(t, b, "measuring", chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
			t.Fatalf("%s scrolls sideways at 200%% zoom: %d CSS pixels wide in 640", path, width)
		}
	}
	run(t, b, "back to 100%", chromedp.ResetViewport())
}
