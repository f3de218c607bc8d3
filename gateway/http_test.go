package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

var payment = map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}

// TestHTTPOncePerKey: the first request is sent and answered by the
// provider; a retry with the same key is the stored answer, replayed; the
// provider holds one effect.
func TestHTTPOncePerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	first := e.post("/payments", "intent-817", payment)
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
	}
	key := first.header.Get("Opjournal-Operation-Key")
	if !strings.HasPrefix(key, "http:create_payment:"+scopeOf("agent-a")+":intent-817") {
		t.Fatalf("operation key %q", key)
	}
	again := e.post("/payments", "intent-817", payment)
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" ||
		again.json(t)["id"] != first.json(t)["id"] || again.header.Get("Content-Type") != "application/json" {
		t.Fatalf("replay: %d %v %s (first %s)", again.status, again.header, again.body, first.body)
	}
	if n := e.effects(key); n != 1 || e.allEffects() != 1 {
		t.Fatalf("effects under %s: %d (total %d), want 1", key, n, e.allEffects())
	}
	// The same key from another caller (another principal) is another intent.
	other := e.post("/payments", "intent-817", payment, "Authorization", "Bearer "+tokenB)
	if other.status != http.StatusCreated || other.header.Get("Idempotent-Replayed") != "" || other.header.Get("Opjournal-Operation-Key") == key {
		t.Fatalf("other caller: %d %v", other.status, other.header)
	}
	if !strings.HasPrefix(other.header.Get("Opjournal-Operation-Key"), "http:create_payment:"+scopeOf("agent-b")+":") {
		t.Fatalf("agent B's key %q", other.header.Get("Opjournal-Operation-Key"))
	}
}

// TestHTTPRefusals: what the client must be told, as problem documents,
// and that nothing is sent for any of them.
func TestHTTPRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.post("/payments", "k1", payment)
	// The same key with another body: 422, not sent.
	other := map[string]any{"order_id": "817", "amount_minor": 1, "currency": "RUB"}
	wantProblem(t, e.post("/payments", "k1", other), http.StatusUnprocessableEntity, "idempotency-key-reused")
	// No key where the route requires one: 400.
	wantProblem(t, e.post("/payments", "", payment), http.StatusBadRequest, "idempotency-key-missing")
	// A key with a control character or too long: 400.
	wantProblem(t, e.post("/payments", strings.Repeat("k", 256), payment), http.StatusBadRequest, "idempotency-key-invalid")
	// A body that is not a JSON object.
	wantProblem(t, e.post("/payments", "k2", []int{1}), http.StatusBadRequest, "body-not-json-object")
	// What the journal refuses (a fraction of money): 400 naming the field.
	p := wantProblem(t, e.post("/payments", "k3", map[string]any{"order_id": "1", "amount_minor": 4900.5, "currency": "RUB"}), http.StatusBadRequest, "invalid-request")
	if p["field"] != "payload/amount_minor" || strings.Contains(p["detail"].(string), "4900.5") {
		t.Fatalf("problem %v", p)
	}
	if e.allEffects() != 1 {
		t.Fatalf("effects %d, want 1", e.allEffects())
	}
	// Nothing else is routed: 404 without a default upstream.
	wantProblem(t, e.post("/refunds", "k4", payment), http.StatusNotFound, "no-route")
}

// TestHTTPKeyFromBody: a route with key_fields protects a client that
// sends no key: the key is derived from the intent's fields, written into
// the provider's reference field, and a retry is recognised.
func TestHTTPKeyFromBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	mail := map[string]any{"to": "c-93@example.com", "subject": "Receipt for order 817"}
	first := e.post("/emails", "", mail)
	key := first.header.Get("Opjournal-Operation-Key")
	if first.status != http.StatusAccepted || !strings.HasPrefix(key, "http:send_email:"+scopeOf("agent-a")+":f:") || first.json(t)["reference"] != key {
		t.Fatalf("first: %d key %q %s", first.status, key, first.body)
	}
	again := e.post("/emails", "", mail)
	if again.status != http.StatusAccepted || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %v", again.status, again.header)
	}
	if e.effects(key) != 1 {
		t.Fatalf("emails sent under %s: %d, want 1", key, e.effects(key))
	}
	// Another subject is another intent.
	if r := e.post("/emails", "", map[string]any{"to": "c-93@example.com", "subject": "Shipped"}); r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("another subject: %d %v", r.status, r.header)
	}
	// A body without a key field: 400, not sent.
	wantProblem(t, e.post("/emails", "", map[string]any{"to": "x@example.com"}), http.StatusBadRequest, "idempotency-key-missing")
	if e.allEffects() != 2 {
		t.Fatalf("effects %d, want 2", e.allEffects())
	}
}

// TestHTTPRejectionIsReplayed: a definite refusal (a 4xx) is recorded as
// failed_final with the provider's answer, and a retry gets that answer
// again without a second call.
func TestHTTPRejectionIsReplayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	declined := map[string]any{"order_id": "818", "amount_minor": 100, "currency": "RUB", "card": "declined"}
	first := e.post("/payments", "k-declined", declined)
	if first.status != http.StatusPaymentRequired {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	again := e.post("/payments", "k-declined", declined)
	if again.status != http.StatusPaymentRequired || again.header.Get("Idempotent-Replayed") != "true" || string(again.json(t)["error"].(string)) != "card_declined" {
		t.Fatalf("replay: %d %v %s", again.status, again.header, again.body)
	}
	if e.allEffects() != 0 {
		t.Fatalf("effects %d", e.allEffects())
	}
}

