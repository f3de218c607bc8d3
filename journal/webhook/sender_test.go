package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/standardwebhooks"
	"github.com/opjournal/opjournal/journal/webhook"
)

// received is one request a receiver got.
type received struct {
	Header http.Header
	Body   []byte
}

// receiver is a real HTTP server on a free port that records every request
// and answers each with answer(n), n counting from 1. An answer of 0
// never answers: it holds the request until the sender gives up on it.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []received
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{Header: req.Header.Clone(), Body: body})
		n := len(r.got)
		r.mu.Unlock()
		status := answer(n)
		if status == 0 {
			<-req.Context().Done() // the sender's timeout ends it
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// start runs a Sender with short delays (the schedule itself is
// TestBackoffSchedule's) until the test ends.
func start(t *testing.T, cfg webhook.Config) *webhook.Sender {
	t.Helper()
	if cfg.Secrets == nil {
		_, sec := randomSecret(t, 3)
		cfg.Secrets = []webhook.Secret{sec}
	}
	if cfg.BaseDelay == 0 {
		cfg.BaseDelay, cfg.MaxDelay = 5*time.Millisecond, 20*time.Millisecond
	}
	s, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func notification(url, key string) webhook.Notification {
	return webhook.Notification{URL: url, Tenant: "acme", OperationKey: key, ActionType: "create_payment",
		RequestHash: "5112" + strings.Repeat("0", 60), RequestedBy: "agent-7",
		Deadline: time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC), At: time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)}
}

// settledAs waits until the sender holds nothing and counted want.
func settledAs(t *testing.T, s *webhook.Sender, want webhook.Outcome) webhook.Stats {
	t.Helper()
	await.Until(t, "the delivery settled as "+string(want), func() bool {
		st := s.Stats()
		return st.Held == 0 && st.Deliveries[want] == 1
	})
	return s.Stats()
}

func TestRetriesUntilTheReceiverAnswers2xx(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, func(n int) int {
		return map[int]int{1: 500, 2: 503, 3: 429, 4: 204}[n]
	})
	s := start(t, webhook.Config{})
	n := notification(r.URL+"/approvals", "payment:1")
	if !s.Notify(n) {
		t.Fatal("Notify refused")
	}
	st := settledAs(t, s, webhook.OutcomeDelivered)
	if st.Deliveries[webhook.OutcomeRetried] != 3 || st.Deliveries[webhook.OutcomeFailed] != 0 {
		t.Errorf("stats %+v; want 3 retried attempts, then delivered", st.Deliveries)
	}
	got := r.requests()
	if len(got) != 4 {
		t.Fatalf("the receiver got %d requests, want 4", len(got))
	}
	for i, g := range got {
		if g.Header.Get(webhook.HeaderID) != n.MessageID() || !bytes.Equal(g.Body, got[0].Body) {
			t.Errorf("attempt %d: id %s and body %s; every attempt carries the same id and body", i+1, g.Header.Get(webhook.HeaderID), g.Body)
		}
	}
}

func TestGoneStopsAtOnce(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, func(int) int { return http.StatusGone })
	s := start(t, webhook.Config{})
	s.Notify(notification(r.URL, "payment:gone"))
	st := settledAs(t, s, webhook.OutcomeFailed)
	if st.Deliveries[webhook.OutcomeRetried] != 0 || len(r.requests()) != 1 {
		t.Errorf("after 410: %d requests, stats %+v; want one request and no retry", len(r.requests()), st.Deliveries)
	}
}

func TestNoAnswerTimesOutAndIsRetried(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, func(n int) int {
		if n == 1 {
			return 0 // hold it past the sender's timeout
		}
		return 200
	})
	s := start(t, webhook.Config{Timeout: 200 * time.Millisecond})
	s.Notify(notification(r.URL, "payment:slow"))
	st := settledAs(t, s, webhook.OutcomeDelivered)
	if len(r.requests()) != 2 || st.Deliveries[webhook.OutcomeRetried] != 1 {
		t.Errorf("%d requests, stats %+v; want the timed-out attempt retried once", len(r.requests()), st.Deliveries)
	}
}

