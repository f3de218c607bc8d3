package e2e

// Hardening against an attacker and an unlucky operator, each over the
// real binaries: large payloads, the history's actor, hashes that must not
// confirm a secret, history floods, refused releases, every spelling of a
// REST field, authentication before parsing, bad gRPC bytes, /metrics.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/procs"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// Defect 2: 70 unknown operations with 60 KB payloads made ListOperations
// exceed gRPC's 4 MiB limit, and no reconciler pass ever got through.
// Lists now leave payloads out by default and pages are bounded by bytes.
func TestLargePayloadsDoNotStopReconciliation(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	ctx := ctxFor(t)
	blob := strings.Repeat("x", 60_000)
	const n = 70
	for i := range n {
		key := fmt.Sprintf("payment:big-%02d", i)
		res, err := s.rpc.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
			Payload: mustStruct(t, fmt.Sprintf(`{"order_id":"%d","amount_minor":100,"currency":"EUR","memo":%q}`, i, blob)),
			Claim:   &pb.ClaimOptions{WorkerId: "agent"}})
		if err != nil || !res.GetClaimed() {
			t.Fatalf("register %s: %v %v", key, res, err)
		}
		if _, err := s.rpc.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: key, Attempt: 1, ErrorCode: "timeout"}); err != nil {
			t.Fatal(err)
		}
	}
	// Even the FULL view is cut into pages below the message limit.
	full, err := s.rpc.ListOperations(ctx, &pb.ListOperationsRequest{PageSize: 1000, View: pb.OperationView_OPERATION_VIEW_FULL})
	if err != nil {
		t.Fatalf("a FULL page of 70 × 60 KB: %v", err)
	}
	if len(full.GetOperations()) >= n || full.GetNextPageToken() == "" || proto.Size(full) > opjournal.MaxPageBytes+200_000 {
		t.Fatalf("FULL page: %d operations, %d bytes, token %q", len(full.GetOperations()), proto.Size(full), full.GetNextPageToken())
	}
	basic, err := s.rpc.ListOperations(ctx, &pb.ListOperationsRequest{PageSize: 1000})
	if err != nil || len(basic.GetOperations()) != n || basic.GetOperations()[0].GetPayload() != nil {
		t.Fatalf("default (BASIC) page: %d operations, payload %v, %v", len(basic.GetOperations()), basic.GetOperations()[0].GetPayload(), err)
	}
	// The reconciler checks every one of them: the provider has none, so
	// each is released once its window has passed.
	eventually(t, 60*time.Second, func() (bool, string) {
		ops, err := s.rpc.ListOperations(ctx, &pb.ListOperationsRequest{PageSize: 1000, Statuses: []pb.Status{pb.Status_STATUS_PENDING}})
		if err != nil {
			return false, err.Error()
		}
		return len(ops.GetOperations()) == n, fmt.Sprintf("%d of %d released", len(ops.GetOperations()), n)
	})
}

