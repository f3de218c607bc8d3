package e2e

import (
	"context"
	"fmt"
	"github.com/opjournal/opjournal/protocol/policy"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/harness/demo"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider/agenttool"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The safety loop with real processes: the journal, the test provider and
// one or two reconcilers, each its own binary, talking over the wire.

// stack is a running journal + provider + reconcilers.
type stack struct {
	providerURL string
	grpcAddr    string
	journalURL  string // the journal's REST base URL (http://host:port)
	rpc         pb.JournalServiceClient
	sdk         *client.Client
	provider    *fakeprovider.ControlClient
	procs       []*procs.Proc
	policyArgs  []string                          // the --policy flag the processes got
	start       func(spec procs.Spec) *procs.Proc // starts one more process of the stack
	callers     demo.GatewayCallers               // with stackOpts.callers
}

type stackOpts struct {
	dbURL       string // default: a fresh SQLite file
	policy      string // YAML; default: the shipped policy with the short windows of testPolicy
	indexLag    string // the provider's search lag
	reconcilers int    // default 1
	// callers runs the journal with the gateway scenarios' tokens file
	// (demo.GatewayCallers): the stack's rpc reads as their admin, the
	// reconcilers and sdk call with their tokens.
	callers bool
}

// testPolicy is the shipped policy with an in_flight_window of 3 s
// instead of 2 minutes: the test provider's faults hold a request for at
// most 2 s, and a test cannot wait the real window before a release.
func testPolicy() string {
	return strings.ReplaceAll(string(policy.DefaultYAML()), "in_flight_window: 2m", "in_flight_window: 3s")
}

func startStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	if o.dbURL == "" {
		o.dbURL = sqliteURL(t)
	}
	if o.reconcilers == 0 {
		o.reconcilers = 1
	}
	if o.indexLag == "" {
		o.indexLag = "0s"
	}
	s := &stack{policyArgs: nil}
	ctx := context.Background()
	start := func(spec procs.Spec) *procs.Proc {
		t.Helper()
		p, err := procs.Start(ctx, spec, startTimeout)
		if err != nil {
			t.Fatal(err)
		}
		s.procs = append(s.procs, p)
		t.Cleanup(func() {
			_ = p.Stop(stopTimeout)
			if t.Failed() {
				t.Logf("%s output:\n%s", p.Name, p.Output())
			}
		})
		return p
	}
	if o.policy == "" {
		o.policy = testPolicy()
	}
	var policyArgs []string
	if o.policy != "" {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, []byte(o.policy), 0o600); err != nil {
			t.Fatal(err)
		}
		policyArgs = []string{"--policy", path}
	}
	prov := start(procs.Spec{Name: "provider", Path: filepath.Join(binDir, "opjournal-fakeprovider"), Ready: "serving",
		Args: []string{"--addr", "127.0.0.1:0", "--index-lag", o.indexLag, "--mcp"}})
	s.providerURL = "http://" + prov.Field("addr")
	serveArgs := append([]string{"serve", "--database-url", o.dbURL, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, policyArgs...)
	var recEnv []string
	if o.callers {
		c, err := demo.WriteGatewayCallers(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		s.callers = c
		serveArgs = append(serveArgs, "--auth-file", c.TokensFile)
		recEnv = []string{"OPJOURNAL_TOKEN=" + c.Reconciler}
	}
	j := start(procs.Spec{Name: "journal", Path: binary, Ready: "serving", Env: []string{testHashKeys}, Args: serveArgs})
	s.grpcAddr = j.Field("grpc_addr")
	s.journalURL = "http://" + j.Field("http_addr")
	s.policyArgs, s.start = policyArgs, start
	for i := range o.reconcilers {
		start(procs.Spec{Name: fmt.Sprintf("reconciler-%d", i+1), Path: filepath.Join(binDir, "opjournal-reconciler"), Ready: "reconciling",
			Env:  append([]string{"PROVIDER_URL=" + s.providerURL}, recEnv...),
			Args: append([]string{"--journal-addr", s.grpcAddr, "--poll-interval", "200ms", "--id", fmt.Sprintf("rec-%d", i+1)}, policyArgs...)})
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.rpc = pb.NewJournalServiceClient(conn)
	s.sdk = client.New(conn, client.WithWorkerID("e2e-agent"))
	if o.callers {
		s.rpc = pb.NewJournalServiceClient(client.BearerConn(conn, s.callers.Admin))
		s.sdk = client.New(conn, client.WithWorkerID("e2e-agent"), client.WithToken(s.callers.AgentA))
	}
	s.provider = fakeprovider.NewControlClient(s.providerURL, &http.Client{Timeout: callTimeout})
	return s
}

func (s *stack) fault(t *testing.T, f fakeprovider.Fault) {
	t.Helper()
	if _, err := s.provider.AddFault(ctxFor(t), f); err != nil {
		t.Fatal(err)
	}
}

func (s *stack) effects(t *testing.T, key string) int {
	t.Helper()
	n, err := s.provider.Count(ctxFor(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (s *stack) history(t *testing.T, key string) []*pb.Event {
	t.Helper()
	res, err := s.rpc.ListEvents(ctxFor(t), &pb.ListEventsRequest{OperationKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetEvents()
}

// waitFor polls key until cond holds (the reconciler works on its own clock).
func (s *stack) waitFor(t *testing.T, key, what string, cond func(*pb.Operation) bool) *pb.Operation {
	t.Helper()
	var op *pb.Operation
	eventually(t, 60*time.Second, func() (bool, string) {
		op = lookup(t, ctxFor(t), s.rpc, key)
		return cond(op), fmt.Sprintf("%s: %s is %s (needs_review=%v, checks=%d)", what, key, op.GetStatus(), op.GetNeedsReview(), op.GetCheckCount())
	})
	return op
}

func payment(key string, amount int) (client.Op, map[string]any) {
	body := map[string]any{"order_id": key, "amount_minor": amount, "currency": "RUB"}
	return client.Op{Key: key, Action: "create_payment", Payload: body}, body
}

// TestDemoScenarios runs `make demo`'s scenarios with its policy (commit-then-timeout →
// reconciled; the email variant through the reference search;
// timeout-before-commit → proven absent after the visibility lag →
// released → retried) against real processes on both stores.
func TestDemoScenarios(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		demoPolicy, err := demo.PolicyYAML()
		if err != nil {
			t.Fatal(err)
		}
		s := startStack(t, stackOpts{dbURL: dbURL, policy: string(demoPolicy)})
		var out strings.Builder
		pol, err := policy.Parse(demoPolicy, "demo policy")
		if err != nil {
			t.Fatal(err)
		}
		err = demo.RunAll(ctxFor(t), demo.Env{Journal: s.sdk, RPC: s.rpc, ProviderURL: s.providerURL, Provider: s.provider, Policy: pol, Out: &out})
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		for _, key := range []string{"payment:order-817:intent-01", "email:order-817:receipt-01", "payment:order-818:intent-01", "payment:order-819:intent-01"} {
			if n := s.effects(t, key); n != 1 {
				t.Errorf("%s: %d effects, want 1", key, n)
			}
		}
	})
}

// TestMakeDemoPassesAsDocumented runs opjournal-demo exactly as `make demo`
// does (its own processes, its own policy): it passes, says which policy it
// runs with and how long a release takes, and narrates the wait for the
// release while it waits. With the shipped policy's 2-minute
// in_flight_window it waited 60 s for a release the journal refuses for
// 2 min 3 s, and failed.
func TestMakeDemoPassesAsDocumented(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "opjournal-demo"), "--bin-dir", binDir)
	cmd.Env = childEnv(nil)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil || !strings.Contains(text, "DEMO PASSED") {
		t.Fatalf("opjournal-demo --bin-dir %s: %v\n%s", binDir, err, out)
	}
	for _, want := range []string{
		"policy: the shipped policy with in_flight_window 5s instead of 2m",
		"released 8s after the attempt ended (visibility_lag 3s + in_flight_window 5s) for create_payment",
		"waiting for the release: the journal allows it 8s after the attempt ended",
		"… pending after ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output has no %q:\n%s", want, out)
		}
	}
	// docs/testing.md shows this output: each of its lines is a line of
	// this run, in order ("…" stands for lines left out; the hash, the
	// times waited and the state while waiting vary from run to run).
	readme, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- demo output: checked by TestMakeDemoPassesAsDocumented -->\n```\n"
	i := strings.Index(string(readme), marker)
	if i < 0 {
		t.Fatalf("docs/testing.md has no %q block", marker)
	}
	block, _, _ := strings.Cut(string(readme)[i+len(marker):], "\n```")
	got := strings.Split(text, "\n")
	at := 0
	for _, line := range strings.Split(block, "\n") {
		if strings.TrimSpace(line) == "…" || strings.TrimSpace(line) == "" {
			continue
		}
		re := demoLinePattern(line)
		found := false
		for ; at < len(got); at++ {
			if re.MatchString(got[at]) {
				found, at = true, at+1
				break
			}
		}
		if !found {
			t.Errorf("docs/testing.md's demo output shows %q, which this run does not print (in that order):\n%s", line, out)
			return
		}
	}
}

// demoLinePattern reads a line of docs/testing.md's demo output as a pattern:
// literal, except for what varies from run to run.
func demoLinePattern(line string) *regexp.Regexp {
	if strings.Contains(line, " waited: ") { // a progress line: its state is the moment's
		return regexp.MustCompile(`^\s*… [0-9]+s waited: .+$`)
	}
	p := regexp.QuoteMeta(line)
	p = regexp.MustCompile(`request_hash=[0-9a-f]+…`).ReplaceAllString(p, `request_hash=[0-9a-f]+…`)
	p = regexp.MustCompile(`request hash [0-9a-f]+…`).ReplaceAllString(p, `request hash [0-9a-f]+…`)
	p = regexp.MustCompile(`after [0-9]+(?:\\\.[0-9]+)?m?s$`).ReplaceAllString(p, `after [0-9.]+m?s`)
	p = regexp.MustCompile(`[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:\\.]+Z`).ReplaceAllString(p, `[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z`)
	return regexp.MustCompile("^" + p + "$")
}

// TestEveryCommittingFaultIsReconciled: whatever way the answer is lost
// after the provider committed, the operation ends succeeded with one effect.
func TestEveryCommittingFaultIsReconciled(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	for _, kind := range []fakeprovider.FaultKind{fakeprovider.CommitThenTimeout, fakeprovider.ErrorAfterCommit, fakeprovider.DropConnectionAfterCommit} {
		t.Run(string(kind), func(t *testing.T) {
			key := "payment:" + string(kind)
			op, body := payment(key, 1000)
			f := fakeprovider.Fault{Path: "/payments", Kind: kind, Count: 1}
			if kind == fakeprovider.CommitThenTimeout {
				f.Delay = 5 * time.Second
			}
			s.fault(t, f)
			var calls atomic.Int32
			fn := agenttool.Post(s.providerURL, "/payments", body, true, 500*time.Millisecond, &calls)
			out, err := s.sdk.Execute(ctxFor(t), op, fn)
			if err != nil {
				t.Fatal(err)
			}
			// Go's transport may itself resend an idempotent POST whose
			// connection dropped, and then get the provider's replay: a
			// success. Anything else must be "verification required".
			if out.Kind != client.VerificationRequired && !(kind == fakeprovider.DropConnectionAfterCommit && out.Kind == client.Succeeded) {
				t.Fatalf("outcome %s (%v)", out.Kind, out.Cause)
			}
			done := s.waitFor(t, key, "reconciled", func(o *pb.Operation) bool { return o.GetStatus() == pb.Status_STATUS_SUCCEEDED })
			if n := s.effects(t, key); n != 1 || calls.Load() != 1 || done.GetExternalId() == "" {
				t.Fatalf("effects=%d calls=%d external_id=%q", n, calls.Load(), done.GetExternalId())
			}
		})
	}
}

// TestLaggingSearchIsNotReadAsAbsence: the provider's search lags 2 s
// (below the policy's 3 s visibility lag). The reconciler finds nothing at
// first, records a check instead of releasing, and confirms the payment
// once it is visible. A release would have let the retry pay twice.
func TestLaggingSearchIsNotReadAsAbsence(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{indexLag: "2s"})
	const key = "payment:lagging-search"
	op, body := payment(key, 2500)
	s.fault(t, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: 5 * time.Second})
	out, err := s.sdk.Execute(ctxFor(t), op, agenttool.Post(s.providerURL, "/payments", body, true, 300*time.Millisecond, nil))
	if err != nil || out.Kind != client.VerificationRequired {
		t.Fatalf("execute: %v %v", out.Kind, err)
	}
	s.waitFor(t, key, "reconciled", func(o *pb.Operation) bool { return o.GetStatus() == pb.Status_STATUS_SUCCEEDED })
	checks := 0
	for _, e := range s.history(t, key) {
		if e.GetToStatus() == pb.Status_STATUS_PENDING && e.GetFromStatus() != pb.Status_STATUS_UNSPECIFIED {
			t.Fatalf("released while the search lagged: %v", e)
		}
		if strings.HasPrefix(e.GetReason(), "checked:") {
			checks++
		}
	}
	if checks == 0 {
		t.Fatal("the reconciler never saw the lagging search miss the payment (no check recorded): the test proved nothing")
	}
	if n := s.effects(t, key); n != 1 {
		t.Fatalf("effects = %d", n)
	}
}

