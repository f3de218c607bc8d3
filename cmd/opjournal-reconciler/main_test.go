package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/testserver"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

// binary is the built opjournal-reconciler.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "opjournal-reconciler-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "opjournal-reconciler")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// world is a journal and a provider that holds the effect of every key it
// is told about.
type world struct {
	j          *testserver.Journal
	policyPath string
	mu         sync.Mutex
	effects    map[string]string // key → payment id
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{effects: map[string]string{}}
	prov := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(rw, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.mu.Lock()
		id, ok := w.effects[r.URL.Query().Get("idempotency_key")]
		w.mu.Unlock()
		if !ok {
			fmt.Fprint(rw, `{"data":[]}`)
			return
		}
		fmt.Fprintf(rw, `{"data":[{"id":%q,"status":"succeeded"}]}`, id)
	}))
	t.Cleanup(prov.Close)
	doc := `actions:
  create_payment:
    integer_fields: [amount_minor]
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 1m
      visibility_lag: 2s
      in_flight_window: 1s
      definitive_absence: true
      verifier:
        http:
          url: "${PROVIDER_URL:-http://127.0.0.1:1}/payments?idempotency_key={operation_key}"
          headers: {Authorization: "Bearer ${PROVIDER_TOKEN}"}
          list: /data
          found: /id
          completed: /status
          completed_values: [succeeded]
          external_id: /id
  create_ticket:
    retry: {on_timeout: retry_same_key}
`
	w.policyPath = filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(w.policyPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(w.policyPath)
	if err != nil {
		t.Fatal(err)
	}
	w.j = testserver.Start(t, pol)
	t.Setenv("PROVIDER_URL", prov.URL)
	t.Setenv("PROVIDER_TOKEN", "tok")
	return w
}