// Defect 3: the audit actor was whatever the caller wrote. With
// authentication the history records the token's name; what the caller
// says travels as stated_actor; every mutation is logged with its
// principal.
func TestActorIsTheAuthenticatedPrincipal(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t)
	ctx := ctxFor(t)
	agent, oper := as(t, srv, agentA), as(t, srv, operA)
	res, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-ceo", ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "1", "amount_minor": 100, "currency": "EUR"}`), Claim: &pb.ClaimOptions{WorkerId: "worker-7"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: "pay-ceo", Attempt: res.GetAttempt(), ErrorCode: "timeout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := oper.Resolve(ctx, &pb.ResolveRequest{OperationKey: "pay-ceo", Resolution: pb.Resolution_RESOLUTION_SUCCEEDED,
		ExternalId: "pay_1", Actor: "ceo", Reason: "seen in the dashboard"}); err != nil {
		t.Fatal(err)
	}
	evs, err := oper.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: "pay-ceo"})
	if err != nil {
		t.Fatal(err)
	}
	type who struct{ actor, stated string }
	var got []who
	for _, e := range evs.GetEvents() {
		got = append(got, who{e.GetActor(), e.GetStatedActor()})
	}
	want := []who{{"team-a-agent", "worker-7"}, {"team-a-agent", ""}, {"team-a-operator", "ceo"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history actors = %v, want %v", got, want)
	}
	// An operator may leave out the actor under authentication.
	if _, err := oper.Escalate(ctx, &pb.EscalateRequest{OperationKey: "pay-ceo", Reason: "x"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("escalate a succeeded operation without an actor: %v, want FAILED_PRECONDITION (the state), not a missing actor", err)
	}
	// The audit lines are buffered (at most 100 ms).
	for _, m := range []string{"Register", "MarkUnknown", "Resolve"} {
		eventually(t, 5*time.Second, func() (bool, string) {
			return logHas(srv.Stderr(), map[string]string{"msg": "journal call", "method": m, "key": "pay-ceo"}, "principal"),
				"no audit line with the principal for " + m + ":\n" + srv.Stderr()
		})
	}
}

// logHas reports whether a JSON log line has every field of want and a
// non-empty field nonEmpty.
func logHas(log string, want map[string]string, nonEmpty string) bool {
	for _, line := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		ok := m[nonEmpty] != nil && m[nonEmpty] != ""
		for k, v := range want {
			ok = ok && m[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

// Defect 4: the request hash was an unsalted SHA-256 over the unredacted
// payload: trying the 1,000 CVCs against Lookup's hash gave the CVC. An
// action with redact_fields now has a keyed hash, and a conflict's message
// carries no hash.
func TestRequestHashDoesNotConfirmARedactedValue(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t)) // the shipped policy: create_payment redacts card_cvc
	ctx := ctxFor(t)
	payload := func(cvc string) string {
		return fmt.Sprintf(`{"order_id":"817","amount_minor":4900,"currency":"EUR","card_cvc":%q}`, cvc)
	}
	if _, err := srv.Client.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-cvc", ActionType: "create_payment", Payload: mustStruct(t, payload("737"))}); err != nil {
		t.Fatal(err)
	}
	op := lookup(t, ctx, srv.Client, "pay-cvc")
	if op.GetPayload().GetFields()["card_cvc"].GetStringValue() != "[redacted]" {
		t.Fatalf("the CVC is stored: %v", op.GetPayload())
	}
	for i := range 1000 {
		guess := fmt.Sprintf("%03d", i)
		h, _, err := canonjson.RequestHash("create_payment", []byte(payload(guess)), canonjson.Options{IntegerFields: []string{"amount_minor"}})
		if err != nil {
			t.Fatal(err)
		}
		if h == op.GetRequestHash() {
			t.Fatalf("the request hash confirms the guess %s", guess)
		}
	}
	// The same key with another CVC is still a conflict (the hash covers
	// the real values), and its message quotes no hash.
	_, err := srv.Client.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-cvc", ActionType: "create_payment", Payload: mustStruct(t, payload("738"))})
	wantGRPCError(t, err, codes.AlreadyExists, opjournal.CodePayloadMismatch, "payload")
	if regexp.MustCompile(`[0-9a-f]{10}`).MatchString(status.Convert(err).Message()) {
		t.Fatalf("the conflict's message carries a hash: %v", err)
	}
	// The replay with the real CVC is still a replay.
	res, err := srv.Client.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-cvc", ActionType: "create_payment", Payload: mustStruct(t, payload("737"))})
	if err != nil || res.GetCreated() {
		t.Fatalf("replay: %v %v", res, err)
	}
}

// Key rotation: a replay of an operation hashed under an older key still
// matches while that key is kept; once it is removed the replay is refused
// (INVALID_STATE), never taken for a new request or a conflict.
func TestRequestHashKeyRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, keys := "sqlite://"+filepath.Join(dir, "j.db"), filepath.Join(dir, "keys.yaml")
	if code, out := runBinary(t, serverOpts{}, "hashkey", "--id", "k1", "--rotate", keys); code != 0 {
		t.Fatalf("hashkey: %s", out)
	}
	body := mustStruct(t, `{"order_id": "1", "amount_minor": 100, "currency": "EUR", "card_number": "4111111111111111"}`)
	register := func(srv *proc, key string) (*pb.RegisterResponse, error) {
		return srv.Client.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: body})
	}
	srv := startServerOpts(t, serverOpts{Env: []string{"OPJOURNAL_HASH_KEYS="}}, "--database-url", db, "--hash-key-file", keys)
	if res, err := register(srv, "old"); err != nil || !res.GetCreated() {
		t.Fatalf("register under k1: %v %v", res, err)
	}
	oldHash := lookup(t, ctxFor(t), srv.Client, "old").GetRequestHash()
	srv.Stop()

	if code, out := runBinary(t, serverOpts{}, "hashkey", "--id", "k2", "--rotate", keys); code != 0 {
		t.Fatalf("rotate: %s", out)
	}
	if st, err := os.Stat(keys); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st.Mode(), err)
	}
	srv = startServerOpts(t, serverOpts{}, "--database-url", db, "--hash-key-file", keys)
	if res, err := register(srv, "old"); err != nil || res.GetCreated() {
		t.Fatalf("replay under [k2, k1]: %v %v", res, err)
	}
	if res, err := register(srv, "new"); err != nil || !res.GetCreated() || res.GetOperation().GetRequestHash() == oldHash {
		t.Fatalf("a new operation under k2: %v %v", res, err)
	}
	srv.Stop()

	// k1 retired: its operations can no longer be compared.
	only := filepath.Join(dir, "k2-only.yaml")
	b, _ := os.ReadFile(keys)
	k2 := string(b[:strings.Index(string(b), "  - id: k1")])
	if err := os.WriteFile(only, []byte(k2), 0o600); err != nil {
		t.Fatal(err)
	}
	srv = startServerOpts(t, serverOpts{}, "--database-url", db, "--hash-key-file", only)
	_, err := register(srv, "old")
	wantGRPCError(t, err, codes.FailedPrecondition, opjournal.CodeInvalidState, "payload")
	if res, err := register(srv, "new"); err != nil || res.GetCreated() {
		t.Fatalf("replay of a k2 operation: %v %v", res, err)
	}
}

