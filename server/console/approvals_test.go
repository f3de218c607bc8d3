package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/server/console"
)

// newApprovalEnv is newEnv with authentication and one test clock for the
// store (created_at, the approvals' deadlines) and the console (ages).
func newApprovalEnv(t *testing.T) (*env, *testclock.Clock) {
	t.Helper()
	clk := testclock.New()
	e := newEnvWith(t, true, func(c *console.Config) { c.Now = clk.Now })
	e.st.SetClock(clk.Now)
	return e, clk
}

// awaiting registers key (with a claim asked, as an agent does) as
// principal of team-a and checks that it awaits approval.
func (e *env) awaiting(principal, key, action, payload string) *opjournal.Operation {
	e.t.Helper()
	res, err := e.svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: "team-a", Principal: principal},
		Key: key, Action: action, Payload: json.RawMessage(payload), Claim: &journal.ClaimOptions{WorkerID: "w1"}})
	if err != nil {
		e.t.Fatal(err)
	}
	if res.Operation.Status != opjournal.StatusAwaitingApproval {
		e.t.Fatalf("%s is %s, not awaiting approval", key, res.Operation.Status)
	}
	return res.Operation
}

const bigPayment = `{"amount_minor": 250000, "currency": "EUR", "card_number": "4242424242424242", "order_id": "o-9"}`