// unknownPayment registers a payment whose call timed out after the
// provider charged the card.
func (w *world) unknownPayment(t *testing.T, key, paymentID string) {
	t.Helper()
	ctx := context.Background()
	payload, _ := structpb.NewStruct(map[string]any{"amount_minor": 490000, "currency": "RUB"})
	reg, err := w.j.Client.Register(ctx, &opjournalv1.RegisterRequest{
		OperationKey: key, ActionType: "create_payment", Payload: payload, Claim: &opjournalv1.ClaimOptions{WorkerId: "agent"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.j.Client.MarkUnknown(ctx, &opjournalv1.MarkUnknownRequest{OperationKey: key, Attempt: reg.GetAttempt(), ErrorCode: "timeout"}); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.effects[key] = paymentID
	w.mu.Unlock()
}

func (w *world) status(t *testing.T, key string) *opjournalv1.Operation {
	t.Helper()
	resp, err := w.j.Client.Lookup(context.Background(), &opjournalv1.LookupRequest{OperationKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOperation()
}

func TestOnce(t *testing.T) {
	w := newWorld(t)
	w.unknownPayment(t, "payment:order-817:intent-01", "pay_000001")

	cmd := exec.Command(binary, "--once", "--policy", w.policyPath, "--id", "rec-bin", "--log-format", "text")
	// The journal's address comes from the environment, like every flag.
	cmd.Env = append(os.Environ(), "OPJOURNAL_JOURNAL_ADDR="+w.j.GRPCAddr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("--once: %v\n%s", err, stderr.String())
	}
	if got, want := strings.TrimSpace(stdout.String()), "checked=1 succeeded=1 released=0 rechecked=0 escalated=0 skipped=0 deferred=0 errors=0"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	logs := stderr.String()
	for _, want := range []string{
		`msg=reconciling journal_addr=` + w.j.GRPCAddr + ` id=rec-bin actions_with_verifiers=[create_payment] actions_without_verifiers=[create_ticket]`,
		`msg="reconcile decision" key=payment:order-817:intent-01 action=create_payment decision=succeeded attempt=1`,
		`msg="reconcile pass" checked=1 succeeded=1`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "tok") && strings.Contains(logs, "Bearer") {
		t.Errorf("the logs hold the token:\n%s", logs)
	}
	op := w.status(t, "payment:order-817:intent-01")
	if op.GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED || op.GetExternalId() != "pay_000001" {
		t.Errorf("operation = %v", op)
	}
}

// TestOnceJSON: with -o json the counts of --once are one JSON object,
// and the command line's flags win over their variables.
func TestOnceJSON(t *testing.T) {
	w := newWorld(t)
	w.unknownPayment(t, "payment:order-818:intent-01", "pay_000002")
	cmd := exec.Command(binary, "--once", "-o", "json", "--policy", w.policyPath, "--journal-addr", w.j.GRPCAddr)
	// A flag on the command line wins over its variable.
	cmd.Env = append(os.Environ(), "OPJOURNAL_JOURNAL_ADDR=127.0.0.1:1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("--once -o json: %v\n%s", err, stderr.String())
	}
	var got map[string]int
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	if got["checked"] != 1 || got["succeeded"] != 1 || len(got) != 8 {
		t.Errorf("counts = %v", got)
	}
	if op := w.status(t, "payment:order-818:intent-01"); op.GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED {
		t.Errorf("operation = %v", op)
	}
}

func TestRunUntilSIGTERM(t *testing.T) {
	w := newWorld(t)
	cmd := exec.Command(binary, "--journal-addr", w.j.GRPCAddr, "--policy", w.policyPath, "--id", "rec-daemon",
		"--poll-interval", "100ms", "--metrics-addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan map[string]any, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	next := func(msg string) map[string]any {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("the reconciler exited before logging %q", msg)
				}
				if m["msg"] == msg {
					return m
				}
			case <-timeout:
				t.Fatalf("no %q line", msg)
			}
		}
	}
	start := next("reconciling")
	metricsAddr, _ := start["metrics_addr"].(string)
	if metricsAddr == "" {
		t.Fatalf("no metrics address in %v", start)
	}

	// An operation that becomes unknown while the reconciler runs is settled.
	w.unknownPayment(t, "payment:order-900:intent-01", "pay_000900")
	await.Until(t, "the operation to be settled", func() bool {
		return w.status(t, "payment:order-900:intent-01").GetStatus() == opjournalv1.Status_STATUS_SUCCEEDED
	})
	// The journal shows the operation settled as soon as MarkSucceeded
	// commits; the reconciler counts its decision once the answer is back.
	// So the metrics are read until they show it (or 10 s pass).
	wants := []string{
		`opjournal_reconciler_decisions_total{action="create_payment",decision="succeeded"} 1`,
		"opjournal_reconciler_passes_total ",
		"go_goroutines ",
	}
	var body []byte
	await.Until(t, "the decision to be counted", func() bool {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return bytes.Contains(body, []byte(wants[0]))
	})
	for _, want := range wants {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("stopped")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after SIGTERM")
	}
}

func TestBadInvocations(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("actions:\n  a:\n    reconcile:\n      verifier:\n        http:\n          url: \"http://p/x\"\n          external_id: /id\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  string
		code int
		want string
	}{
		{[]string{"--no-such-flag"}, "", 2, "unknown flag: --no-such-flag"},
		{[]string{"--policy", bad}, "", 2, bad + ":6: actions.a.reconcile.verifier.http.url: must contain {operation_key}"},
		{[]string{"--concurrency", "0"}, "", 2, "--concurrency must be positive"},
		{[]string{"--log-format", "xml"}, "", 2, `--log-format: "xml" is not json or text`},
		{nil, "OPJOURNAL_POLL_INTERVAL=soon", 2, `OPJOURNAL_POLL_INTERVAL="soon"`},
		{[]string{"extra"}, "", 2, "unexpected arguments"},
		// Nothing listens on port 1: the pass cannot list operations.
		{[]string{"--once", "--journal-addr", "127.0.0.1:1"}, "", 1, "list operations due for a check"},
	} {
		cmd := exec.Command(binary, tc.args...)
		cmd.Env = os.Environ()
		if tc.env != "" {
			cmd.Env = append(cmd.Env, tc.env)
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v %s: %v\n%s\nwant exit %d and %q", tc.args, tc.env, err, out, tc.code, tc.want)
		}
	}
	out, err := exec.Command(binary, "-h").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-journal-addr") {
		t.Errorf("-h: %v\n%s", err, out)
	}
}