// Defect 5: 1,100 reports of other external_ids each wrote an event, and
// ListEvents showed the oldest 1,000, hiding the operator's decision.
// Repeated reports are bounded, and ListEvents pages.
func TestHistoryCannotBeFlooded(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	ctx, c := ctxFor(t), srv.Client
	res, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "email:flood", ActionType: "send_email",
		Payload: mustStruct(t, `{"to":"a@example.com"}`), Claim: &pb.ClaimOptions{WorkerId: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1101 {
		if _, err := c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "email:flood", Attempt: res.GetAttempt(),
			ExternalId: fmt.Sprintf("eml_%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Acknowledge(ctx, &pb.AcknowledgeRequest{OperationKey: "email:flood", Actor: "alice", Reason: "a provider bug; one email went out"}); err != nil {
		t.Fatal(err)
	}
	op := lookup(t, ctx, c, "email:flood")
	if op.GetDuplicateReports() != 1100 || len(op.GetDuplicateExternalIds()) != opjournal.MaxDuplicateExternalIDs || op.GetNeedsReview() ||
		op.GetExternalId() != "eml_0000" || op.GetStatus() != pb.Status_STATUS_SUCCEEDED {
		t.Fatalf("after 1,100 reports and an acknowledgement: %v", op)
	}
	var all []*pb.Event
	token := ""
	for pages := 0; ; pages++ {
		page, err := c.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: "email:flood", PageSize: 4, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.GetEvents()...)
		if token = page.GetNextPageToken(); token == "" {
			break
		}
		if pages > 100 {
			t.Fatal("pages never end")
		}
	}
	// registered and claimed, confirmed, 10 duplicates, acknowledged.
	if len(all) != 13 || !strings.HasPrefix(all[len(all)-1].GetReason(), "acknowledged by operator:") {
		t.Fatalf("history has %d events, the last %q", len(all), all[len(all)-1].GetReason())
	}
}

// Defect 7: with the journal's policy saying definitive_absence: false and
// the reconciler's true (a rollout), the reconciler rechecked forever. Now
// a refused release past unknown_after_seconds goes to a person, and the
// reconciler says loudly that the policies differ.
func TestRefusedReleaseIsEscalatedAfterTheDeadline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, definitive bool) string {
		p := filepath.Join(dir, name)
		doc := fmt.Sprintf(`actions:
  send_email:
    unknown_after_seconds: 3
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 1s
      visibility_lag: 0s
      in_flight_window: 1s
      definitive_absence: %v
      verifier:
        http:
          url: "${PROVIDER_URL:-http://127.0.0.1:1}/emails?reference={operation_key}"
          list: /data
          external_id: /id
`, definitive)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	journalPolicy, reconcilerPolicy := write("journal.yaml", false), write("reconciler.yaml", true)
	start := func(spec procs.Spec) *procs.Proc {
		p, err := procs.Start(context.Background(), spec, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
		return p
	}
	prov := start(procs.Spec{Name: "provider", Path: filepath.Join(binDir, "opjournal-fakeprovider"), Ready: "serving", Args: []string{"--addr", "127.0.0.1:0"}})
	j := start(procs.Spec{Name: "journal", Path: binary, Ready: "serving", Env: []string{testHashKeys},
		Args: []string{"serve", "--database-url", sqliteURL(t), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--policy", journalPolicy}})
	rec := start(procs.Spec{Name: "reconciler", Path: filepath.Join(binDir, "opjournal-reconciler"), Ready: "reconciling",
		Env:  []string{"PROVIDER_URL=http://" + prov.Field("addr")},
		Args: []string{"--journal-addr", j.Field("grpc_addr"), "--poll-interval", "200ms", "--policy", reconcilerPolicy}})
	conn, err := grpc.NewClient(j.Field("grpc_addr"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, ctx := pb.NewJournalServiceClient(conn), ctxFor(t)
	res, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "email:rollout", ActionType: "send_email",
		Payload: mustStruct(t, `{"to":"a@example.com"}`), Claim: &pb.ClaimOptions{WorkerId: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: "email:rollout", Attempt: res.GetAttempt(), ErrorCode: "timeout"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() (bool, string) {
		op := lookup(t, ctx, c, "email:rollout")
		return op.GetNeedsReview(), fmt.Sprintf("%s, checks %d, review %q", op.GetStatus(), op.GetCheckCount(), op.GetReviewReason())
	})
	if op := lookup(t, ctx, c, "email:rollout"); op.GetStatus() != pb.Status_STATUS_UNKNOWN || !strings.Contains(op.GetReviewReason(), "refuses the release") {
		t.Fatalf("escalated: %v", op)
	}
	if !strings.Contains(rec.Output(), "the journal enforces another policy") || !strings.Contains(rec.Output(), "DefinitiveAbsence") {
		t.Fatalf("the reconciler did not say that the policies differ:\n%s", rec.Output())
	}
}

// Defect 8: the REST text check for integer_fields read only action_type,
// so actionType let 4900.0000000000000001 be hashed as 4900. Every JSON
// name the gateway accepts is checked.
func TestRESTChecksEverySpellingOfAField(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	for i, body := range []string{
		`{"operation_key":"k%d","action_type":"create_payment","payload":{"amount_minor":4900.0000000000000001}}`,
		`{"operationKey":"k%d","actionType":"create_payment","payload":{"amount_minor":4900.0000000000000001}}`,
		`{"operation_key":"k%d","actionType":"create_payment","payload":{"amount_minor":4900.0000000000000001}}`,
		`{"operationKey":"k%d","action_type":"create_payment","payload":{"amount_minor":9007199254740993}}`,
		`{"operationKey":"k%d","actionType":"create_payment","claim":{"workerId":"w"},"payload":{"amount_minor":1e-99999}}`,
	} {
		r := post(t, srv, "register", json.RawMessage(fmt.Sprintf(body, i)))
		wantRESTError(t, r, http.StatusBadRequest, opjournal.CodeInvalidArgument, "payload/amount_minor")
		if _, err := srv.Client.Lookup(ctxFor(t), &pb.LookupRequest{OperationKey: fmt.Sprintf("k%d", i)}); status.Code(err) != codes.NotFound {
			t.Errorf("body %d was stored: %v", i, err)
		}
	}
	r := post(t, srv, "register", json.RawMessage(`{"action_type":"send_email","actionType":"create_payment","operation_key":"k9","payload":{}}`))
	wantRESTError(t, r, http.StatusBadRequest, opjournal.CodeInvalidArgument, "action_type")
}

// Defect 10: an unauthenticated register got a 400 naming the bad field
// (and an unknown action a 401): anyone could probe action names and
// integer fields and make the server parse 192 KiB bodies. The caller is
// authenticated, authorised and counted against its rate first.
func TestRESTAuthenticatesBeforeParsing(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t, "--rate-limit", "1", "--rate-burst", "1")
	url := srv.BaseURL + "/v1/operations:register"
	for name, body := range map[string]string{
		"a fraction in an integer field": `{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":1.5}}`,
		"an unknown action":              `{"operation_key":"k","action_type":"nope","payload":{}}`,
		"not JSON":                       `{"operation_key":`,
		"too large":                      `{"operation_key":"k","action_type":"create_payment","payload":{"x":"` + strings.Repeat("a", 300_000) + `"}}`,
	} {
		code, _, resp := doAs(t, "", http.MethodPost, url, body)
		if code != http.StatusUnauthorized || strings.Contains(resp, "amount_minor") || strings.Contains(resp, "nope") {
			t.Errorf("%s without a token: %d %s", name, code, resp)
		}
	}
	// An agent over its rate is refused before its body is read.
	if code, _, resp := doAs(t, agentA, http.MethodPost, url, `{"operation_key":"ok","action_type":"create_payment","payload":{"order_id":"1","amount_minor":1,"currency":"EUR"}}`); code != http.StatusOK {
		t.Fatalf("first call: %d %s", code, resp)
	}
	code, hdr, resp := doAs(t, agentA, http.MethodPost, url, `{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":1.5}}`)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || strings.Contains(resp, "amount_minor") {
		t.Fatalf("over the rate: %d %s", code, resp)
	}
}

// rawCodec sends bytes as they are: a client that can put anything on the
// wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

var _ encoding.Codec = rawCodec{}

// Defect 11: garbage bytes or invalid UTF-8 in a string field got
// INTERNAL, even without a token. Bad input is INVALID_ARGUMENT, after
// UNAUTHENTICATED.
func TestBadGRPCMessagesAreInvalidArgument(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t)
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	badUTF8 := []byte{0x0a, 0x02, 0xff, 0xfe}                   // field 1 (operation_key), 2 bytes, not UTF-8
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01} // not a protobuf message
	for name, msg := range map[string][]byte{"invalid UTF-8": badUTF8, "garbage": garbage} {
		for _, m := range []string{"Register", "Lookup", "ListOperations", "Resolve"} {
			call := func(token string) error {
				ctx := ctxFor(t)
				if token != "" {
					ctx = metadataWithToken(ctx, token)
				}
				var out []byte
				return conn.Invoke(ctx, "/opjournal.v1.JournalService/"+m, msg, &out, grpc.ForceCodec(rawCodec{}))
			}
			if err := call(""); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s to %s without a token: %v, want UNAUTHENTICATED", name, m, err)
			}
			if err := call(adminA); status.Code(err) != codes.InvalidArgument || client.CodeOf(err) != opjournal.CodeInvalidArgument {
				t.Errorf("%s to %s: %v, want INVALID_ARGUMENT", name, m, err)
			}
		}
	}
}

// Defect 13: /metrics needed no token and showed counts for every tenant;
// the SQLite database and its WAL were world-readable.
func TestMetricsNeedATokenOrTheirOwnListener(t *testing.T) {
	t.Parallel()
	srv, dir := secured(t)
	for tok, want := range map[string]int{"": http.StatusUnauthorized, agentA: http.StatusForbidden, metrA: http.StatusOK, adminA: http.StatusOK} {
		if code, _, body := doAs(t, tok, http.MethodGet, srv.BaseURL+"/metrics", ""); code != want {
			t.Errorf("/metrics with %q: %d %s, want %d", tok, code, body[:min(len(body), 200)], want)
		}
	}
	// The database files are the owner's alone.
	if _, err := as(t, srv, agentA).Register(ctxFor(t), &pb.RegisterRequest{OperationKey: "k", ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id":"1","amount_minor":1,"currency":"EUR"}`)}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "journal.db*"))
	if len(files) < 3 {
		t.Fatalf("expected the database, its WAL and shared memory: %v", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v (%v), want 0600", f, st.Mode().Perm(), err)
		}
	}

	// With --metrics-addr the metrics have their own listener (no token),
	// and the main one no longer serves them.
	own, _ := secured(t, "--metrics-addr", "127.0.0.1:0")
	if code, _, _ := doAs(t, adminA, http.MethodGet, own.BaseURL+"/metrics", ""); code != http.StatusNotFound {
		t.Errorf("/metrics on the main listener with --metrics-addr: %d, want 404", code)
	}
	resp, err := http.Get("http://" + own.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "opjournal_store_batch_statements_total") {
		t.Fatalf("/metrics on --metrics-addr: %d %.200s", resp.StatusCode, b)
	}
}