// rowsOf returns the operation keys of the approvals table, in order.
func rowsOf(body string) []string {
	table := body[strings.Index(body, `id="approvals"`)+1:]
	table = table[:strings.Index(table, "</table>")]
	var keys []string
	for _, m := range regexp.MustCompile(`name="op" value="([^ "]+) `).FindAllStringSubmatch(table, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

func TestApprovalsQueueListsOldestFirst(t *testing.T) {
	e, clk := newApprovalEnv(t)
	e.awaiting("agent-a", "pay-c", "big_payment", bigPayment)
	clk.Advance(time.Minute)
	e.awaiting("agent-a", "pay-a", "big_payment", `{"amount_minor": 100001, "currency": "USD"}`)
	clk.Advance(time.Minute)
	e.awaiting("agent-a", "wire-b", "wire_transfer", `{"amount_minor": 9000000, "currency": "CHF"}`)
	clk.Advance(time.Minute)
	// Under the threshold: no approval, not in the queue.
	if _, err := e.svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: "team-a", Principal: "agent-a"},
		Key: "pay-small", Action: "big_payment", Payload: json.RawMessage(`{"amount_minor": 4900, "currency": "EUR"}`)}); err != nil {
		t.Fatal(err)
	}
	b := e.browser()
	b.signIn(operA)
	p := b.get("/console/approvals?refresh=off")
	if p.status != http.StatusOK {
		t.Fatalf("approvals: %d %.300s", p.status, p.body)
	}
	if got := strings.Join(rowsOf(p.body), " "); got != "pay-c pay-a wire-b" {
		t.Fatalf("the queue lists %q, want the oldest first: pay-c pay-a wire-b", got)
	}
	for _, want := range []string{"3m 0s ago", "2m 0s ago", "1m 0s ago", "amount_minor <strong>250000</strong>", "currency <strong>EUR</strong>",
		"0 of 1", "0 of 2", "agent-a", `href="/console/approvals" aria-current="page"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the queue does not show %q", want)
		}
	}
	if strings.Contains(p.body, "4242424242424242") || strings.Contains(p.body, "pay-small") {
		t.Fatal("the queue shows a card number or an operation that needs no approval")
	}
	// The other pages know the status too: the overview counts it, the
	// queues filter by it.
	if ov := b.get("/console/overview"); ov.status != http.StatusOK || !strings.Contains(ov.body, "awaiting_approval") {
		t.Fatalf("the overview does not count awaiting_approval: %d", ov.status)
	}
	if q := b.get("/console/queues?queue=all&status=awaiting_approval&refresh=off"); q.status != http.StatusOK || !strings.Contains(q.body, "wire-b") || strings.Contains(q.body, "pay-small") {
		t.Fatalf("the queues filtered by awaiting_approval: %d", q.status)
	}
	if only := b.get("/console/approvals?refresh=off&action=wire_transfer"); strings.Join(rowsOf(only.body), " ") != "wire-b" {
		t.Fatalf("filtered by action: %v", rowsOf(only.body))
	}
}

func TestApprovalsAreForOperatorsAndAdminsOnly(t *testing.T) {
	e, _ := newApprovalEnv(t)
	e.awaiting("agent-a", "pay-secret", "big_payment", bigPayment)
	// A reconciler may sign in to look, but not at approvals: 403, nothing
	// of the queue, no nav entry.
	rb := e.browser()
	_, csrf := rb.signIn(reconA)
	if p := rb.get("/console/approvals"); p.status != http.StatusForbidden || strings.Contains(p.body, "pay-secret") {
		t.Fatalf("the reconciler's approvals: %d, shows the key: %v", p.status, strings.Contains(p.body, "pay-secret"))
	}
	if q := rb.get("/console/queues"); strings.Contains(q.body, `href="/console/approvals"`) {
		t.Fatal("the reconciler's navigation offers approvals")
	}
	op := e.op("team-a", "pay-secret")
	for _, path := range []string{"/console/decide", "/console/approvals/reject"} {
		res := rb.post(path, url.Values{"csrf": {csrf}, "key": {"pay-secret"}, "verdict": {"reject"}, "op": {"pay-secret " + op.RequestHash},
			"request_hash": {op.RequestHash}, "reason": {"x"}, "step": {"apply"}})
		if res.status != http.StatusForbidden {
			t.Fatalf("the reconciler rejects on %s: %d", path, res.status)
		}
	}
	// Agents and scrapers have no console session at all: their tokens do
	// not sign in, and as a bearer header they are nobody here.
	for _, tok := range []string{agentA, metrA} {
		ab := e.browser()
		if res, _ := ab.signIn(tok); res.status != http.StatusForbidden {
			t.Fatalf("sign-in with a non-console token: %d", res.status)
		}
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/console/approvals", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := ab.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		p := read(t, resp)
		if p.status != http.StatusSeeOther || strings.Contains(p.body, "pay-secret") {
			t.Fatalf("a bearer token on the approvals page: %d", p.status)
		}
	}
	// Another tenant's operator sees none of team-a's.
	bb := e.browser()
	bb.signIn(operB)
	if p := bb.get("/console/approvals"); p.status != http.StatusOK || strings.Contains(p.body, "pay-secret") {
		t.Fatalf("team-b's approvals: %d, shows team-a: %v", p.status, strings.Contains(p.body, "pay-secret"))
	}
	bcsrf := csrfOf(t, bb.get("/console/queues"))
	for _, verdict := range []string{"approve", "reject"} {
		if res := bb.post("/console/decide", url.Values{"csrf": {bcsrf}, "key": {"pay-secret"}, "verdict": {verdict}, "request_hash": {op.RequestHash},
			"reason": {"x"}, "step": {"apply"}}); res.status != http.StatusNotFound {
			t.Fatalf("team-b's %s of team-a's operation: %d", verdict, res.status)
		}
	}
	if res := bb.post("/console/approvals/reject", url.Values{"csrf": {bcsrf}, "verdict": {"reject"}, "reason": {"x"}, "step": {"apply"},
		"op": {"pay-secret " + op.RequestHash}}); !strings.Contains(res.body, `<strong id="decided">0</strong>`) {
		t.Fatalf("team-b's bulk rejection of team-a's operation: %d %.400s", res.status, res.body)
	}
	if got := e.op("team-a", "pay-secret"); got.Status != opjournal.StatusAwaitingApproval {
		t.Fatalf("a refused principal changed it: %s", got.Status)
	}
}

func TestApproveWithReasonHashAndConfirmation(t *testing.T) {
	e, _ := newApprovalEnv(t)
	op := e.awaiting("agent-a", "pay-1", "big_payment", bigPayment)
	b := e.browser()
	_, csrf := b.signIn(operA)
	page := b.get("/console/operation?key=pay-1")
	for _, want := range []string{`id="approval-h"`, op.RequestHash, `name="request_hash" value="` + op.RequestHash + `"`, `&#34;card_number&#34;: &#34;[redacted]&#34;`, `value="approve"`, `value="reject"`} {
		if !strings.Contains(page.body, want) {
			t.Fatalf("the operation page lacks %q", want)
		}
	}
	if strings.Contains(page.body, "4242424242424242") || strings.Contains(page.body, `value="succeeded"`) {
		t.Fatal("the page shows the card number, or offers Resolve on an awaiting operation")
	}
	form := url.Values{"csrf": {csrf}, "key": {"pay-1"}, "verdict": {"approve"}, "request_hash": {op.RequestHash}}
	for name, c := range map[string]struct {
		set, to string
		status  int
		says    string
	}{
		"no reason":    {"reason", "", http.StatusBadRequest, "reason: is required"},
		"huge reason":  {"reason", strings.Repeat("x", 201), http.StatusBadRequest, "the limit is 200"},
		"no hash":      {"request_hash", "", http.StatusBadRequest, "request_hash: is required"},
		"another hash": {"request_hash", strings.Repeat("0", 64), http.StatusConflict, "PAYLOAD_MISMATCH"},
	} {
		f := url.Values{"reason": {"limit checked with the customer"}}
		for k, v := range form {
			f[k] = v
		}
		f.Set(c.set, c.to)
		res := b.post("/console/decide", f)
		if res.status != c.status || !strings.Contains(res.body, c.says) {
			t.Fatalf("%s: %d, want %d saying %q: %.400s", name, res.status, c.status, c.says, res.body)
		}
	}
	form.Set("reason", "limit checked with the customer")
	confirm := b.post("/console/decide", form)
	want := "Approving lets the agent call big_payment with exactly this payload (hash " + op.RequestHash + ") once"
	if confirm.status != http.StatusOK || !strings.Contains(confirm.body, want) || !strings.Contains(confirm.body, `name="request_hash" value="`+op.RequestHash+`"`) {
		t.Fatalf("confirmation: %d %.600s", confirm.status, confirm.body)
	}
	if got := e.op("team-a", "pay-1"); got.Status != opjournal.StatusAwaitingApproval {
		t.Fatalf("the confirmation step changed it: %s", got.Status)
	}
	// The apply step with another hash: the journal itself refuses it.
	forged := url.Values{}
	for k, v := range form {
		forged[k] = v
	}
	forged.Set("step", "apply")
	forged.Set("request_hash", strings.Repeat("f", 64))
	if res := b.post("/console/decide", forged); res.status < 400 || !strings.Contains(res.body, "Not done") || e.op("team-a", "pay-1").Status != opjournal.StatusAwaitingApproval {
		t.Fatalf("an apply with another hash: %d %.400s", res.status, res.body)
	}
	// Without the CSRF token: nothing.
	noCSRF := url.Values{}
	for k, v := range form {
		noCSRF[k] = v
	}
	noCSRF.Del("csrf")
	noCSRF.Set("step", "apply")
	if res := b.post("/console/decide", noCSRF); res.status != http.StatusForbidden || e.op("team-a", "pay-1").Status != opjournal.StatusAwaitingApproval {
		t.Fatalf("an apply without CSRF token: %d", res.status)
	}
	form.Set("step", "apply")
	done := b.post("/console/decide", form)
	if done.status != http.StatusSeeOther || done.header.Get("Location") != "/console/operation?key=pay-1&done=approved" {
		t.Fatalf("apply: %d %s %.300s", done.status, done.header.Get("Location"), done.body)
	}
	if got := e.op("team-a", "pay-1"); got.Status != opjournal.StatusPending {
		t.Fatalf("after the approval: %s", got.Status)
	}
	evs, err := e.svc.Events(context.Background(), journal.EventsRequest{Caller: journal.Caller{Tenant: "team-a"}, Key: "pay-1"})
	if err != nil {
		t.Fatal(err)
	}
	last := evs.Events[len(evs.Events)-1]
	if last.Actor != "alice" || !strings.Contains(last.Reason, "limit checked with the customer") {
		t.Fatalf("last event %+v", last)
	}
	if len(e.audits) != 1 || e.audits[0] != "Approve team-a alice pay-1 pending" {
		t.Fatalf("audit %q", e.audits)
	}
	// Not awaiting any more: the page offers nothing, a stale form is refused.
	if p := b.get("/console/operation?key=pay-1&done=approved"); strings.Contains(p.body, `value="approve"`) || !strings.Contains(p.body, "Approved.") {
		t.Fatal("the page of the approved operation still offers approval, or does not say it is done")
	}
	if res := b.post("/console/decide", form); res.status < 400 || !strings.Contains(res.body, "Not done") {
		t.Fatalf("a second approval: %d %.300s", res.status, res.body)
	}
}

