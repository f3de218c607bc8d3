package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// The console's people: an operator in each tenant, plus team-a's agent
// and reconciler.
const (
	consoleOperA  = "tok-console-alice-5d1e0c7b2a"
	consoleOperB  = "tok-console-bob-8f3a61c0de"
	consoleAgentA = "tok-console-agent-0b9d7e21fa"
	consoleReconA = "tok-console-recon-7c2e5a9d13"
	// dave is a person who runs an agent too: he may register and decide.
	consoleDaveA = "tok-console-dave-3e8b27f6c1"
)

// chromiumPath finds Debian's Chromium (scripts/deps.sh installs it), or
// $CHROMIUM.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("no Chromium for the browser tests: run scripts/deps.sh (apt-get install chromium) or set $CHROMIUM")
	return ""
}

// consoleServer starts `opjournal serve` with two tenants' tokens (an
// agent of each, so that both have operations a forged form could aim at).
func consoleServer(t *testing.T) *proc {
	t.Helper()
	dir := t.TempDir()
	tokensYAML := "tokens:\n"
	for _, tk := range []struct{ tok, name, tenant, role string }{
		{consoleOperA, "alice", "team-a", "operator"}, {consoleOperB, "bob", "team-b", "operator"},
		{consoleAgentA, "checkout-agent", "team-a", "agent"}, {consoleReconA, "reconciler-a", "team-a", "reconciler"},
		{consoleDaveA, "dave", "team-a", "agent, operator"}, {csrfAgentB, "checkout-agent-b", "team-b", "agent"},
	} {
		tokensYAML += fmt.Sprintf("  - name: %s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n", tk.name, auth.Digest(tk.tok), tk.tenant, tk.role)
	}
	pol := `actions:
  create_payment:
    integer_fields: [amount_minor]
    redact_fields: [card_number]
    provider_link: https://dashboard.example.com/payments/{external_id}
    reconcile: {definitive_absence: true, visibility_lag: 0s, in_flight_window: 1s}
  send_email: {}
  big_payment:
    integer_fields: [amount_minor]
    redact_fields: [card_number]
    approval: {when: "payload.amount_minor > 100000", timeout: 24h}
`
	for name, body := range map[string]string{"tokens.yaml": tokensYAML, "policy.yaml": pol} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return startServer(t, "--database-url", "sqlite://"+filepath.Join(dir, "journal.db"),
		"--auth-file", filepath.Join(dir, "tokens.yaml"), "--policy", filepath.Join(dir, "policy.yaml"))
}