func TestGivesUpAfterItsAttempts(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, func(int) int { return 500 })
	s := start(t, webhook.Config{Attempts: 3})
	s.Notify(notification(r.URL, "payment:down"))
	st := settledAs(t, s, webhook.OutcomeFailed)
	if len(r.requests()) != 3 || st.Deliveries[webhook.OutcomeRetried] != 2 {
		t.Errorf("%d requests, stats %+v; want 3 attempts, 2 of them retried", len(r.requests()), st.Deliveries)
	}
	// A rescan in the same process does not start the round again.
	if s.Notify(notification(r.URL, "payment:down")) != true {
		t.Error("a new Notify of a settled question was refused; only a rescan skips it")
	}
}

func TestRefusedConnectionIsRetried(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close() // nothing listens there now
	s := start(t, webhook.Config{Attempts: 2})
	s.Notify(notification(url, "payment:closed"))
	st := settledAs(t, s, webhook.OutcomeFailed)
	if st.Deliveries[webhook.OutcomeRetried] != 1 {
		t.Errorf("stats %+v; want the refused connection retried once", st.Deliveries)
	}
}

// TestRedirectIsNotFollowed: a 3xx is a failed attempt, and the signed
// request never reaches the host it points to.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	other := newReceiver(t, func(int) int { return 200 })
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/stolen", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	s := start(t, webhook.Config{Attempts: 2})
	s.Notify(notification(redirector.URL, "payment:redirect"))
	settledAs(t, s, webhook.OutcomeFailed)
	if n := len(other.requests()); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

