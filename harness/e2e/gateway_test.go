package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/harness/demo"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/procs"
)

// opjournal-gateway as its own process: two of them on one journal, the
// test provider (with its MCP server) behind them, the reconciler beside.

// startGateway runs an opjournal-gateway of the stack with both doors.
func (s *stack) startGateway(t *testing.T, name string) (httpURL, mcpURL string) {
	t.Helper()
	g := s.start(procs.Spec{Name: name, Path: filepath.Join(binDir, "opjournal-gateway"), Ready: "serving",
		Env: []string{"PROVIDER_URL=" + s.providerURL},
		Args: append([]string{"--journal-addr", s.grpcAddr, "--http-addr", "127.0.0.1:0", "--mcp-addr", "127.0.0.1:0",
			"--mcp-upstream", s.providerURL + "/mcp", "--worker-id", name}, s.policyArgs...)})
	return "http://" + g.Field("http_addr"), "http://" + g.Field("mcp_addr") + "/mcp"
}

// TestGatewayDemo runs `make demo-gateway`'s scenarios against real
// processes on both stores: the seven steps of docs/spec.md through the HTTP
// door of one gateway, the payment as an MCP tool call through another.
func TestGatewayDemo(t *testing.T) {
	t.Parallel()
	// The gateway waits for a provider whose agent gave up until the
	// lease ends, heartbeats included (then records unknown): a 5 s lease
	// and max_attempt_seconds instead of the shipped 30 s and 300 s keep
	// the demo's lost answers quick.
	pol := strings.Replace(testPolicy(), "  create_payment:\n    operation_key: required\n    lease_seconds: 30\n",
		"  create_payment:\n    operation_key: required\n    lease_seconds: 5\n    max_attempt_seconds: 5\n", 1)
	if pol == testPolicy() {
		t.Fatal("the policy edit did not apply")
	}
	forEachStore(t, func(t *testing.T, dbURL string) {
		s := startStack(t, stackOpts{dbURL: dbURL, policy: pol, callers: true})
		h1, _ := s.startGateway(t, "gateway-1")
		_, m2 := s.startGateway(t, "gateway-2")
		var out strings.Builder
		err := demo.RunGateway(ctxFor(t), demo.GatewayEnv{HTTPURL: h1, MCPURL: m2, Callers: s.callers, RPC: s.rpc, Provider: s.provider, Out: &out})
		t.Log("\n" + out.String())
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestTwoGatewaysOneKey: 32 callers with one key, half through each of two
// gateway processes on one journal: exactly one effect at the provider.
func TestTwoGatewaysOneKey(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{callers: true})
	h1, _ := s.startGateway(t, "gateway-1")
	h2, _ := s.startGateway(t, "gateway-2")
	s.fault(t, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Slow, Count: 1, Delay: 500 * time.Millisecond})
	body, _ := json.Marshal(map[string]any{"order_id": "900", "amount_minor": 100, "currency": "RUB"})
	var wg sync.WaitGroup
	codes := make([]int, 32)
	gate := make(chan struct{})
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			base := []string{h1, h2}[i%2]
			req, _ := http.NewRequest(http.MethodPost, base+"/payments", bytes.NewReader(body))
			req.Header.Set("Idempotency-Key", "k-two-gateways")
			req.Header.Set("Content-Type", "application/json")
			// Half with agent A's token, half with its rotated one: one caller.
			req.Header.Set("Authorization", "Bearer "+[]string{s.callers.AgentA, s.callers.AgentARotated}[i/2%2])
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			codes[i] = res.StatusCode
		}()
	}
	close(gate)
	wg.Wait()
	created := 0
	for _, c := range codes {
		switch c {
		case http.StatusCreated:
			created++
		case http.StatusConflict:
		default:
			t.Fatalf("codes %v", codes)
		}
	}
	key := "http:create_payment:" + s.callers.ScopeA() + ":k-two-gateways"
	if n := s.effects(t, key); n != 1 || created < 1 {
		t.Fatalf("%d payments, %d answered 201 (codes %v)", n, created, codes)
	}
	t.Logf("two gateways, 32 callers, one key: %d × 201, %d × 409, 1 payment", created, 32-created)
}