// unknownPayment makes an operation whose outcome is unknown, as an agent
// whose provider call timed out would leave it.
func unknownPayment(t *testing.T, agent pb.JournalServiceClient, key string, refs map[string]string) {
	t.Helper()
	ctx := ctxFor(t)
	if _, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "o-1042", "amount_minor": 4900, "currency": "EUR", "card_number": "4242424242424242"}`),
		Refs:    refs, Claim: &pb.ClaimOptions{WorkerId: "checkout-worker-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: key, Attempt: 1, ErrorCode: "timeout"}); err != nil {
		t.Fatal(err)
	}
}

// browserFor starts headless Chromium with the flags this machine needs
// (no sandbox as root, no background connections to a closed network).
func browserFor(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// screenshot saves a full-page PNG as docs/console/NAME.png when
// $OPJOURNAL_SCREENSHOTS names a folder (make screenshots), else into the
// test's temporary folder, so the capture itself is always exercised.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("OPJOURNAL_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs browser actions and fails the test with what it was doing.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mainText(t *testing.T, ctx context.Context) string {
	t.Helper()
	return value(t, ctx, "reading the page", chromedp.Text(chromedp.CSS("main")))
}

// value runs one browser action that returns a value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// TestConsoleInABrowser drives the real binary's console in headless
// Chromium as an operator would: sign in, find the escalated operation in
// the review queue, resolve it with a reason (the API's history shows the
// signed-in principal), bulk-resolve 50 after a dry run; and as an
// attacker would: an agent token, another tenant, a forged form.
func TestConsoleInABrowser(t *testing.T) {
	p := consoleServer(t)
	agent, recon := as(t, p, consoleAgentA), as(t, p, consoleReconA)
	ctx := ctxFor(t)
	unknownPayment(t, agent, "pay-2026-12-01-o1042", map[string]string{"order_id": "o-1042"})
	if _, err := recon.Escalate(ctx, &pb.EscalateRequest{OperationKey: "pay-2026-12-01-o1042", Reason: "provider search found nothing and the payment is past its window"}); err != nil {
		t.Fatal(err)
	}
	unknownPayment(t, agent, "pay-forge-target", nil)
	for i := range 50 {
		unknownPayment(t, agent, fmt.Sprintf("pay-outage-%02d", i), map[string]string{"incident": "inc-77"})
	}
	base := p.BaseURL + "/console/"
	b := browserFor(t)

	// Not signed in: the sign-in page.
	run(t, b, "opening the console", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.ID("token")))
	url := value(t, b, "reading the location", chromedp.Location())
	if !strings.HasSuffix(url, "/console/signin") {
		t.Fatalf("the console opened at %s, not the sign-in page", url)
	}
	screenshot(t, b, "signin")

	// An agent's token cannot sign in.
	run(t, b, "signing in as the agent", chromedp.SendKeys(chromedp.ID("token"), consoleAgentA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".problem")))
	if text := mainText(t, b); !strings.Contains(text, "cannot sign in to the console") {
		t.Fatalf("agent sign-in: %s", text)
	}

	// The operator signs in and finds the escalated payment under review.
	run(t, b, "signing in as alice", chromedp.SendKeys(chromedp.ID("token"), consoleOperA), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")))
	if text := mainText(t, b); !strings.Contains(text, "pay-2026-12-01-o1042") || !strings.Contains(text, "Needs review") {
		t.Fatalf("review queue: %s", text)
	}
	screenshot(t, b, "queues")
	run(t, b, "opening the operation", chromedp.Click(chromedp.CSS(`a[href="/console/operation?key=pay-2026-12-01-o1042"]`)), chromedp.WaitVisible(chromedp.ID("decide-h")))
	text := mainText(t, b)
	if !strings.Contains(text, `"card_number": "[redacted]"`) || strings.Contains(text, "4242424242424242") || !strings.Contains(text, "provider search found nothing") {
		t.Fatalf("operation page: %s", text)
	}
	screenshot(t, b, "operation")

	// Resolve as succeeded: the confirmation says what happens, then the
	// decision is recorded.
	run(t, b, "resolving", chromedp.SendKeys(chromedp.ID("s-ext"), "pi_3QxA17"),
		chromedp.SendKeys(chromedp.ID("s-reason"), "charge pi_3QxA17 for o-1042 found in the provider dashboard"),
		chromedp.Submit(chromedp.ID("s-reason")), chromedp.WaitVisible(chromedp.CSS(".consequence")))
	if text := mainText(t, b); !strings.Contains(text, "never call the provider again") {
		t.Fatalf("confirmation: %s", text)
	}
	screenshot(t, b, "confirm")
	if op := lookup(t, ctx, agent, "pay-2026-12-01-o1042"); op.Status != pb.Status_STATUS_UNKNOWN {
		t.Fatalf("the confirmation page changed the operation: %s", op.Status)
	}
	run(t, b, "confirming", chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.CSS(".done")))
	op := lookup(t, ctx, agent, "pay-2026-12-01-o1042")
	if op.Status != pb.Status_STATUS_SUCCEEDED || op.ExternalId != "pi_3QxA17" || op.NeedsReview {
		t.Fatalf("after the decision: %s %q review=%v", op.Status, op.ExternalId, op.NeedsReview)
	}
	status, _, body := doAs(t, consoleOperA, http.MethodGet, p.BaseURL+"/v1/operations:events?operation_key=pay-2026-12-01-o1042", "")
	if status != http.StatusOK || !strings.Contains(body, `"actor":"alice"`) || !strings.Contains(body, "found in the provider dashboard") {
		t.Fatalf("the API history does not show alice's decision: %d %s", status, body)
	}

	// A forged form from another page (another port: the same site, so
	// the SameSite cookie IS sent; the CSRF token stops it).
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>win a prize</title><form method="post" action="%sdecide">
<input type="hidden" name="key" value="pay-forge-target"><input type="hidden" name="verdict" value="failed_final">
<input type="hidden" name="reason" value="forged"><input type="hidden" name="step" value="apply">
<button id="go" type="submit">Claim your prize</button></form>`, base)
	}))
	defer evil.Close()
	run(t, b, "submitting the forged form", chromedp.Navigate(evil.URL), chromedp.Click(chromedp.ID("go")), chromedp.WaitVisible(chromedp.CSS(".problem")))
	if text := mainText(t, b); !strings.Contains(text, "nothing was changed") {
		t.Fatalf("forged form: %s", text)
	}
	if op := lookup(t, ctx, agent, "pay-forge-target"); op.Status != pb.Status_STATUS_UNKNOWN {
		t.Fatalf("the forged form changed the operation: %s", op.Status)
	}

	// Bulk: filter the unknown queue by the incident's ref, count first
	// (nothing changes), then decide for all 50.
	run(t, b, "filtering", chromedp.Navigate(base+"queues?queue=unknown&refresh=off"), chromedp.WaitVisible(chromedp.ID("f-refs")),
		chromedp.SendKeys(chromedp.ID("f-refs"), "incident=inc-77"), chromedp.Submit(chromedp.ID("f-refs")),
		chromedp.WaitVisible(chromedp.CSS(`input#f-refs[value="incident=inc-77"]`)))
	if text := mainText(t, b); strings.Contains(text, "pay-forge-target") || !strings.Contains(text, "pay-outage-00") {
		t.Fatalf("filtered queue: %s", text)
	}
	run(t, b, "opening the bulk decision", chromedp.Click(chromedp.CSS("a.button")), chromedp.WaitVisible(chromedp.ID("b-reason")),
		chromedp.SendKeys(chromedp.ID("b-code"), "not_charged"),
		chromedp.SendKeys(chromedp.ID("b-reason"), "inc-77: the provider confirmed no payment went through during the outage"),
		chromedp.Submit(chromedp.ID("b-reason")), chromedp.WaitVisible(chromedp.ID("applies")))
	applies := value(t, b, "reading the count", chromedp.Text(chromedp.ID("applies")))
	if applies != "50" {
		t.Fatalf("the dry run counts %s, want 50: %s", applies, mainText(t, b))
	}
	screenshot(t, b, "bulk")
	for i := range 50 {
		if op := lookup(t, ctx, agent, fmt.Sprintf("pay-outage-%02d", i)); op.Status != pb.Status_STATUS_UNKNOWN {
			t.Fatalf("the dry run changed pay-outage-%02d: %s", i, op.Status)
		}
	}
	run(t, b, "confirming the bulk decision", chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.ID("decided")))
	decided := value(t, b, "reading the result", chromedp.Text(chromedp.ID("decided")))
	if decided != "50" {
		t.Fatalf("decided %s, want 50", decided)
	}
	for i := range 50 {
		op := lookup(t, ctx, agent, fmt.Sprintf("pay-outage-%02d", i))
		if op.Status != pb.Status_STATUS_FAILED_FINAL || op.ErrorCode != "not_charged" {
			t.Fatalf("pay-outage-%02d after the bulk decision: %s %s", i, op.Status, op.ErrorCode)
		}
	}
	if op := lookup(t, ctx, agent, "pay-forge-target"); op.Status != pb.Status_STATUS_UNKNOWN {
		t.Fatalf("the bulk decision reached outside its selection: %s", op.Status)
	}
	run(t, b, "opening the overview", chromedp.Navigate(base+"overview"), chromedp.WaitVisible(chromedp.CSS("svg.chart")))
	if text := mainText(t, b); !strings.Contains(text, "create_payment") {
		t.Fatalf("overview: %s", text)
	}
	screenshot(t, b, "overview")

	// Accessible: at 200% zoom (a 1280-pixel window is 640 CSS pixels
	// wide) no page scrolls sideways, and the keyboard reaches the skip
	// link first, then the navigation.
	run(t, b, "zooming to 200%", chromedp.EmulateViewport(640, 900))
	for _, path := range []string{"queues?queue=unknown&refresh=off", "operation?key=pay-2026-12-01-o1042", "overview", "bulk?queue=unknown"} {
		run(t, b, "opening "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		if over := value(t, b, "measuring "+path, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`)); over {
			width := value(t, b, "measuring", chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
			t.Fatalf("%s scrolls sideways at 200%% zoom: %d CSS pixels wide in 640", path, width)
		}
	}
	run(t, b, "pressing Tab", chromedp.Navigate(base+"queues?refresh=off"), chromedp.WaitVisible(chromedp.CSS("main")), chromedp.KeyEvent("\t"))
	if focused := value(t, b, "reading the focus", chromedp.Evaluate[string](`document.activeElement.textContent`)); focused != "Skip to the content" {
		t.Fatalf("the first Tab focuses %q, not the skip link", focused)
	}
	run(t, b, "back to 100%", chromedp.ResetViewport())

	// Another tenant's operator sees none of it.
	run(t, b, "signing out", chromedp.Navigate(base+"queues"), chromedp.Click(chromedp.CSS(`button.link`)), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), consoleOperB), chromedp.Submit(chromedp.ID("token")), chromedp.WaitVisible(chromedp.CSS(".tallies")))
	for _, path := range []string{"queues?queue=all&refresh=off", "queues?queue=unknown&refresh=off", "overview"} {
		run(t, b, "browsing as bob", chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		if who := value(t, b, "reading the header", chromedp.Text(chromedp.CSS("header.top"))); !strings.Contains(who, "Signed in as bob") {
			t.Fatalf("not signed in as bob: %s", who)
		}
		if text := mainText(t, b); strings.Contains(text, "pay-") {
			t.Fatalf("bob sees team-a on %s: %s", path, text)
		}
	}
	run(t, b, "opening team-a's operation as bob", chromedp.Navigate(base+"operation?key=pay-forge-target"), chromedp.WaitVisible(chromedp.CSS(".problem")))
	if text := mainText(t, b); !strings.Contains(text, `no operation "pay-forge-target"`) {
		t.Fatalf("bob opens team-a's operation: %s", text)
	}
}
