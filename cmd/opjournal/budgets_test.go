package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/cli"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server/auth"
)

// The budgets test's tokens: two tenants.
const (
	budgetsOperA  = "tok-budgets-oper-a-61c2"
	budgetsReconA = "tok-budgets-recon-a-0d9e"
	budgetsAgentA = "tok-budgets-agent-a-7b14"
	budgetsAgentB = "tok-budgets-agent-b-3f58"
	budgetsMetrA  = "tok-budgets-metrics-a-c7a0"
)

const budgetsPolicy = `actions:
  create_payment:
    integer_fields: [amount_minor]
    budgets:
      - {name: daily-payments, count: true, per: [principal], window: 24h, limit: 5, on_exceed: reject}
      - {name: daily-spend, sum: amount_minor, per: [principal, currency], window: 24h, limit: 500000, on_exceed: approval}
  send_email:
    budgets:
      - {name: weekly-mail, count: true, window: 168h, limit: 1000, on_exceed: reject}
`

// budgetsJournal starts a real journal (the server's code, in-process)
// with budgetsPolicy and the tokens of both tenants, and returns its gRPC
// address.
func budgetsJournal(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("tokens:\n")
	for _, tk := range []struct{ tok, name, tenant, role string }{
		{budgetsOperA, "alice", "team-a", "operator"}, {budgetsReconA, "reconciler-a", "team-a", "reconciler"},
		{budgetsAgentA, "agent-a", "team-a", "agent"}, {budgetsAgentB, "agent-b", "team-b", "agent"},
		{budgetsMetrA, "scraper", "team-a", "metrics"},
	} {
		fmt.Fprintf(&b, "  - name: %s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n", tk.name, auth.Digest(tk.tok), tk.tenant, tk.role)
	}
	a, err := auth.Parse([]byte(b.String()), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse([]byte(budgetsPolicy), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return testserver.Start(t, pol, testserver.WithAuth(a, "")).GRPCAddr
}

// payAs registers a payment as the agent of token.
func payAs(t *testing.T, addr, token, key string, amount int, currency string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload, _ := structpb.NewStruct(map[string]any{"amount_minor": amount, "currency": currency})
	if _, err := pb.NewJournalServiceClient(client.BearerConn(conn, token)).Register(context.Background(),
		&pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "w"}}); err != nil {
		t.Fatalf("register %s: %v", key, err)
	}
}

// tokenFile writes token into a file for --token-file.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCLI runs the opjournal command line and returns its exit status (as
// cli.Exit would end it), stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	code := 0
	switch {
	case err == nil:
	case cli.IsUsage(err):
		code = 2
		stderr.WriteString(err.Error())
	default:
		code = 1
		stderr.WriteString(err.Error())
	}
	return code, stdout.String(), stderr.String()
}