// unresolvablePolicy hands payments to a person 2 s after their outcome
// became unknown if the provider cannot be asked.
const unresolvablePolicy = `
actions:
  create_payment:
    unknown_after_seconds: 2
    integer_fields: [amount_minor]
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 1s
      visibility_lag: 2s
      in_flight_window: 1s
      definitive_absence: true
      verifier:
        http:
          url: "${PROVIDER_URL:-http://127.0.0.1:8099}/payments?idempotency_key={operation_key}"
          list: /data
          completed: /status
          completed_values: [succeeded]
          external_id: /id
`

// TestUnresolvableIsEscalatedAndResolvedByCLI: the provider's search keeps
// failing, so the reconciler never reads it as absence; once
// unknown_after_seconds has passed it escalates; an operator resolves it
// with `opjournal ops`, and the decision is in the history.
func TestUnresolvableIsEscalatedAndResolvedByCLI(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{policy: unresolvablePolicy})
	const key = "payment:unresolvable"
	op, body := payment(key, 7000)
	s.fault(t, fakeprovider.Fault{Method: http.MethodGet, Path: "/payments", Kind: fakeprovider.Error, Probability: 1})
	s.fault(t, fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.ErrorAfterCommit, Count: 1})
	out, err := s.sdk.Execute(ctxFor(t), op, agenttool.Post(s.providerURL, "/payments", body, true, time.Second, nil))
	if err != nil || out.Kind != client.VerificationRequired {
		t.Fatalf("execute: %v %v", out.Kind, err)
	}
	escalated := s.waitFor(t, key, "escalated", func(o *pb.Operation) bool { return o.GetNeedsReview() })
	if escalated.GetStatus() != pb.Status_STATUS_UNKNOWN || escalated.GetCheckCount() == 0 {
		t.Fatalf("escalated without checking, or left unknown: %v", escalated)
	}

	ops := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"ops", "--journal-addr", s.grpcAddr}, args...)...)
		cmd.Env = childEnv(nil)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("opjournal ops %v: %v\n%s", args, err, b)
		}
		return string(b)
	}
	if queue := ops("list"); !strings.Contains(queue, key) {
		t.Fatalf("the review queue lacks %s:\n%s", key, queue)
	}
	effect, err := s.provider.Lookup(ctxFor(t), key)
	if err != nil || effect.Count != 1 {
		t.Fatalf("provider: %+v %v", effect, err)
	}
	ops("resolve", key, "--succeeded", "--external-id", effect.Records[0].ID, "--actor", "alice", "--reason", "seen in the provider's dashboard")
	done := lookup(t, ctxFor(t), s.rpc, key)
	if done.GetStatus() != pb.Status_STATUS_SUCCEEDED || done.GetNeedsReview() || done.GetExternalId() != effect.Records[0].ID {
		t.Fatalf("after resolve: %v", done)
	}
	evs := s.history(t, key)
	last := evs[len(evs)-1]
	if last.GetActor() != "alice" || last.GetToStatus() != pb.Status_STATUS_SUCCEEDED || !strings.Contains(last.GetReason(), "dashboard") {
		t.Fatalf("the decision is not in the history: %v", last)
	}
	if show := ops("show", key); !strings.Contains(show, "alice") || !strings.Contains(show, "escalated") {
		t.Fatalf("ops show lacks the history:\n%s", show)
	}
	if n := s.effects(t, key); n != 1 {
		t.Fatalf("effects = %d", n)
	}
}