func TestRejectEndsItAndRetriesGetTheRefusal(t *testing.T) {
	e, _ := newApprovalEnv(t)
	op := e.awaiting("agent-a", "pay-1", "big_payment", bigPayment)
	b := e.browser()
	_, csrf := b.signIn(operA)
	form := url.Values{"csrf": {csrf}, "key": {"pay-1"}, "verdict": {"reject"}, "request_hash": {op.RequestHash}, "reason": {"the customer did not ask for this"}}
	confirm := b.post("/console/decide", form)
	if !strings.Contains(confirm.body, "Rejecting ends it as failed_final (error code approval_rejected); the agent&#39;s retries get this refusal") {
		t.Fatalf("confirmation: %d %.600s", confirm.status, confirm.body)
	}
	form.Set("step", "apply")
	if done := b.post("/console/decide", form); done.status != http.StatusSeeOther || !strings.HasSuffix(done.header.Get("Location"), "done=rejected") {
		t.Fatalf("apply: %d %s", done.status, done.header.Get("Location"))
	}
	got := e.op("team-a", "pay-1")
	if got.Status != opjournal.StatusFailedFinal || got.ErrorCode != "approval_rejected" {
		t.Fatalf("after the rejection: %s %s", got.Status, got.ErrorCode)
	}
	res, err := e.svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: "team-a", Principal: "agent-a"},
		Key: "pay-1", Action: "big_payment", Payload: json.RawMessage(bigPayment), Claim: &journal.ClaimOptions{WorkerID: "w1"}})
	if err != nil || res.Operation.Status != opjournal.StatusFailedFinal || (res.Claim != nil && res.Claim.Claimed) {
		t.Fatalf("a retry after the rejection: %v %+v", err, res)
	}
}

