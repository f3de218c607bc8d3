package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// stripe-node, the Stripe API's own Node client (npm package stripe),
// against opjournal-gateway: a client nobody here wrote, which sends form
// bodies, sets its own Idempotency-Key and retries on its own on 409, 5xx
// and lost connections. Its node project is harness/e2e/stripe-node (installed by
// scripts/deps.sh with npm ci from its lock file).

// chargePolicy adds a Stripe-style charge action to the test policy: the
// gateway's route POST /v1/charges, the test provider's charges (which do
// not deduplicate) behind it, found again by the Idempotency-Key the
// gateway forwards (the operation key).
const chargePolicy = `  create_charge:
    operation_key: required
    lease_seconds: 10
    retry:
      reuse_operation_key: true
      on_timeout: reconcile_before_retry
    terminal_states: [succeeded, failed_final]
    unknown_after_seconds: 900
    on_unresolved: require_human_review
    retention: 720h
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 2s
      visibility_lag: 0s
      in_flight_window: 3s
      definitive_absence: true
      verifier:
        http:
          url: "${PROVIDER_URL:-http://127.0.0.1:8099}/v1/charges?idempotency_key={operation_key}"
          timeout: 5s
          list: /data
          found: /id
          completed: /status
          completed_values: [succeeded]
          external_id: /id
    gateway:
      http:
        route: POST /v1/charges
        upstream: "${PROVIDER_URL:-http://127.0.0.1:8099}"
        forward_key_header: Idempotency-Key
        external_id: /id
`

// stripeCall is one line charge.mjs prints.
type stripeCall struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	ID      string `json:"id"`
	Status  any    `json:"status"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// runStripeNode runs charge.mjs against the gateway with intents.
func runStripeNode(t *testing.T, gatewayURL, token string, intents ...map[string]any) []stripeCall {
	t.Helper()
	dir, err := filepath.Abs("stripe-node")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "stripe")); err != nil {
		t.Fatalf("stripe-node is not installed: run scripts/deps.sh (npm ci in harness/e2e/stripe-node): %v", err)
	}
	arg, _ := json.Marshal(intents)
	cmd := exec.CommandContext(ctxFor(t), "node", "charge.mjs", string(arg))
	cmd.Dir = dir
	cmd.Env = childEnv([]string{"GATEWAY_URL=" + gatewayURL, "STRIPE_API_KEY=" + token})
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node charge.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var calls []stripeCall
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		var c stripeCall
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("charge.mjs printed %q: %v", line, err)
		}
		calls = append(calls, c)
	}
	return calls
}

// TestStripeNodeOneChargePerIntent: stripe-node creates charges through
// the gateway, with its own key and with one it makes itself; the
// provider loses the answer after charging (a dropped connection, a
// 500); stripe-node retries by itself, is told to wait (409) until the
// reconciler has found the charge, then gets the charge. The provider,
// which does not deduplicate, holds exactly one charge per intent.
func TestStripeNodeOneChargePerIntent(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{policy: testPolicy() + chargePolicy, callers: true})
	gw, _ := s.startGateway(t, "gateway-stripe")
	token := s.callers.AgentA

	// A plain charge, sent twice with one idempotency key: one charge,
	// the second answer is the first's replay.
	calls := runStripeNode(t, gw, token, map[string]any{"name": "plain", "key": "intent-plain", "times": 2})
	if len(calls) != 2 || !calls[0].OK || !calls[1].OK || calls[0].ID == "" || calls[1].ID != calls[0].ID {
		t.Fatalf("plain: %+v", calls)
	}
	intents := 1
	ids := map[string]bool{calls[0].ID: true}
	for _, tc := range []struct {
		name  string
		fault fakeprovider.FaultKind
		key   string
	}{
		{"dropped", fakeprovider.DropConnectionAfterCommit, "intent-dropped"},
		{"server-error-own-key", fakeprovider.ErrorAfterCommit, ""},
		{"dropped-own-key", fakeprovider.DropConnectionAfterCommit, ""},
	} {
		s.fault(t, fakeprovider.Fault{Path: "/v1/charges", Kind: tc.fault, Count: 1})
		intent := map[string]any{"name": tc.name}
		if tc.key != "" {
			intent["key"] = tc.key
		}
		start := time.Now()
		calls := runStripeNode(t, gw, token, intent)
		if len(calls) != 1 || !calls[0].OK || !strings.HasPrefix(calls[0].ID, "ch_") || ids[calls[0].ID] {
			t.Fatalf("%s: %+v", tc.name, calls)
		}
		ids[calls[0].ID] = true
		intents++
		t.Logf("%s (%s): stripe-node got %s after %s of its own retries", tc.name, tc.fault, calls[0].ID, time.Since(start).Round(time.Millisecond))
	}
	eff, err := s.provider.Effects(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	charges := 0
	for k, n := range eff.Effects {
		if !strings.HasPrefix(k, "charge:") {
			continue
		}
		charges += n
		if n != 1 {
			t.Errorf("%s: %d charges, want 1", k, n)
		}
	}
	if charges != intents {
		t.Fatalf("%d charges for %d intents: %v", charges, intents, eff.Effects)
	}
}