// TestHTTPUnknownThenSettled: the provider charges, then its answer is
// lost. The client is told the outcome is unknown and must not use a new
// key; its retries are not sent; the reconciler finds the charge; the next
// retry is the settled answer. One charge.
func TestHTTPUnknownThenSettled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 10 * time.Second})
	first := e.post("/payments", "k-lost", payment)
	p := wantProblem(t, first, http.StatusConflict, "outcome-unknown")
	if !strings.Contains(p["detail"].(string), "Do NOT retry with a new key") || first.header.Get("Retry-After") == "" {
		t.Fatalf("problem %v", p)
	}
	key := first.header.Get("Opjournal-Operation-Key")
	wantProblem(t, e.post("/payments", "k-lost", payment), http.StatusConflict, "outcome-unknown")
	if e.effects(key) != 1 {
		t.Fatalf("effects %d, want 1", e.effects(key))
	}
	e.reconcile(func() bool { return e.post("/payments", "k-lost", payment).status == http.StatusOK })
	// The replay is the provider's resource as the reconciler found it
	// (its id, its fields), not a made-up answer.
	settled := e.post("/payments", "k-lost", payment)
	if settled.header.Get("Idempotent-Replayed") != "true" || settled.json(t)["status"] != "succeeded" ||
		settled.json(t)["id"] != "pay_000001" || settled.json(t)["idempotency_key"] != key || settled.header.Get("Opjournal-Replay-Source") != "settlement" {
		t.Fatalf("settled: %d %v %s", settled.status, settled.header, settled.body)
	}
	if e.effects(key) != 1 {
		t.Fatalf("effects %d, want 1", e.effects(key))
	}
}

// TestHTTPEveryFaultOneEffect: an agent that retries after every lost
// or unclear answer, against every fault kind of the test provider, on an
// endpoint that does not deduplicate (email): exactly one effect per
// intent, counted at the provider, or none after a definite refusal.
func TestHTTPEveryFaultOneEffect(t *testing.T) {
	t.Parallel()
	for _, kind := range []fakeprovider.FaultKind{fakeprovider.CommitThenTimeout, fakeprovider.TimeoutBeforeCommit, fakeprovider.Reject,
		fakeprovider.ErrorAfterCommit, fakeprovider.DropConnectionAfterCommit, fakeprovider.Slow, fakeprovider.Error} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, testPolicy)
			f := fakeprovider.Fault{Path: "/emails", Kind: kind, Count: 1}
			switch kind {
			case fakeprovider.CommitThenTimeout, fakeprovider.TimeoutBeforeCommit, fakeprovider.Slow:
				f.Delay = 5 * time.Second // beyond max_attempt_seconds: the gateway gives up
			}
			e.fault(f)
			mail := map[string]any{"to": "c@example.com", "subject": "fault " + string(kind)}
			// The agent retries the same request until it gets a definite
			// answer; between its tries the reconciler makes a pass.
			var key string
			var last response
			e.reconcile(func() bool {
				last = e.post("/emails", "", mail)
				key = last.header.Get("Opjournal-Operation-Key")
				if last.status != http.StatusConflict && last.status >= 300 && last.status != http.StatusUnprocessableEntity {
					t.Fatalf("%d %s", last.status, last.body)
				}
				return last.status < 300 || last.status == http.StatusUnprocessableEntity
			})
			want := 1
			if kind == fakeprovider.Reject {
				want = 0
			}
			if n := e.effects(key); n != want || e.allEffects() != want {
				t.Fatalf("effects under %s: %d (total %d), want %d; last answer %d %s", key, n, e.allEffects(), want, last.status, last.body)
			}
		})
	}
}

// TestHTTPConcurrentSameKey: 32 callers with one key at once, through two
// gateways on the same journal: one effect; the others are told to wait
// or get the replay; nobody gets a second charge.
func TestHTTPConcurrentSameKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Slow, Count: 1, Delay: 300 * time.Millisecond})
	second := e.newGateway(e.lookupEnv)
	front2 := httptestServer(t, second)
	var wg sync.WaitGroup
	statuses := make([]int, 32)
	gate := make(chan struct{})
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			base := e.front.URL
			if i%2 == 1 {
				base = front2
			}
			statuses[i] = postTo(t, base, "/payments", "k-race", payment).status
		}()
	}
	close(gate)
	wg.Wait()
	created := 0
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
		default:
			t.Fatalf("statuses %v", statuses)
		}
	}
	// The winner may have gone through the other gateway, whose record of
	// the answer follows in the background: until it lands, this gateway
	// says "in progress" (409 with Retry-After), as a client would see.
	var final response
	await.Until(t, "the replay through the first gateway", func() bool {
		final = e.post("/payments", "k-race", payment)
		if final.status == http.StatusConflict {
			if ra, err := strconv.Atoi(final.header.Get("Retry-After")); err != nil || ra < 1 || ra > 2 {
				t.Fatalf("409 without a Retry-After of 1-2 s: %q", final.header.Get("Retry-After"))
			}
			return false
		}
		return true
	})
	if created < 1 || final.status != http.StatusCreated || final.header.Get("Idempotent-Replayed") != "true" || e.allEffects() != 1 {
		t.Fatalf("created %d, final %d, effects %d (statuses %v)", created, final.status, e.allEffects(), statuses)
	}
	t.Logf("32 callers: %d answered 201, %d told to wait (409)", created, 32-created)
}

func httptestServer(t *testing.T, h http.Handler) string {
	s := newServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