func TestRequesterAndSamePersonAreRefusedPlainly(t *testing.T) {
	e, _ := newApprovalEnv(t)
	// alice registered this one herself.
	own := e.awaiting("alice", "pay-own", "big_payment", bigPayment)
	b := e.browser()
	_, csrf := b.signIn(operA)
	if p := b.get("/console/operation?key=pay-own"); !strings.Contains(p.body, "You registered this operation") {
		t.Fatal("the requester is not warned on the page")
	}
	apply := url.Values{"csrf": {csrf}, "key": {"pay-own"}, "verdict": {"approve"}, "request_hash": {own.RequestHash}, "reason": {"looks fine"}, "step": {"apply"}}
	res := b.post("/console/decide", apply)
	if res.status != http.StatusForbidden && res.status != http.StatusConflict && res.status != http.StatusBadRequest {
		t.Fatalf("the requester's approval: %d %.400s", res.status, res.body)
	}
	if !strings.Contains(res.body, "Not done") || e.op("team-a", "pay-own").Status != opjournal.StatusAwaitingApproval {
		t.Fatalf("the requester's approval was not refused plainly: %.400s", res.body)
	}
	// Two people: alice's approval is the first of two, a second one by
	// her is refused, carol's releases it.
	wire := e.awaiting("agent-a", "wire-1", "wire_transfer", `{"amount_minor": 9000000, "currency": "CHF"}`)
	form := url.Values{"csrf": {csrf}, "key": {"wire-1"}, "verdict": {"approve"}, "request_hash": {wire.RequestHash}, "reason": {"first check: the invoice matches"}}
	if c := b.post("/console/decide", form); !strings.Contains(c.body, "This is the first of two approvals") {
		t.Fatalf("the first approval's confirmation: %.500s", c.body)
	}
	form.Set("step", "apply")
	if done := b.post("/console/decide", form); done.status != http.StatusSeeOther || !strings.HasSuffix(done.header.Get("Location"), "done=approval_recorded") {
		t.Fatalf("first approval: %d %s", done.status, done.header.Get("Location"))
	}
	if p := b.get("/console/operation?key=wire-1"); !strings.Contains(p.body, "1 of 2") || !strings.Contains(p.body, "You have approved it already") {
		t.Fatal("the page does not show 1 of 2 and the warning")
	}
	if q := b.get("/console/approvals?refresh=off"); !strings.Contains(q.body, "1 of 2") {
		t.Fatal("the queue does not show 1 of 2")
	}
	again := b.post("/console/decide", form)
	if again.status < 400 || !strings.Contains(again.body, "Not done") || e.op("team-a", "wire-1").Status != opjournal.StatusAwaitingApproval {
		t.Fatalf("alice's second approval: %d %.400s", again.status, again.body)
	}
	cb := e.browser()
	_, ccsrf := cb.signIn(operA2)
	form.Set("csrf", ccsrf)
	form.Set("reason", "second check: the beneficiary is known")
	if done := cb.post("/console/decide", form); done.status != http.StatusSeeOther || !strings.HasSuffix(done.header.Get("Location"), "done=approved") {
		t.Fatalf("carol's approval: %d %s %.300s", done.status, done.header.Get("Location"), done.body)
	}
	if got := e.op("team-a", "wire-1"); got.Status != opjournal.StatusPending || len(got.Approval.Approvals) != 2 {
		t.Fatalf("after two approvals: %s %+v", got.Status, got.Approval)
	}
}

