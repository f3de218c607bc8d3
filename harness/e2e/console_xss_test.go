package e2e

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The console shows what agents, reconcilers and operators wrote: keys,
// payload and result values, refs, worker ids (stated actors), error
// codes, external ids, reasons, notes. Every one of them is
// attacker-controlled, so each is planted here as markup that would run a
// script (a window flag, or alert) if a page put it into the document as
// HTML. The pages are then opened in headless Chromium with the page's
// Content-Security-Policy bypassed, so that escaping alone is tested (the
// CSP, checked on its own below, would otherwise hide a missing escape),
// and once more with it.

// consoleCSP is the policy every console answer carries: no script of any
// origin, inline or not.
const consoleCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// The planted markup. Keys, worker ids, error codes and external ids are
// visible ASCII without spaces; the rest is free text.
const (
	xssKey      = `xss-"><svg/onload=window.__xss=1>`
	xssNote     = "<script>alert(1)</script> <img src=x onerror=alert(2)> \"><svg onload=alert(3)> javascript:alert(4) <a href=\"javascript:window.__xss=8\">click</a>"
	xssWorker   = `<svg/onload=window.__xss=5>`
	xssCode     = `<script>window.__xss=6</script>`
	xssReason   = `</textarea><img src=x onerror="window.__xss=7;alert(7)">`
	xssExternal = `javascript:window.__xss=9`
	xssDup      = `<svg/onload=window.__xss=11>`
	xssReject   = `<script>window.__xss=14</script>`
	xssReflect  = `"><script>window.__xss=20</script><img src=x onerror=window.__xss=21>`
)

// noInjectedMarkup is true when the page has no element or attribute that
// planted markup could have made: no script, frame, object or image, no
// event handler, no javascript: link, and nothing inside an SVG but the
// charts' and legends' shapes and texts.
const noInjectedMarkup = `(() => {
  const bad = document.querySelectorAll('script, iframe, object, embed, img, [onload], [onerror], [onclick], [onfocus], a[href^="javascript:" i], svg *:not(rect):not(line):not(text):not(title):not(desc)');
  return bad.length === 0 && window.__xss === undefined && window.__dialog === undefined;
})()`