// TestTwoReconcilersManyAgents: two reconciler processes and eight agents
// hammer the same intents while the provider loses answers in every way.
// Every intent ends with exactly one effect, and no operation's history
// ever leaves a terminal state or skips a step.
func TestTwoReconcilersManyAgents(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{dbURL: pgURL(t), reconcilers: 2})
	seed := int64(20261130)
	for i, f := range []fakeprovider.Fault{
		{Path: "/payments", Kind: fakeprovider.CommitThenTimeout, Probability: 0.25, Delay: 2 * time.Second},
		{Path: "/payments", Kind: fakeprovider.TimeoutBeforeCommit, Probability: 0.15, Delay: 2 * time.Second},
		{Path: "/payments", Kind: fakeprovider.ErrorAfterCommit, Probability: 0.15},
		{Path: "/emails", Kind: fakeprovider.CommitThenTimeout, Probability: 0.25, Delay: 2 * time.Second},
		{Path: "/emails", Kind: fakeprovider.TimeoutBeforeCommit, Probability: 0.15, Delay: 2 * time.Second},
	} {
		sd := seed + int64(i)
		f.Seed = &sd
		s.fault(t, f)
	}
	type intent struct {
		op     client.Op
		path   string
		body   map[string]any
		idemp  bool
		effect string
	}
	var intents []intent
	for i := range 12 {
		key := fmt.Sprintf("payment:order-%d:intent-01", i)
		op, body := payment(key, 100*(i+1))
		intents = append(intents, intent{op, "/payments", body, true, key})
		ekey := fmt.Sprintf("email:order-%d:receipt-01", i)
		ebody := map[string]any{"to": fmt.Sprintf("c%d@example.com", i), "subject": "receipt"}
		intents = append(intents, intent{client.Op{Key: ekey, Action: "send_email", Payload: ebody}, "/emails", ebody, false, ekey})
	}
	var wg sync.WaitGroup
	var succeeded atomic.Int32
	deadline := time.Now().Add(90 * time.Second)
	for a := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(a)))
			order := rng.Perm(len(intents))
			for _, i := range order {
				in := intents[i]
				fn := agenttool.Post(s.providerURL, in.path, in.body, in.idemp, 500*time.Millisecond, nil)
				// An agent retries until the journal says the intent is
				// done: in progress elsewhere, or waiting for the
				// reconciler, means "ask again later".
				for time.Now().Before(deadline) {
					out, err := s.sdk.Execute(context.Background(), in.op, fn)
					if err != nil {
						t.Errorf("agent %d %s: %v", a, in.op.Key, err)
						return
					}
					if out.Kind == client.Succeeded {
						succeeded.Add(1)
						break
					}
					if out.Kind != client.VerificationRequired && out.Kind != client.InProgressElsewhere {
						t.Errorf("agent %d %s: outcome %s", a, in.op.Key, out.Kind)
						return
					}
					time.Sleep(100 * time.Millisecond) // an agent's retry pacing, not synchronisation
				}
			}
		}()
	}
	wg.Wait()
	if int(succeeded.Load()) != 8*len(intents) {
		t.Fatalf("%d of %d agent runs ended succeeded before the deadline", succeeded.Load(), 8*len(intents))
	}
	terminal := map[pb.Status]bool{pb.Status_STATUS_SUCCEEDED: true, pb.Status_STATUS_FAILED_FINAL: true}
	for _, in := range intents {
		if n := s.effects(t, in.effect); n != 1 {
			t.Errorf("%s: %d effects, want exactly 1", in.op.Key, n)
		}
		op := lookup(t, ctxFor(t), s.rpc, in.op.Key)
		if op.GetStatus() != pb.Status_STATUS_SUCCEEDED || op.GetNeedsReview() {
			t.Errorf("%s ended %s (needs_review=%v)", in.op.Key, op.GetStatus(), op.GetNeedsReview())
		}
		evs := s.history(t, in.op.Key)
		for i, e := range evs {
			if i == 0 {
				continue
			}
			prev := evs[i-1]
			if terminal[prev.GetToStatus()] {
				t.Errorf("%s: history moves on after %s: %v", in.op.Key, prev.GetToStatus(), e)
			}
			// Each change starts where the last one ended, except that an
			// expired lease reads as unknown without an event of its own.
			if e.GetFromStatus() != prev.GetToStatus() && !(prev.GetToStatus() == pb.Status_STATUS_IN_PROGRESS && e.GetFromStatus() == pb.Status_STATUS_UNKNOWN) {
				t.Errorf("%s: history skips from %s to an event from %s: %v", in.op.Key, prev.GetToStatus(), e.GetFromStatus(), e)
			}
		}
	}
	faults, err := s.provider.Faults(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("faults fired: %v", faults.Fired)
	fired := 0
	for _, n := range faults.Fired {
		fired += n
	}
	if fired < 5 {
		t.Fatalf("only %d faults fired: the run proved little", fired)
	}
}