// TestFullQueueDropsWithoutBlocking: with no worker running, Notify
// beyond the queue's size returns at once, counted as dropped.
func TestFullQueueDropsWithoutBlocking(t *testing.T) {
	t.Parallel()
	_, sec := randomSecret(t, 4)
	s, err := webhook.New(webhook.Config{Secrets: []webhook.Secret{sec}, QueueSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []bool)
	go func() {
		var ok []bool
		for _, k := range []string{"a", "b", "c", "d"} {
			ok = append(ok, s.Notify(notification("http://127.0.0.1:1/", "payment:"+k)))
		}
		done <- ok
	}()
	select {
	case ok := <-done:
		if want := []bool{true, true, false, false}; !equalBools(ok, want) {
			t.Errorf("Notify answered %v, want %v", ok, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Notify blocked on a full queue")
	}
	st := s.Stats()
	if st.Held != 2 || st.Deliveries[webhook.OutcomeDropped] != 2 {
		t.Errorf("stats %+v; want 2 held, 2 dropped", st)
	}
	if s.Notify(notification("http://127.0.0.1:1/", "payment:a")) {
		t.Error("a question already queued was queued twice")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	want := `
# HELP opjournal_webhook_deliveries_total Approval notifications by outcome: delivered (2xx), retried (a failed attempt that is tried again), failed (410 Gone or no attempt left), dropped (the queue was full; the rescan sends it later).
# TYPE opjournal_webhook_deliveries_total counter
opjournal_webhook_deliveries_total{outcome="delivered"} 0
opjournal_webhook_deliveries_total{outcome="dropped"} 2
opjournal_webhook_deliveries_total{outcome="failed"} 0
opjournal_webhook_deliveries_total{outcome="retried"} 0
# HELP opjournal_webhook_queue_length Approval notifications in memory: queued or waiting for their next attempt.
# TYPE opjournal_webhook_queue_length gauge
opjournal_webhook_queue_length 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNotifyRefusesANonHTTPURL(t *testing.T) {
	t.Parallel()
	_, sec := randomSecret(t, 5)
	s, err := webhook.New(webhook.Config{Secrets: []webhook.Secret{sec}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Notify(notification("file:///etc/passwd", "payment:file")) || s.Stats().Held != 0 {
		t.Error("a file: URL was queued")
	}
}

func TestNewRefusesNoSecret(t *testing.T) {
	t.Parallel()
	if _, err := webhook.New(webhook.Config{}); err == nil {
		t.Error("a Sender without a secret was made")
	}
}

// TestBackoffSchedule: exponential (×3 from 5 s, at most 20 min) with
// ±25 % jitter; the default attempts span about an hour at most.
func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	_, sec := randomSecret(t, 6)
	jitter := 0.5 // the middle: no spread
	s, err := webhook.New(webhook.Config{Secrets: []webhook.Secret{sec}, Jitter: func() float64 { return jitter }})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{5 * time.Second, 15 * time.Second, 45 * time.Second, 135 * time.Second, 405 * time.Second, 20 * time.Minute, 20 * time.Minute}
	var total time.Duration
	for i, w := range want {
		if got := s.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
		total += w
	}
	if len(want) != webhook.DefaultAttempts-1 {
		t.Fatalf("the table has %d delays for %d attempts", len(want), webhook.DefaultAttempts)
	}
	if total < 45*time.Minute || total*5/4 > 65*time.Minute {
		t.Errorf("the default attempts span %s (up to %s with jitter); want about an hour at most", total, total*5/4)
	}
	jitter = 0
	if got := s.Backoff(1); got != 3750*time.Millisecond {
		t.Errorf("Backoff(1) with the least jitter = %s, want 3.75s", got)
	}
	jitter = 0.999999
	if got := s.Backoff(7); got >= 25*time.Minute || got < 24*time.Minute {
		t.Errorf("Backoff(7) with the most jitter = %s, want just under 25m", got)
	}
}

// TestRescanResendsWithTheSameID: a rescan sends what is still pending;
// within a process a settled question is not sent again, and a new
// process (a restart) sends it again with the same webhook-id and body.
func TestRescanResendsWithTheSameID(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, func(int) int { return 200 })
	n := notification(r.URL, "payment:pending")
	pending := func(_ context.Context, yield func(webhook.Notification) bool) error {
		yield(n)
		return nil
	}
	first := start(t, webhook.Config{Pending: pending})
	settledAs(t, first, webhook.OutcomeDelivered)
	if queued, err := first.Rescan(context.Background()); err != nil || queued != 0 {
		t.Errorf("a second rescan in the same process queued %d (%v), want 0", queued, err)
	}
	second := start(t, webhook.Config{Pending: pending}) // the restart
	settledAs(t, second, webhook.OutcomeDelivered)
	got := r.requests()
	if len(got) != 2 {
		t.Fatalf("the receiver got %d requests, want 2 (one per process)", len(got))
	}
	if got[0].Header.Get(webhook.HeaderID) != got[1].Header.Get(webhook.HeaderID) || !bytes.Equal(got[0].Body, got[1].Body) {
		t.Errorf("the re-send differs: %s %s / %s %s", got[0].Header.Get(webhook.HeaderID), got[0].Body, got[1].Header.Get(webhook.HeaderID), got[1].Body)
	}
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	n := notification("https://hooks.example/", "payment:1")
	id := n.MessageID()
	if !strings.HasPrefix(id, "msg_") || len(id) != 4+64 || strings.Contains(id, ".") {
		t.Errorf("MessageID = %q; want msg_ and 64 hex digits", id)
	}
	same := n
	same.URL, same.Deadline, same.RequestedBy = "https://other.example/", time.Time{}, "someone"
	if same.MessageID() != id {
		t.Error("the id depends on more than tenant, key and request hash")
	}
	for _, edit := range []func(*webhook.Notification){
		func(m *webhook.Notification) { m.Tenant = "other" },
		func(m *webhook.Notification) { m.OperationKey = "payment:2" },
		func(m *webhook.Notification) { m.RequestHash = strings.Repeat("f", 64) },
		// The parts are separated: moving a character from one to the next is another id.
		func(m *webhook.Notification) { m.Tenant, m.OperationKey = "acmep", "ayment:1" },
	} {
		m := n
		edit(&m)
		if m.MessageID() == id {
			t.Errorf("another question has the same id: %+v", m)
		}
	}
}

// TestBodyCarriesNoPayload: the body's members are exactly the
// identifiers and the approval's terms.
func TestBodyCarriesNoPayload(t *testing.T) {
	t.Parallel()
	n := notification("https://hooks.example/", "payment:order-817/intent 01")
	n.TwoPerson, n.RequestedByLabel = true, "agent-7-2026-12"
	var got map[string]any
	if err := json.Unmarshal(n.Body("https://journal.example/"), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"type": "operation.awaiting_approval", "timestamp": "2026-12-01T22:00:00Z",
		"data": map[string]any{
			"tenant": "acme", "operation_key": "payment:order-817/intent 01", "action_type": "create_payment",
			"request_hash": n.RequestHash, "requested_by": "agent-7", "requested_by_label": "agent-7-2026-12", "deadline": "2026-12-02T22:00:00Z", "two_person": true,
			"console_url": "https://journal.example/console/operation?key=payment%3Aorder-817%2Fintent+01",
		},
	}
	if a, b := mustJSON(t, got), mustJSON(t, want); a != b {
		t.Errorf("body\n %s\nwant\n %s", a, b)
	}
	n.Deadline = time.Time{}
	if err := json.Unmarshal(n.Body(""), &got); err != nil {
		t.Fatal(err)
	}
	d := got["data"].(map[string]any)
	if v, ok := d["deadline"]; !ok || v != nil {
		t.Errorf("deadline without one: %v (present %v), want null", v, ok)
	}
	if _, ok := d["console_url"]; ok {
		t.Error("console_url without a public URL")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTheStandardWebhooksLibraryVerifiesADelivery: a real delivery's
// headers and body, as the receiver got them, verified by the Standard
// Webhooks project's own JavaScript library (not by this package), with
// each of two secrets of a rotation; and a tampered body refused.
func TestTheStandardWebhooksLibraryVerifiesADelivery(t *testing.T) {
	t.Parallel()
	currentText, current := randomSecret(t, 11)
	previousText, previous := randomSecret(t, 111)
	r := newReceiver(t, func(int) int { return 200 })
	s := start(t, webhook.Config{Secrets: []webhook.Secret{current, previous}, PublicURL: "https://journal.example"})
	n := notification(r.URL, "payment:order-817:intent-01")
	s.Notify(n)
	settledAs(t, s, webhook.OutcomeDelivered)
	got := r.requests()[0]
	for _, secret := range []string{currentText, previousText} {
		payload, err := standardwebhooks.Verify(t, secret, got.Header, got.Body)
		if err != nil {
			t.Fatalf("standardwebhooks refused the delivery: %v", err)
		}
		if payload["data"].(map[string]any)["operation_key"] != n.OperationKey {
			t.Errorf("verified payload %v", payload)
		}
	}
	tampered := bytes.Replace(got.Body, []byte("agent-7"), []byte("agent-8"), 1)
	if _, err := standardwebhooks.Verify(t, currentText, got.Header, tampered); err == nil {
		t.Error("standardwebhooks accepted a tampered body")
	}
}

// TestRetryAfterPostponesTheRetry: a 503 with Retry-After: 1 is retried
// no sooner than a second later, although the backoff says milliseconds.
func TestRetryAfterPostponesTheRetry(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var at []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		n := len(at)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	// MaxDelay bounds a Retry-After too: leave room for the one asked.
	s := start(t, webhook.Config{BaseDelay: 5 * time.Millisecond, MaxDelay: 5 * time.Second})
	s.Notify(notification(srv.URL, "payment:later"))
	settledAs(t, s, webhook.OutcomeDelivered)
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 || at[1].Sub(at[0]) < time.Second {
		t.Errorf("%d attempts, %v apart; want 2, at least 1s apart", len(at), at[len(at)-1].Sub(at[0]))
	}
}
