package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// A client that gives up on a call the gateway has sent upstream does not
// make the gateway give up: the call finishes within its lease, its real
// answer is recorded, and the client's retry replays it.

// slowCharge makes the provider take delay over the next payment, which
// it stores whether or not anyone still waits.
func (e *env) slowCharge(delay time.Duration) {
	e.t.Helper()
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Slow, Count: 1, Delay: delay})
}

// postImpatient sends a payment through the HTTP door and gives up after
// patience; it fails the test if the answer came anyway.
func (e *env) postImpatient(key string, body any, patience time.Duration) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.front.URL+"/payments", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	res, err := (&http.Client{Timeout: patience}).Do(req)
	if err == nil {
		res.Body.Close()
		e.t.Fatalf("the impatient client got an answer (%d); the provider was meant to be slower", res.StatusCode)
	}
}

// awaitCharge waits until the provider holds the effect under key.
func (e *env) awaitCharge(key string) {
	e.t.Helper()
	await.Within(e.t, 10*time.Second, "the provider to store the slow payment", func() bool { return e.effects(key) > 0 })
}

// TestHTTPClientGivesUpCallFinishes: the client's timeout comes before the
// provider's answer; the gateway's call goes on, is recorded succeeded,
// and the retry with the same key gets the provider's answer, replayed.
func TestHTTPClientGivesUpCallFinishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.slowCharge(time.Second)
	body := map[string]any{"order_id": "d-1", "amount_minor": 100, "currency": "RUB"}
	e.postImpatient("k-detached", body, 200*time.Millisecond)
	key := "http:create_payment:" + scopeOf("agent-a") + ":k-detached"
	e.awaitCharge(key)
	var again response
	await.Within(t, 10*time.Second, "the retry to be answered from the record", func() bool {
		again = e.post("/payments", "k-detached", body)
		return again.status != http.StatusConflict
	})
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %s (replayed %q)", again.status, again.body, again.header.Get("Idempotent-Replayed"))
	}
	if id := again.json(t)["id"]; id != "pay_000001" || e.effects(key) != 1 || e.allEffects() != 1 {
		t.Fatalf("replayed id %v, payments under the key %d (total %d), want pay_000001 and 1", id, e.effects(key), e.allEffects())
	}
}

// TestMCPClientGivesUpCallFinishes: the same through the MCP door: the
// model's client cancels the tool call (notifications/cancelled), the
// upstream call finishes, and the retry gets the tool's real result.
func TestMCPClientGivesUpCallFinishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	cs := e.mcpClient("")
	e.slowCharge(time.Second)
	args := map[string]any{"order_id": "d-2", "amount_minor": 100, "currency": "RUB"}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_payment", Arguments: args})
	cancel()
	if err == nil {
		t.Fatal("the impatient call was answered; the provider was meant to be slower")
	}
	var again *mcp.CallToolResult
	await.Within(t, 10*time.Second, "the retry to be answered from the record", func() bool {
		again = call(t, cs, "create_payment", args)
		return !again.IsError
	})
	key, replayed := meta(t, again)
	sc, _ := again.StructuredContent.(map[string]any)
	if !replayed || sc["id"] != "pay_000001" || sc["order_id"] != "d-2" {
		t.Fatalf("retry: %q %+v, replayed %v", text(again), again.StructuredContent, replayed)
	}
	if e.effects(key) != 1 || e.allEffects() != 1 {
		t.Fatalf("payments under %s: %d (total %d), want 1", key, e.effects(key), e.allEffects())
	}
}

// TestWaitWaitsForDetachedCalls: once Wait returns, a call whose client
// gave up is finished and recorded: the very next retry is its replay.
func TestWaitWaitsForDetachedCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.slowCharge(time.Second)
	body := map[string]any{"order_id": "d-3", "amount_minor": 100, "currency": "RUB"}
	e.postImpatient("k-wait", body, 200*time.Millisecond)
	e.gw.Wait()
	if n := e.effects("http:create_payment:" + scopeOf("agent-a") + ":k-wait"); n != 1 {
		t.Fatalf("after Wait the provider holds %d payments under the key, want 1", n)
	}
	again := e.post("/payments", "k-wait", body)
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry after Wait: %d %s", again.status, again.body)
	}
}

// TestShutdownCancelsDetachedCallsAtDeadline: a shutdown that cannot wait
// any longer cancels the calls still running, which are recorded as
// unknown (for the reconciler), and says so.
func TestShutdownCancelsDetachedCallsAtDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	e.slowCharge(5 * time.Second)
	body := map[string]any{"order_id": "d-4", "amount_minor": 100, "currency": "RUB"}
	e.postImpatient("k-shutdown", body, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.gw.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the deadline's error", err)
	}
	// The call was cancelled and recorded as unknown: another gateway on
	// the journal is told so. This one sends nothing new any more.
	other := httptest.NewServer(e.newGateway(e.lookupEnv))
	defer other.Close()
	wantProblem(t, postTo(t, other.URL, "/payments", "k-shutdown", body), http.StatusConflict, "outcome-unknown")
	wantProblem(t, e.post("/payments", "k-shutdown", body), http.StatusServiceUnavailable, "journal-unavailable")
	// Nothing was left running: a second Shutdown has nothing to wait for.
	if err := e.gw.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