// TestConsoleShowsMarkupAsText plants markup in every field the console
// shows and opens every page that shows them, and pages that echo the URL
// or a form, in a real browser: no script runs, no element is injected,
// and the markup is shown as the text it is.
func TestConsoleShowsMarkupAsText(t *testing.T) {
	t.Parallel()
	p := consoleServer(t)
	agent, recon, oper := as(t, p, consoleAgentA), as(t, p, consoleReconA), as(t, p, consoleOperA)
	ctx := ctxFor(t)

	// An unknown payment, escalated, with a note.
	if _, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: xssKey, ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "<script>window.__xss=2</script>", "amount_minor": 4900, "currency": "\"><img src=x onerror=window.__xss=3>"}`),
		Refs:    map[string]string{"order_id": "<img/src=x/onerror=window.__xss=4>"}, Claim: &pb.ClaimOptions{WorkerId: xssWorker}}); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: xssKey, Attempt: 1, ErrorCode: xssCode}); err != nil {
		t.Fatal(err)
	}
	if _, err := recon.Escalate(ctx, &pb.EscalateRequest{OperationKey: xssKey, Reason: xssReason, Actor: xssWorker}); err != nil {
		t.Fatal(err)
	}
	if _, err := oper.SetNote(ctx, &pb.SetNoteRequest{OperationKey: xssKey, Note: xssNote}); err != nil {
		t.Fatal(err)
	}
	// A succeeded payment whose external id is a javascript: URL (the
	// policy's provider_link puts it into a link), with markup in its
	// result, then a duplicate effect with markup for an id.
	paidKey := "xss-paid"
	if _, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: paidKey, ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "o-1", "amount_minor": 4900, "currency": "EUR"}`), Claim: &pb.ClaimOptions{WorkerId: "w"}}); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{xssExternal, xssDup} {
		if _, err := agent.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: paidKey, Attempt: 1, ExternalId: ext,
			Result: mustStruct(t, `{"x": "</pre><script>window.__xss=10</script>"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Approvals: one awaiting with markup in its amount column and
	// requester, one rejected with markup for its reason.
	awaitKey, rejectKey := "xss-await", "xss-rejected"
	if _, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: awaitKey, ActionType: "big_payment",
		Payload: mustStruct(t, `{"order_id": "o-2", "amount_minor": 250000, "currency": "<script>window.__xss=12</script>"}`),
		Claim:   &pb.ClaimOptions{WorkerId: `<img/src=x/onerror=window.__xss=13>`}}); err != nil {
		t.Fatal(err)
	}
	rej := awaitingPayment(t, agent, rejectKey, 300000)
	if _, err := oper.Reject(ctx, &pb.RejectRequest{OperationKey: rejectKey, RequestHash: rej.RequestHash, Reason: xssReject}); err != nil {
		t.Fatal(err)
	}

	// Every answer carries the CSP that forbids scripts, error pages too.
	u := newConsoleUser(t, p)
	u.signIn(consoleOperA)
	opPath := func(k string) string { return "/console/operation?key=" + url.QueryEscape(k) }
	reflect := url.QueryEscape(xssReflect)
	pages := []string{
		"/console/queues?queue=all&refresh=off", "/console/queues?queue=review&refresh=off", "/console/queues?queue=unknown&refresh=off",
		opPath(xssKey), opPath(paidKey), opPath(awaitKey), opPath(rejectKey), "/console/approvals?refresh=off", "/console/overview",
		// Reflected: filters, an unknown key, an unknown page.
		"/console/queues?queue=all&refresh=off&action=" + reflect + "&refs=order_id%3D" + reflect + "&key_prefix=" + reflect + "&status=" + reflect,
		"/console/bulk?queue=all&key_prefix=" + reflect + "&action=" + reflect,
		"/console/approvals?refresh=off&action=" + reflect,
		opPath(xssReflect),
		"/console/" + url.PathEscape(xssReflect),
	}
	for _, path := range append(pages, "/console/signin", "/console/static/console.css") {
		res := u.get(path)
		if got := res.header.Get("Content-Security-Policy"); got != consoleCSP {
			t.Errorf("%s (%d): Content-Security-Policy %q, want %q", path, res.status, got, consoleCSP)
		}
		if res.header.Get("X-Content-Type-Options") != "nosniff" || res.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, res.header)
		}
		if strings.Contains(res.body, "<script>window.__xss") || strings.Contains(res.body, "<svg/onload") || strings.Contains(res.body, "<img src=x") {
			t.Errorf("%s: planted markup is in the page unescaped", path)
		}
	}
	if res := u.get(pages[0]); res.status != http.StatusOK {
		t.Fatalf("queues: %d", res.status)
	}

	b := browserFor(t)
	// Escaping alone: the page's CSP is bypassed, and alert, confirm and
	// prompt only set a flag (so a dialog cannot block the browser).
	run(t, b, "bypassing the CSP", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.alert = window.confirm = window.prompt = function () { window.__dialog = (window.__dialog || 0) + 1; };`})
		return err
	}))
	base := p.BaseURL
	run(t, b, "signing in", chromedp.Navigate(base+"/console/signin"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleOperA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")))
	// The instrumentation is in place (else the flags prove nothing).
	if ok := value(t, b, "reading the instrumentation", chromedp.Evaluate[bool](`String(window.alert).includes('__dialog')`)); !ok {
		t.Fatal("alert is not instrumented in the console's pages")
	}
	check := func(path string) string {
		t.Helper()
		run(t, b, "opening "+path, chromedp.Navigate(base+path), chromedp.WaitReady(chromedp.CSS("main")))
		if ok := value(t, b, "inspecting "+path, chromedp.Evaluate[bool](noInjectedMarkup)); !ok {
			html := value(t, b, "reading "+path, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
			t.Fatalf("%s: planted markup made an element or ran a script:\n%s", path, html)
		}
		return value(t, b, "reading "+path, chromedp.Evaluate[string](`document.body.innerText`))
	}
	for _, path := range pages {
		check(path)
	}
	// The markup is shown, as text, where it belongs.
	for path, wants := range map[string][]string{
		opPath(xssKey): {xssKey, xssNote, xssCode, "</textarea><img src=x onerror=", xssWorker, "<script>window.__xss=2</script>",
			"<img/src=x/onerror=window.__xss=4>"},
		opPath(paidKey):                         {xssExternal, xssDup, `</pre><script>window.__xss=10</script>`},
		opPath(rejectKey):                       {xssReject},
		"/console/approvals?refresh=off":        {"<script>window.__xss=12</script>"},
		"/console/queues?queue=all&refresh=off": {xssKey},
	} {
		text := check(path)
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not show %q as text:\n%s", path, w, text)
			}
		}
	}
	// The provider's link keeps the policy's https origin whatever the
	// external id says.
	check(opPath(paidKey))
	href := value(t, b, "reading the provider link", chromedp.Evaluate[string](`(document.querySelector('a[target="_blank"]') || {}).href || ""`))
	if !strings.HasPrefix(href, "https://dashboard.example.com/payments/") {
		t.Fatalf("the provider link is %q", href)
	}
	// A form that echoes what the operator typed: the confirmation page.
	run(t, b, "resolving with markup", chromedp.Navigate(base+opPath(xssKey)), chromedp.WaitVisible(chromedp.ID("s-ext")),
		chromedp.SendKeys(chromedp.ID("s-ext"), `"><svg/onload=window.__xss=15>`),
		chromedp.SendKeys(chromedp.ID("s-reason"), `</textarea><script>window.__xss=16</script>`),
		chromedp.Submit(chromedp.ID("s-reason")), chromedp.WaitVisible(chromedp.CSS(".consequence")))
	if ok := value(t, b, "inspecting the confirmation", chromedp.Evaluate[bool](noInjectedMarkup)); !ok {
		t.Fatal("the confirmation page ran or injected the operator's markup")
	}
	if text := value(t, b, "reading the confirmation", chromedp.Evaluate[string](`document.body.innerText`)); !strings.Contains(text, `"><svg/onload=window.__xss=15>`) {
		t.Fatalf("the confirmation does not show the external id as text:\n%s", text)
	}

	// And with the CSP as served: still nothing runs.
	run(t, b, "restoring the CSP", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: false})
		return err
	}))
	check(opPath(xssKey))
	check("/console/approvals?refresh=off")
}
