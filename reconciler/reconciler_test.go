package reconciler

import (
	"bytes"
	"context"
	"fmt"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"google.golang.org/protobuf/types/known/timestamppb"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/testserver"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

// The token the test provider requires, read by the verifiers from the
// (test) environment.
const testToken = "s3cret-token-value"

// fakeProvider is an HTTP provider whose effects a test controls. It
// answers searches like opjournal-fakeprovider:
// GET /payments?idempotency_key=K, GET /emails?reference=K →
// {"data":[{"id":..., "status":...}]}; /broken answers 500.
type fakeProvider struct {
	*httptest.Server
	mu       sync.Mutex
	effects  map[string]effect // by key
	delay    time.Duration
	requests atomic.Int64
	badAuth  atomic.Int64
}

type effect struct{ id, status string }

func newFakeProvider(t *testing.T) *fakeProvider {
	p := &fakeProvider{effects: map[string]effect{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		if r.URL.Path == "/payments" && r.Header.Get("Authorization") != "Bearer "+testToken {
			p.badAuth.Add(1)
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		p.mu.Lock()
		delay := p.delay
		p.mu.Unlock()
		if delay > 0 {
			time.Sleep(delay)
		}
		var key string
		switch r.URL.Path {
		case "/payments":
			key = r.URL.Query().Get("idempotency_key")
		case "/emails":
			key = r.URL.Query().Get("reference")
		default:
			http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
			return
		}
		p.mu.Lock()
		e, ok := p.effects[key]
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			fmt.Fprint(w, `{"data":[]}`)
			return
		}
		fmt.Fprintf(w, `{"data":[{"id":%q,"status":%q,"amount_minor":490000}]}`, e.id, e.status)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *fakeProvider) set(key, id, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.effects[key] = effect{id, status}
}

// testPolicy is the policy of both the journal and the reconcilers.
func testPolicy(t *testing.T, providerURL string) *policy.Policy {
	t.Helper()
	search := func(path, status string) string {
		return fmt.Sprintf(`
      verifier:
        http:
          url: "${TEST_PROVIDER_URL:-%s}%s"
          list: /data
          found: /id
          completed: /status
          completed_values: [%s]
          external_id: /id
          headers:
            Authorization: "Bearer ${TEST_TOKEN}"`, providerURL, path, status)
	}
	doc := `actions:
  pay:
    integer_fields: [amount_minor]
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 4s
      visibility_lag: 1s
      in_flight_window: 1s
      definitive_absence: true` + search("/payments?idempotency_key={operation_key}", "succeeded") + `
  mail:
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 4s
      visibility_lag: 0s
      definitive_absence: false` + search("/emails?reference={operation_key}", "sent") + `
  flaky:
    unknown_after_seconds: 2
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 1s
      in_flight_window: 1s
      definitive_absence: true` + search("/broken?k={operation_key}", "ok") + `
  slow_start:
    reconcile:
      initial_delay: 1h` + search("/payments?idempotency_key={operation_key}", "succeeded") + `
  manual:
    reconcile:
      initial_delay: 0s
  ticket:
    retry: {on_timeout: retry_same_key}
    reconcile:
      initial_delay: 0s
  forgetful_ticket:
    retry: {on_timeout: retry_same_key, provider_dedup_window: 10m}
    reconcile:
      initial_delay: 0s
`
	pol, err := policy.Parse([]byte(doc), "test-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// env is the reconcilers' environment.
func env(k string) (string, bool) {
	if k == "TEST_TOKEN" {
		return testToken, true
	}
	return "", false
}

type fixture struct {
	j        *testserver.Journal
	provider *fakeProvider
	pol      *policy.Policy
	logs     *syncBuffer
	// clock is the journal's database clock and the reconciler's: tests
	// move it instead of waiting for leases and lags.
	clock *testclock.Clock
}

func setup(t *testing.T) *fixture {
	t.Helper()
	p := newFakeProvider(t)
	pol := testPolicy(t, p.URL)
	clk := testclock.New()
	return &fixture{j: testserver.Start(t, pol, testserver.WithClock(clk.Now)), provider: p, pol: pol, logs: &syncBuffer{}, clock: clk}
}

// reconciler returns a Reconciler with its own metrics registry.
func (f *fixture) reconciler(t *testing.T, id string, edit ...func(*Config)) (*Reconciler, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := Config{
		Journal: f.j.Client, Policy: f.pol, ID: id, LookupEnv: env,
		Logger:     slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: reg, Rand: rand.New(rand.NewPCG(1, 2)), PollInterval: 50 * time.Millisecond, Now: f.clock.Now,
	}
	for _, e := range edit {
		e(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, reg
}

// unknown registers key, claims it as an agent would, and records that
// the call timed out: its outcome is unknown.
func (f *fixture) unknown(t *testing.T, key, action string) *opjournalv1.Operation {
	t.Helper()
	ctx := context.Background()
	payload, _ := structpb.NewStruct(map[string]any{"order_id": key})
	reg, err := f.j.Client.Register(ctx, &opjournalv1.RegisterRequest{
		OperationKey: key, ActionType: action, Payload: payload, Claim: &opjournalv1.ClaimOptions{WorkerId: "agent-1"},
	})
	if err != nil || !reg.GetClaimed() {
		t.Fatalf("register %s: %v, %v", key, reg, err)
	}
	mu, err := f.j.Client.MarkUnknown(ctx, &opjournalv1.MarkUnknownRequest{OperationKey: key, Attempt: reg.GetAttempt(), ErrorCode: "timeout"})
	if err != nil {
		t.Fatalf("mark unknown %s: %v", key, err)
	}
	return mu.GetOperation()
}

func (f *fixture) lookup(t *testing.T, key string) *opjournalv1.Operation {
	t.Helper()
	resp, err := f.j.Client.Lookup(context.Background(), &opjournalv1.LookupRequest{OperationKey: key})
	if err != nil {
		t.Fatalf("lookup %s: %v", key, err)
	}
	return resp.GetOperation()
}

func (f *fixture) events(t *testing.T, key string) []*opjournalv1.Event {
	t.Helper()
	resp, err := f.j.Client.ListEvents(context.Background(), &opjournalv1.ListEventsRequest{OperationKey: key})
	if err != nil {
		t.Fatalf("events %s: %v", key, err)
	}
	return resp.GetEvents()
}

func runOnce(t *testing.T, r *Reconciler) Stats {
	t.Helper()
	s, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return s
}

// untilDue moves the clock to when op's next check is due.
func (f *fixture) untilDue(op *opjournalv1.Operation) {
	if op.GetNextCheckAt() != nil {
		f.clock.AdvanceTo(op.GetNextCheckAt().AsTime())
	}
}

// untilExpired moves the clock past the end of a lease.
func (f *fixture) untilExpired(leaseUntil *timestamppb.Timestamp) {
	f.clock.AdvanceTo(leaseUntil.AsTime().Add(time.Millisecond))
}

func TestEffectPresentIsMarkedSucceeded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "payment:order-817:intent-01", "pay")
	f.provider.set("payment:order-817:intent-01", "pay_000001", "succeeded")
	r, reg := f.reconciler(t, "rec-a")

	s := runOnce(t, r)
	if s != (Stats{Checked: 1, Succeeded: 1}) {
		t.Fatalf("stats = %+v", s)
	}
	op := f.lookup(t, "payment:order-817:intent-01")
	if op.GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED || op.GetExternalId() != "pay_000001" || op.GetNeedsReview() {
		t.Fatalf("operation = %v", op)
	}
	res := op.GetResult().AsMap()
	if res["external_id"] != "pay_000001" || res["reconciled_by"] != "rec-a" {
		t.Errorf("result = %v", res)
	}
	// The provider's record of the effect, as the verifier found it: what a
	// gateway replays to a client that retries.
	if rs, _ := res["resource"].(map[string]any); rs["id"] != "pay_000001" || rs["status"] != "succeeded" {
		t.Errorf("result's resource = %v", res["resource"])
	}
	evs := f.events(t, "payment:order-817:intent-01")
	last := evs[len(evs)-1]
	if last.GetToStatus() != opjournalv1.Status_STATUS_SUCCEEDED || last.GetActor() != "rec-a" || last.GetAttempt() != 1 || last.GetExternalId() != "pay_000001" {
		t.Errorf("last event = %v", last)
	}
	if f.provider.badAuth.Load() != 0 {
		t.Error("the verifier did not send the token from the environment")
	}
	// Settled: nothing is due any more.
	if s := runOnce(t, r); s != (Stats{}) {
		t.Errorf("second pass = %+v", s)
	}
	if got := counter(t, reg, "opjournal_reconciler_decisions_total", "action", "pay", "decision", "succeeded"); got != 1 {
		t.Errorf("decisions{pay,succeeded} = %v", got)
	}
	if got := counter(t, reg, "opjournal_reconciler_passes_total"); got != 2 {
		t.Errorf("passes = %v", got)
	}
	// One line per decision and per pass, with the key and never the token.
	logs := f.logs.String()
	if !strings.Contains(logs, `"msg":"reconcile decision","key":"payment:order-817:intent-01","action":"pay","decision":"succeeded","attempt":1`) {
		t.Errorf("no decision line in the logs:\n%s", logs)
	}
	if strings.Contains(logs, testToken) || strings.Contains(logs, "490000") {
		t.Errorf("the logs hold a secret or a payload:\n%s", logs)
	}
}

func TestDefinitiveAbsenceIsReleasedOnlyAfterTheLag(t *testing.T) {
	t.Parallel()
	f := setup(t)
	before := f.unknown(t, "absent-1", "pay")
	r, _ := f.reconciler(t, "rec-b")

	// Inside the 2 s visibility lag: "not found yet" is a check, not a
	// release.
	if s := runOnce(t, r); s != (Stats{Checked: 1, Rechecked: 1}) {
		t.Fatalf("pass inside the lag = %+v", s)
	}
	op := f.lookup(t, "absent-1")
	if op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN || op.GetCheckCount() != 1 {
		t.Fatalf("after the first pass: %v", op)
	}
	// The next check is due when the lag is over, not before.
	lagEnd := before.GetUnknownSince().AsTime().Add(2 * time.Second)
	if next := op.GetNextCheckAt().AsTime(); next.Before(lagEnd) || next.After(lagEnd.Add(1500*time.Millisecond)) {
		t.Errorf("next check at %v, lag ends at %v", next, lagEnd)
	}
	if s := runOnce(t, r); s != (Stats{}) {
		t.Fatalf("a pass before the next check is due = %+v", s)
	}

	f.untilDue(op)
	if s := runOnce(t, r); s != (Stats{Checked: 1, Released: 1}) {
		t.Fatalf("pass after the lag = %+v", s)
	}
	op = f.lookup(t, "absent-1")
	if op.GetStatus() != opjournalv1.Status_STATUS_PENDING {
		t.Fatalf("after the release: %v", op)
	}
	evs := f.events(t, "absent-1")
	if last := evs[len(evs)-1]; last.GetFromStatus() != opjournalv1.Status_STATUS_UNKNOWN || last.GetToStatus() != opjournalv1.Status_STATUS_PENDING || last.GetActor() != "rec-b" {
		t.Errorf("last event = %v", last)
	}
	// The agent's retry claims it again, as attempt 2.
	c, err := f.j.Client.Claim(context.Background(), &opjournalv1.ClaimRequest{OperationKey: "absent-1", WorkerId: "agent-1"})
	if err != nil || !c.GetClaimed() || c.GetAttempt() != 2 {
		t.Fatalf("claim after release = %v, %v", c, err)
	}
}

func TestNotDefinitiveStaysUnknownWithBackoff(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "mail-1", "mail")
	r, _ := f.reconciler(t, "rec-c")

	var prevNext time.Time
	// Interval 1 s doubling, capped at 4 s: 1, 2, 4 s (±20 %, whole seconds).
	for i, base := range []float64{1, 2, 4} {
		if s := runOnce(t, r); s != (Stats{Checked: 1, Rechecked: 1}) {
			t.Fatalf("check %d: stats %+v", i+1, s)
		}
		op := f.lookup(t, "mail-1")
		if op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN || op.GetCheckCount() != int32(i+1) || op.GetNeedsReview() {
			t.Fatalf("check %d: %v", i+1, op)
		}
		next := op.GetNextCheckAt().AsTime()
		gap := next.Sub(op.GetLastCheckedAt().AsTime()).Seconds()
		lo, hi := max(1, float64(int(base*0.8))), base*1.2+0.5
		if gap < lo-0.01 || gap > hi+0.01 {
			t.Errorf("check %d: next check %.3fs after it, want %v..%v", i+1, gap, lo, hi)
		}
		if !next.After(prevNext) {
			t.Errorf("check %d: next check %v does not move forward from %v", i+1, next, prevNext)
		}
		prevNext = next
		if i < 2 {
			f.untilDue(op)
		}
	}
	evs := f.events(t, "mail-1")
	if last := evs[len(evs)-1]; last.GetActor() != "rec-c" || !strings.Contains(last.GetReason(), "not found; provider search is not definitive") {
		t.Errorf("last event = %v", last)
	}
}

func TestUnclearVerifierIsEscalatedAfterUnknownAfter(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "flaky-1", "flaky")
	r, reg := f.reconciler(t, "rec-d")

	// A 500 is unclear: never absence, even though the action's search is
	// definitive.
	if s := runOnce(t, r); s != (Stats{Checked: 1, Rechecked: 1}) {
		t.Fatalf("first pass = %+v", s)
	}
	op := f.lookup(t, "flaky-1")
	if op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN || op.GetNeedsReview() {
		t.Fatalf("after the first pass: %v", op)
	}
	evs := f.events(t, "flaky-1")
	if last := evs[len(evs)-1]; last.GetReason() == "" || !strings.Contains(last.GetReason(), "verifier error: provider answered HTTP 500") {
		t.Errorf("check event = %v", last)
	}

	// unknown_after_seconds is 2: keep checking until it has passed.
	for i := 0; !op.GetNeedsReview(); i++ {
		if i == 20 {
			t.Fatalf("not escalated after %d checks: %v", i, op)
		}
		f.untilDue(op)
		s := runOnce(t, r)
		if s.Errors != 0 || s.Released != 0 || s.Succeeded != 0 {
			t.Fatalf("pass = %+v", s)
		}
		op = f.lookup(t, "flaky-1")
	}
	if op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN || !strings.HasPrefix(op.GetReviewReason(), "verifier cannot answer after ") ||
		!strings.Contains(op.GetReviewReason(), "provider answered HTTP 500") {
		t.Errorf("escalated operation = %v", op)
	}
	if since := f.clock.Now().Sub(op.GetUnknownSince().AsTime()); since < 2*time.Second {
		t.Errorf("escalated %s after becoming unknown, before unknown_after", since)
	}
	// Under review: no longer due.
	if s := runOnce(t, r); s != (Stats{}) {
		t.Errorf("pass after the escalation = %+v", s)
	}
	if got := counter(t, reg, "opjournal_reconciler_verifier_errors_total", "action", "flaky"); got < 2 {
		t.Errorf("verifier errors = %v", got)
	}
	if got := counter(t, reg, "opjournal_reconciler_decisions_total", "action", "flaky", "decision", "escalated"); got != 1 {
		t.Errorf("decisions{flaky,escalated} = %v", got)
	}
}

func TestExpiredLeaseIsReconciled(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	payload, _ := structpb.NewStruct(map[string]any{"amount_minor": 490000})
	reg, err := f.j.Client.Register(ctx, &opjournalv1.RegisterRequest{
		OperationKey: "vanished-1", ActionType: "pay", Payload: payload,
		Claim: &opjournalv1.ClaimOptions{WorkerId: "agent-1", LeaseSeconds: 1},
	})
	if err != nil || !reg.GetClaimed() {
		t.Fatalf("register: %v, %v", reg, err)
	}
	// The worker charged the card and vanished.
	f.provider.set("vanished-1", "pay_000042", "succeeded")
	r, _ := f.reconciler(t, "rec-e")
	if s := runOnce(t, r); s != (Stats{}) {
		t.Fatalf("a live lease was reconciled: %+v", s)
	}
	f.untilExpired(reg.GetLeaseUntil())
	if op := f.lookup(t, "vanished-1"); op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN {
		t.Fatalf("expired lease reads as %v", op.GetStatus())
	}
	if s := runOnce(t, r); s != (Stats{Checked: 1, Succeeded: 1}) {
		t.Fatalf("pass after the lease expired = %+v", s)
	}
	op := f.lookup(t, "vanished-1")
	if op.GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED || op.GetExternalId() != "pay_000042" {
		t.Fatalf("operation = %v", op)
	}
}

func TestExpiredLeaseAbsentIsCheckedThenReleased(t *testing.T) {
	t.Parallel()
	f := setup(t)
	reg, err := f.j.Client.Register(context.Background(), &opjournalv1.RegisterRequest{
		OperationKey: "vanished-2", ActionType: "pay", Payload: &structpb.Struct{},
		Claim: &opjournalv1.ClaimOptions{WorkerId: "agent-1", LeaseSeconds: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.untilExpired(reg.GetLeaseUntil())
	r, _ := f.reconciler(t, "rec-e2")
	s := runOnce(t, r)
	op := f.lookup(t, "vanished-2")
	if s != (Stats{Checked: 1, Rechecked: 1}) || op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN || op.GetCheckCount() != 1 {
		t.Fatalf("first pass %+v: %v", s, op)
	}
	f.untilDue(op)
	if s := runOnce(t, r); s != (Stats{Checked: 1, Released: 1}) {
		t.Fatalf("second pass = %+v", s)
	}
	if op := f.lookup(t, "vanished-2"); op.GetStatus() != opjournalv1.Status_STATUS_PENDING {
		t.Fatalf("operation = %v", op)
	}
}

func TestTwoReconcilersSettleEachOperationOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 50
	for i := range n {
		key := fmt.Sprintf("race-%02d", i)
		f.unknown(t, key, "pay")
		f.provider.set(key, fmt.Sprintf("pay_%06d", i), "succeeded")
	}
	// A slow provider, so that both reconcilers list every operation
	// before either has settled any.
	f.provider.mu.Lock()
	f.provider.delay = 20 * time.Millisecond
	f.provider.mu.Unlock()
	r1, _ := f.reconciler(t, "rec-1", func(c *Config) { c.Concurrency = 8; c.PageSize = 7 })
	r2, _ := f.reconciler(t, "rec-2", func(c *Config) { c.Concurrency = 8; c.PageSize = 7 })

	var s1, s2 Stats
	var e1, e2 error
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); <-start; s1, e1 = r1.RunOnce(context.Background()) }()
	go func() { defer wg.Done(); <-start; s2, e2 = r2.RunOnce(context.Background()) }()
	close(start)
	wg.Wait()
	if e1 != nil || e2 != nil {
		t.Fatalf("RunOnce errors: %v, %v", e1, e2)
	}
	t.Logf("rec-1: %v; rec-2: %v", s1, s2)
	total := s1.Add(s2)
	if total.Succeeded != n || total.Errors != 0 || total.Released+total.Rechecked+total.Escalated+total.Deferred != 0 {
		t.Fatalf("stats %+v", total)
	}
	if total.Skipped != total.Checked-n {
		t.Errorf("%d operations were looked at twice but %d counted as skipped", total.Checked-n, total.Skipped)
	}
	if total.Skipped == 0 {
		t.Log("no race happened this time (one reconciler settled everything first)")
	}
	for i := range n {
		key := fmt.Sprintf("race-%02d", i)
		op := f.lookup(t, key)
		if op.GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED || op.GetExternalId() != fmt.Sprintf("pay_%06d", i) || op.GetNeedsReview() {
			t.Errorf("%s = %v", key, op)
		}
		succeeded := 0
		for _, ev := range f.events(t, key) {
			if ev.GetToStatus() == opjournalv1.Status_STATUS_SUCCEEDED && ev.GetFromStatus() != opjournalv1.Status_STATUS_SUCCEEDED {
				succeeded++
				if a := ev.GetActor(); a != "rec-1" && a != "rec-2" {
					t.Errorf("%s settled by %q", key, a)
				}
			}
		}
		if succeeded != 1 {
			t.Errorf("%s: %d transitions to SUCCEEDED, want 1", key, succeeded)
		}
	}
}

func TestNoVerifier(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "manual-1", "manual")
	f.unknown(t, "ticket-1", "ticket")
	r, _ := f.reconciler(t, "rec-f")
	if s := runOnce(t, r); s != (Stats{Checked: 2, Escalated: 1, Rechecked: 1}) {
		t.Fatalf("stats = %+v", s)
	}
	// reconcile_before_retry without a verifier: a person decides.
	if op := f.lookup(t, "manual-1"); !op.GetNeedsReview() || op.GetReviewReason() != "no verifier configured for manual" {
		t.Errorf("manual-1 = %v", op)
	}
	// retry_same_key: the retry with the same key settles it; the person
	// is only needed after unknown_after (900 s here).
	op := f.lookup(t, "ticket-1")
	if op.GetNeedsReview() || op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN {
		t.Errorf("ticket-1 = %v", op)
	}
	if wait := op.GetNextCheckAt().AsTime().Sub(op.GetUnknownSince().AsTime()); wait < 899*time.Second || wait > 902*time.Second {
		t.Errorf("ticket-1's next check is %s after it became unknown, want 900s", wait)
	}
	c, err := f.j.Client.Claim(context.Background(), &opjournalv1.ClaimRequest{OperationKey: "ticket-1", WorkerId: "agent-1"})
	if err != nil || !c.GetClaimed() {
		t.Errorf("the retry with the same key cannot claim ticket-1: %v, %v", c, err)
	}
}

func TestFoundNotCompletedAndInitialDelay(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "pending-1", "pay")
	f.provider.set("pending-1", "pay_1", "processing")
	f.unknown(t, "slow-1", "slow_start")
	f.provider.set("slow-1", "pay_2", "succeeded")
	r, _ := f.reconciler(t, "rec-g")
	before := f.provider.requests.Load()
	if s := runOnce(t, r); s != (Stats{Checked: 2, Rechecked: 1, Deferred: 1}) {
		t.Fatalf("stats = %+v", s)
	}
	if got := f.provider.requests.Load() - before; got != 1 {
		t.Errorf("the provider was asked %d times, want once (slow_start is within its initial delay)", got)
	}
	if op := f.lookup(t, "pending-1"); op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN || op.GetCheckCount() != 1 {
		t.Errorf("pending-1 = %v", op)
	}
	if op := f.lookup(t, "slow-1"); op.GetStatus() != opjournalv1.Status_STATUS_UNKNOWN || op.GetCheckCount() != 0 {
		t.Errorf("slow-1 = %v", op)
	}
	evs := f.events(t, "pending-1")
	if last := evs[len(evs)-1]; last.GetReason() == "" || !strings.Contains(last.GetReason(), "found, not completed") {
		t.Errorf("last event = %v", last)
	}
}

func TestRunStopsGracefully(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "graceful-1", "pay")
	f.provider.set("graceful-1", "pay_7", "succeeded")
	f.provider.mu.Lock()
	f.provider.delay = 700 * time.Millisecond
	f.provider.mu.Unlock()
	r, _ := f.reconciler(t, "rec-h")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// Stop while the provider is being asked.
	await.Until(t, "the provider to be asked", func() bool { return f.provider.requests.Load() > 0 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	// The operation in flight was finished, not abandoned.
	if op := f.lookup(t, "graceful-1"); op.GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED {
		t.Fatalf("operation in flight at shutdown = %v", op)
	}
}

func TestRunOnceReportsAnUnreachableJournal(t *testing.T) {
	t.Parallel()
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r, err := New(Config{Journal: opjournalv1.NewJournalServiceClient(conn), Policy: policy.Default(), ID: "rec-x",
		RPCTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "list operations due for a check") || s != (Stats{}) {
		t.Fatalf("RunOnce = %+v, %v", s, err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := opjournalv1.NewJournalServiceClient(conn)
	if _, err := New(Config{Policy: policy.Default()}); err == nil {
		t.Error("New without a journal succeeded")
	}
	if _, err := New(Config{Journal: client}); err == nil {
		t.Error("New without a policy succeeded")
	}
	if _, err := New(Config{Journal: client, Policy: policy.Default(), ID: "has space"}); err == nil {
		t.Error("New with an invalid ID succeeded")
	}
	r, err := New(Config{Journal: client, Policy: policy.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID(), "reconciler-") || checkActor(r.ID()) != nil {
		t.Errorf("default ID %q", r.ID())
	}
	if got, want := strings.Join(r.VerifiedActions(), ","), "create_payment,send_email,submit_application"; got != want {
		t.Errorf("VerifiedActions = %s, want %s", got, want)
	}
	r, err = New(Config{Journal: client, Policy: policy.Default(), Verifiers: map[string]Verifier{"send_email": nil}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.VerifiedActions(), ","); got != "create_payment,submit_application" {
		t.Errorf("VerifiedActions with send_email removed = %s", got)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Journal: client, Policy: policy.Default(), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Journal: client, Policy: policy.Default(), Registerer: reg}); err == nil {
		t.Error("registering the metrics twice succeeded")
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	r := &Reconciler{cfg: Config{Rand: rand.New(rand.NewPCG(7, 7))}}
	rc := policy.Reconcile{Interval: 2 * time.Second, MaxInterval: time.Minute}
	for checks, base := range map[int32]time.Duration{0: 2 * time.Second, 1: 4 * time.Second, 4: 32 * time.Second, 5: time.Minute, 60: time.Minute, 1 << 30: time.Minute} {
		for range 200 {
			d := r.backoff(rc, checks)
			if d < base*8/10 || d > base*12/10 {
				t.Fatalf("backoff(%d) = %s, want %s ± 20%%", checks, d, base)
			}
		}
	}
	small := policy.Reconcile{Interval: 100 * time.Millisecond, MaxInterval: 200 * time.Millisecond}
	if d := r.backoff(small, 0); d != time.Second {
		t.Errorf("backoff below a second = %s, want 1s", d)
	}
}

func TestTextHelpers(t *testing.T) {
	t.Parallel()
	if got := clean("a\nb\x00c" + strings.Repeat("é", 150)); len(got) > 200 || strings.ContainsAny(got, "\n\x00") || !strings.HasPrefix(got, "a b c") || !strings.HasSuffix(got, "…") {
		t.Errorf("clean = %q (%d bytes)", got, len(got))
	}
	if got := shorten("short", 10); got != "short" {
		t.Errorf("shorten = %q", got)
	}
	if got := ceilSeconds(1100 * time.Millisecond); got != 2*time.Second {
		t.Errorf("ceilSeconds = %s", got)
	}
	if got := ceilSeconds(-time.Second); got != time.Second {
		t.Errorf("ceilSeconds(negative) = %s", got)
	}
}

// counter reads a counter from reg; labels are name, value pairs.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if labelValue(m, labels[i]) != labels[i+1] {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNoVerifierProviderWindow: a retry_same_key action whose provider
// forgets keys after 10 minutes. Inside the window the retry with the
// same key settles the operation; after it, that retry could repeat the
// effect, the journal refuses it, and the reconciler hands the operation
// to a person instead of waiting for a retry that cannot come.
func TestNoVerifierProviderWindow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "ticket-2", "forgetful_ticket")
	r, _ := f.reconciler(t, "rec-w")
	if s := runOnce(t, r); s != (Stats{Checked: 1, Rechecked: 1}) {
		t.Fatalf("inside the window: stats = %+v", s)
	}
	op := f.lookup(t, "ticket-2")
	// The next check comes when the window ends, not after unknown_after.
	if wait := op.GetNextCheckAt().AsTime().Sub(op.GetFirstAttemptAt().AsTime()); wait < 10*time.Minute || wait > 10*time.Minute+2*time.Second {
		t.Fatalf("next check %s after the first attempt, want 10m", wait)
	}
	f.untilDue(op)
	// The journal refuses the blind retry now...
	c, err := f.j.Client.Claim(context.Background(), &opjournalv1.ClaimRequest{OperationKey: "ticket-2", WorkerId: "agent-1"})
	if err != nil || c.GetClaimed() || c.GetNext() != opjournalv1.NextStep_NEXT_STEP_VERIFICATION_REQUIRED {
		t.Fatalf("claim after the window: %v, %v", c, err)
	}
	// ...and the reconciler hands it to a person.
	if s := runOnce(t, r); s != (Stats{Checked: 1, Escalated: 1}) {
		t.Fatalf("after the window: stats = %+v", s)
	}
	if op := f.lookup(t, "ticket-2"); !op.GetNeedsReview() || !strings.Contains(op.GetReviewReason(), "dedup window (10m0s)") {
		t.Fatalf("ticket-2 = %v", op)
	}
}

// TestReleaseLostToAnotherReconcilerIsSkipped: two reconcilers decide on
// the same unknown operation past its deadline; one releases it, and the
// other's release is refused because the operation is pending now. The
// loser must see that the operation moved on, and must not hand a pending
// operation to a person (found by the soak: pending and under review, the
// agent stopped asking).
func TestReleaseLostToAnotherReconcilerIsSkipped(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.unknown(t, "raced-1", "pay")
	f.clock.Advance(24 * time.Hour) // past unknown_after and the release delay
	stale := f.lookup(t, "raced-1") // what the losing reconciler listed
	if _, err := f.j.Client.ReleaseForRetry(context.Background(), &opjournalv1.ReleaseForRetryRequest{
		OperationKey: "raced-1", Attempt: stale.GetAttemptCount(), Actor: "rec-winner", Reason: "absent",
	}); err != nil {
		t.Fatal(err)
	}
	r, _ := f.reconciler(t, "rec-loser")
	if d := r.handle(context.Background(), stale); d != DecisionSkipped {
		t.Fatalf("decision = %s, want skipped", d)
	}
	op := f.lookup(t, "raced-1")
	if op.GetStatus() != opjournalv1.Status_STATUS_PENDING || op.GetNeedsReview() {
		t.Fatalf("operation = %v, want pending and not under review", op)
	}
}