func TestBulkIsForRejectionsOnly(t *testing.T) {
	e, clk := newApprovalEnv(t)
	a := e.awaiting("agent-a", "pay-1", "big_payment", bigPayment)
	clk.Advance(time.Second)
	b2 := e.awaiting("agent-a", "pay-2", "big_payment", bigPayment)
	clk.Advance(time.Second)
	e.awaiting("agent-a", "pay-keep", "big_payment", bigPayment)
	b := e.browser()
	_, csrf := b.signIn(operA)
	sel := url.Values{"csrf": {csrf}, "verdict": {"reject"}, "reason": {"duplicate requests from a looping agent"}, "step": {"review"},
		"op": {"pay-1 " + a.RequestHash, "pay-2 " + b2.RequestHash, "pay-keep " + strings.Repeat("0", 64)}}
	// No bulk approval, on either bulk door, whatever the form says.
	for _, path := range []string{"/console/approvals/reject", "/console/bulk"} {
		f := url.Values{}
		for k, v := range sel {
			f[k] = v
		}
		f.Set("verdict", "approve")
		f.Set("step", "apply")
		f.Set("queue", "all")
		if res := b.post(path, f); res.status != http.StatusBadRequest {
			t.Fatalf("a bulk approval on %s: %d", path, res.status)
		}
	}
	if res := b.post("/console/bulk", url.Values{"csrf": {csrf}, "queue": {"all"}, "verdict": {"reject"}, "reason": {"x"}, "step": {"apply"}}); res.status != http.StatusBadRequest {
		t.Fatalf("a filtered bulk rejection: %d", res.status)
	}
	review := b.post("/console/approvals/reject", sel)
	if review.status != http.StatusOK || !strings.Contains(review.body, "Confirm: reject 2 operations") || !strings.Contains(review.body, "pay-keep: its request hash is not the one you saw") {
		t.Fatalf("review: %d %.800s", review.status, review.body)
	}
	for _, k := range []string{"pay-1", "pay-2", "pay-keep"} {
		if got := e.op("team-a", k); got.Status != opjournal.StatusAwaitingApproval {
			t.Fatalf("the review changed %s: %s", k, got.Status)
		}
	}
	if empty := b.post("/console/approvals/reject", url.Values{"csrf": {csrf}, "verdict": {"reject"}, "op": {"pay-1 " + a.RequestHash}}); empty.status != http.StatusBadRequest {
		t.Fatalf("a bulk rejection without reason: %d", empty.status)
	}
	sel.Set("step", "apply")
	done := b.post("/console/approvals/reject", sel)
	if done.status != http.StatusOK || !strings.Contains(done.body, `<strong id="decided">2</strong>`) || !strings.Contains(done.body, "pay-keep") {
		t.Fatalf("apply: %d %.800s", done.status, done.body)
	}
	for k, want := range map[string]opjournal.Status{"pay-1": opjournal.StatusFailedFinal, "pay-2": opjournal.StatusFailedFinal, "pay-keep": opjournal.StatusAwaitingApproval} {
		if got := e.op("team-a", k); got.Status != want {
			t.Fatalf("%s after the bulk rejection: %s, want %s", k, got.Status, want)
		}
	}
	if res := b.post("/console/approvals/reject", url.Values{"csrf": {csrf}, "verdict": {"reject"}, "reason": {"x"}, "op": {"no-hash"}}); res.status != http.StatusBadRequest {
		t.Fatalf("a selection without hash: %d", res.status)
	}
}

func TestConcurrentDecisionsOnOneApprovalTakeOneEffect(t *testing.T) {
	e, _ := newApprovalEnv(t)
	op := e.awaiting("agent-a", "pay-1", "big_payment", bigPayment)
	type person struct {
		b    *browser
		csrf string
	}
	var people []person
	for _, tok := range []string{operA, operA2, adminA} {
		b := e.browser()
		_, csrf := b.signIn(tok)
		people = append(people, person{b, csrf})
	}
	statuses := make(chan int, len(people))
	var wg sync.WaitGroup
	for i, p := range people {
		verdict := "approve"
		if i == 1 {
			verdict = "reject"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := p.b.post("/console/decide", url.Values{"csrf": {p.csrf}, "key": {"pay-1"}, "verdict": {verdict}, "request_hash": {op.RequestHash},
				"reason": {"decided at the same time"}, "step": {"apply"}})
			statuses <- res.status
		}()
	}
	wg.Wait()
	close(statuses)
	won := 0
	for s := range statuses {
		if s == http.StatusSeeOther {
			won++
		} else if s < 400 || s >= 500 {
			t.Fatalf("a losing decision answered %d", s)
		}
	}
	got := e.op("team-a", "pay-1")
	if won != 1 || len(e.audits) != 1 || (got.Status != opjournal.StatusPending && got.Status != opjournal.StatusFailedFinal) {
		t.Fatalf("%d decisions won, audits %q, status %s: want exactly one", won, e.audits, got.Status)
	}
}