// TestGatewayCommandLine: bad flags and a bad policy are refused at start
// with exit status 2 and a message that says what is wrong.
func TestGatewayCommandLine(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("actions:\n  a:\n    gateway: {http: {route: GET /x, upstream: \"http://x\"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		words string
	}{
		{nil, "nothing to serve"},
		{[]string{"--mcp-addr", "127.0.0.1:0"}, "needs at least one --mcp-upstream"},
		{[]string{"--http-addr", "127.0.0.1:0", "--policy", bad}, "bad.yaml:3: actions.a.gateway.http.route"},
		{[]string{"--http-addr", "127.0.0.1:0", "--http-upstream", "ftp://x"}, "the default upstream"},
		{[]string{"--mcp-stdio", "--mcp-upstream", "gopher://x"}, "give an http(s):// URL or cmd:COMMAND"},
		{[]string{"--http-addr", "0.0.0.0:0", "--anonymous"}, "--anonymous serves loopback addresses only"},
		{[]string{"--http-addr", "127.0.0.1:0", "--upstream-header", "no colon"}, "--upstream-header: give 'Name: value'"},
		{[]string{"--http-addr", "127.0.0.1:0", "--rate-limit", "-1"}, "must not be negative"},
	} {
		cmd := exec.Command(filepath.Join(binDir, "opjournal-gateway"), tc.args...)
		cmd.Env = childEnv(nil)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), tc.words) {
			t.Errorf("%v: %v\n%s\nwant exit 2 and %q", tc.args, err, out, tc.words)
		}
	}
}

// TestGatewayRefusesAJournalWithoutAuthentication: a gateway that would
// identify callers by their journal credentials refuses to start in
// front of a journal that authenticates nobody (every caller would share
// one key space); --anonymous on loopback is the explicit choice.
func TestGatewayRefusesAJournalWithoutAuthentication(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	cmd := exec.Command(filepath.Join(binDir, "opjournal-gateway"), append([]string{"--journal-addr", s.grpcAddr, "--http-addr", "127.0.0.1:0"}, s.policyArgs...)...)
	cmd.Env = childEnv([]string{"PROVIDER_URL=" + s.providerURL})
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "does not authenticate callers") {
		t.Fatalf("%v\n%s\nwant exit 2: the journal does not authenticate callers", err, out)
	}
	g := s.start(procs.Spec{Name: "anon-gateway", Path: filepath.Join(binDir, "opjournal-gateway"), Ready: "serving",
		Env:  []string{"PROVIDER_URL=" + s.providerURL},
		Args: append([]string{"--journal-addr", s.grpcAddr, "--http-addr", "127.0.0.1:0", "--anonymous"}, s.policyArgs...)})
	body, _ := json.Marshal(map[string]any{"order_id": "930", "amount_minor": 100, "currency": "RUB"})
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.Field("http_addr")+"/payments", bytes.NewReader(body))
	req.Header.Set("Idempotency-Key", "anon-1")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || res.Header.Get("Opjournal-Operation-Key") != "http:create_payment:anon:anon-1" {
		t.Fatalf("anonymous: %d %v", res.StatusCode, res.Header)
	}
	// DNS rebinding: a page on another name that resolves to 127.0.0.1
	// reaches the listener with its own Host, and is refused.
	req, _ = http.NewRequest(http.MethodPost, "http://"+g.Field("http_addr")+"/payments", bytes.NewReader(body))
	req.Host = "attacker.example:80"
	req.Header.Set("Idempotency-Key", "anon-2")
	req.Header.Set("Content-Type", "application/json")
	if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest || s.effects(t, "http:create_payment:anon:anon-2") != 0 {
		t.Fatalf("a rebound Host: %d", res.StatusCode)
	}
}

// TestGatewayMCPStdio: a local agent runs the gateway as its MCP server
// over stdio (the SDK's command transport); one payment per intent.
func TestGatewayMCPStdio(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	cmd := exec.Command(filepath.Join(binDir, "opjournal-gateway"), append([]string{"--mcp-stdio", "--journal-addr", s.grpcAddr,
		"--mcp-upstream", s.providerURL + "/mcp", "--log-level", "warn"}, s.policyArgs...)...)
	cmd.Env = childEnv([]string{"PROVIDER_URL=" + s.providerURL})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "local-agent", Version: "1"}, nil).Connect(ctxFor(t), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"order_id": "919", "amount_minor": 100, "currency": "RUB"}
	var key string
	for i := range 2 {
		res, err := cs.CallTool(ctxFor(t), &mcp.CallToolParams{Name: "create_payment", Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
		m, _ := res.Meta["opjournal/operation"].(map[string]any)
		key, _ = m["operation_key"].(string)
		if replayed, _ := m["replayed"].(bool); replayed != (i == 1) {
			t.Fatalf("call %d: replayed %v", i, m["replayed"])
		}
	}
	if !strings.HasPrefix(key, "mcp:create_payment:stdio:f:") || s.effects(t, key) != 1 {
		t.Fatalf("key %q, payments %d", key, s.effects(t, key))
	}
}