// TestBudgetsListsTheTenantsCounters: `opjournal budgets` prints every
// counter of the caller's tenant as a table (scope in words, used of the
// limit, reserved by unknown, operations, window), or as JSON lines (the
// REST objects); --action and --budget filter; another tenant's counters
// never show.
func TestBudgetsListsTheTenantsCounters(t *testing.T) {
	addr := budgetsJournal(t)
	payAs(t, addr, budgetsAgentA, "pay-1", 200000, "EUR")
	payAs(t, addr, budgetsAgentA, "pay-2", 250000, "EUR")
	payAs(t, addr, budgetsAgentA, "pay-3", 999, "USD")
	payAs(t, addr, budgetsAgentB, "pay-b", 7777, "GBP")
	oper := tokenFile(t, budgetsOperA)

	code, out, errOut := runCLI(t, "budgets", "--journal-addr", addr, "--token-file", oper)
	if code != 0 {
		t.Fatalf("budgets: exit %d\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fields := func(i int) []string { return strings.Fields(lines[i]) }
	if len(lines) != 5 || strings.Join(fields(0), " ") != "ACTION BUDGET SCOPE USED LIMIT USE RESERVED_UNKNOWN OPERATIONS WINDOW COUNTS ON_EXCEED" {
		t.Fatalf("budgets:\n%s", out)
	}
	for i, want := range []string{
		"create_payment daily-payments principal=agent-a 3 5 60% 3 3 24h count reject",
		"create_payment daily-spend payload.currency=EUR principal=agent-a 450000 500000 90% 450000 2 24h sum of amount_minor approval",
		"create_payment daily-spend payload.currency=USD principal=agent-a 999 500000 <1% 999 1 24h sum of amount_minor approval",
		"send_email weekly-mail - 0 1000 0% 0 0 7d count reject",
	} {
		if got := strings.Join(fields(i+1), " "); got != want {
			t.Errorf("line %d: %q, want %q", i+1, got, want)
		}
	}
	if strings.Contains(out, "GBP") || strings.Contains(out, "agent-b") || strings.Contains(out, "7777") {
		t.Fatalf("team-a's budgets show team-b's:\n%s", out)
	}

	// JSON: one object per counter, as GET /v1/budgets has them.
	code, out, errOut = runCLI(t, "budgets", "--budget", "daily-spend", "-o", "json", "--journal-addr", addr, "--token-file", oper)
	if code != 0 {
		t.Fatalf("budgets -o json: exit %d\n%s", code, errOut)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"used":"450000"`) || !strings.Contains(lines[0], `"scope":"{\"payload.currency\":\"EUR\",\"principal\":\"agent-a\"}"`) {
		t.Fatalf("budgets -o json:\n%s", out)
	}
	for _, line := range lines {
		var u pb.BudgetUsage
		if err := protojson.Unmarshal([]byte(line), &u); err != nil || u.GetBudget() != "daily-spend" || u.GetLimit() != 500000 || u.GetWindowSeconds() != 86400 {
			t.Fatalf("a JSON line is not a BudgetUsage of daily-spend: %s (%v)", line, err)
		}
	}
	// Unused counters show their zeros in JSON too.
	if _, out, _ := runCLI(t, "budgets", "--action", "send_email", "-o", "json", "--journal-addr", addr, "--token-file", oper); !strings.Contains(out, `"used":"0"`) || strings.Count(out, "\n") != 1 {
		t.Fatalf("budgets --action send_email -o json:\n%s", out)
	}
	// Filters, flags anywhere, the connection from the environment's
	// variables as for `opjournal ops`.
	t.Setenv("OPJOURNAL_JOURNAL_ADDR", addr)
	t.Setenv("OPJOURNAL_TOKEN", budgetsReconA)
	code, out, errOut = runCLI(t, "budgets", "--action=create_payment", "--budget", "daily-payments")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "principal=agent-a") || strings.Contains(out, "daily-spend") {
		t.Fatalf("a reconciler's budgets --action --budget: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestBudgetsRefusalsNameTheFlag: a malformed line is a usage error (exit
// 2) naming the flag, before any call; the journal's refusals (an unknown
// action, a token without ListBudgets' roles) and an unknown budget exit 1
// naming the flag or the code.
func TestBudgetsRefusalsNameTheFlag(t *testing.T) {
	addr := budgetsJournal(t)
	oper := tokenFile(t, budgetsOperA)
	for _, c := range []struct {
		args []string
		code int
		says []string
	}{
		{[]string{"--budget", "Daily Spend"}, 2, []string{`--budget: "Daily Spend" is not a budget name`}},
		{[]string{"--output", "yaml"}, 2, []string{"output", "yaml"}},
		{[]string{"extra"}, 2, []string{"extra"}},
		{[]string{"--timeout", "soon"}, 2, []string{"--timeout", "soon"}},
		{[]string{"--action", "nope"}, 1, []string{"budgets: UNKNOWN_ACTION: --action:", `"nope"`}},
		{[]string{"--action", strings.Repeat("a", 500)}, 1, []string{"budgets: INVALID_ARGUMENT: --action:"}},
		{[]string{"--budget", "nope"}, 1, []string{"budgets: ", "--budget: ", `"nope"`}},
		{[]string{"--action", "send_email", "--budget", "daily-spend"}, 1, []string{"budgets: ", "--budget: ", `"daily-spend"`, "send_email"}},
	} {
		code, out, errOut := runCLI(t, append([]string{"budgets", "--journal-addr", addr, "--token-file", oper}, c.args...)...)
		if code != c.code || out != "" {
			t.Errorf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.args, code, c.code, out, errOut)
		}
		for _, s := range c.says {
			if !strings.Contains(errOut, s) {
				t.Errorf("%v: stderr does not say %q:\n%s", c.args, s, errOut)
			}
		}
	}
	// Tokens that may not read the counters: an agent's, a metrics
	// scraper's, none at all (an authenticated journal).
	for _, tok := range []string{budgetsAgentA, budgetsMetrA, ""} {
		args := []string{"budgets", "--journal-addr", addr}
		if tok != "" {
			args = append(args, "--token-file", tokenFile(t, tok))
		}
		t.Setenv("OPJOURNAL_TOKEN", "")
		code, out, errOut := runCLI(t, args...)
		if code != 1 || out != "" || !strings.Contains(errOut, "budgets: ") || !(strings.Contains(errOut, "PERMISSION_DENIED") || strings.Contains(errOut, "UNAUTHENTICATED")) {
			t.Errorf("budgets with token %q: exit %d\nstdout:\n%s\nstderr:\n%s", tok, code, out, errOut)
		}
	}
	// --help has examples, exit 0.
	if code, out, _ := runCLI(t, "budgets", "--help"); code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "opjournal budgets --action create_payment") {
		t.Errorf("budgets --help: exit %d\n%s", code, out)
	}
}
