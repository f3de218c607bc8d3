package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"google.golang.org/protobuf/encoding/protojson"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/client"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// Tokens of the shared-service tests: two tenants, every role.
var tokens = map[string]struct{ tenant, roles string }{
	"tok-a-agent-6f1c0b7e9d2a4c3b":  {"team-a", "agent"},
	"tok-a-recon-0c9b8a7f6e5d4c3b":  {"team-a", "reconciler"},
	"tok-a-oper-1a2b3c4d5e6f7a8b9":  {"team-a", "operator"},
	"tok-a-admin-9f8e7d6c5b4a3f2e":  {"team-a", "admin"},
	"tok-b-admin-2b3c4d5e6f7a8b9c":  {"team-b", "admin"},
	"tok-b-agent-3c4d5e6f7a8b9c0d":  {"team-b", "agent"},
	"tok-a-metric-4d5e6f7a8b9c0d1e": {"team-a", "metrics"},
}

const (
	agentA = "tok-a-agent-6f1c0b7e9d2a4c3b"
	reconA = "tok-a-recon-0c9b8a7f6e5d4c3b"
	operA  = "tok-a-oper-1a2b3c4d5e6f7a8b9"
	adminA = "tok-a-admin-9f8e7d6c5b4a3f2e"
	adminB = "tok-b-admin-2b3c4d5e6f7a8b9c"
	agentB = "tok-b-agent-3c4d5e6f7a8b9c0d"
	metrA  = "tok-a-metric-4d5e6f7a8b9c0d1e"
)

// secured writes a tokens file and a policy that redacts the planted
// secrets' fields, and starts a server with them (plus extra flags).
func secured(t *testing.T, extra ...string) (*proc, string) {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("tokens:\n")
	for tok, p := range tokens {
		fmt.Fprintf(&b, "  - name: %s-%s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n", p.tenant, p.roles, auth.Digest(tok), p.tenant, p.roles)
	}
	authFile := filepath.Join(dir, "tokens.yaml")
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(authFile, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := `actions:
  create_payment:
    integer_fields: [amount_minor]
    redact_fields: [card_number, api_token, email]
    reconcile: {definitive_absence: true, visibility_lag: 0s, in_flight_window: 1s}
`
	if err := os.WriteFile(policyFile, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "journal.db")
	args := append([]string{"--database-url", "sqlite://" + db, "--auth-file", authFile, "--policy", policyFile, "--log-level", "debug"}, extra...)
	return startServer(t, args...), dir
}

// as returns a JournalService client that presents token on p's gRPC listener.
func as(t *testing.T, p *proc, token string) pb.JournalServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewJournalServiceClient(client.BearerConn(conn, token))
}

// doAs is do() with an Authorization header.
func doAs(t *testing.T, token, method, url, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// every calls each JournalService RPC on key with c and returns the errors
// by method name (nil for success). Arguments are valid, so only
// authentication, authorisation or the operation's absence can refuse them.
func every(ctx context.Context, c pb.JournalServiceClient, key string) map[string]error {
	payload, _ := structpb.NewStruct(map[string]any{"amount_minor": 100})
	errs := map[string]error{}
	_, errs["Register"] = c.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload})
	_, errs["Claim"] = c.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "w"})
	_, errs["MarkSucceeded"] = c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: 1, ExternalId: "x"})
	_, errs["MarkUnknown"] = c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: key, Attempt: 1})
	_, errs["MarkFailedFinal"] = c.MarkFailedFinal(ctx, &pb.MarkFailedFinalRequest{OperationKey: key, Attempt: 1})
	_, errs["Lookup"] = c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
	_, errs["ListOperations"] = c.ListOperations(ctx, &pb.ListOperationsRequest{})
	_, errs["ReleaseForRetry"] = c.ReleaseForRetry(ctx, &pb.ReleaseForRetryRequest{OperationKey: key, Attempt: 1, Actor: "r", Reason: "absent"})
	_, errs["RecordCheck"] = c.RecordCheck(ctx, &pb.RecordCheckRequest{OperationKey: key, Attempt: 1, Actor: "r", NextCheckAfterSeconds: 5})
	_, errs["Escalate"] = c.Escalate(ctx, &pb.EscalateRequest{OperationKey: key, Actor: "r", Reason: "why"})
	_, errs["Resolve"] = c.Resolve(ctx, &pb.ResolveRequest{OperationKey: key, Resolution: pb.Resolution_RESOLUTION_FAILED_FINAL, Actor: "op", Reason: "why"})
	_, errs["ListEvents"] = c.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
	_, errs["ExtendLease"] = c.ExtendLease(ctx, &pb.ExtendLeaseRequest{OperationKey: key, Attempt: 1})
	_, errs["Acknowledge"] = c.Acknowledge(ctx, &pb.AcknowledgeRequest{OperationKey: key, Actor: "op", Reason: "why"})
	_, errs["SetNote"] = c.SetNote(ctx, &pb.SetNoteRequest{OperationKey: key, Actor: "op", Note: "a note"})
	_, errs["Approve"] = c.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: "h", Actor: "op", Reason: "why"})
	_, errs["Reject"] = c.Reject(ctx, &pb.RejectRequest{OperationKey: key, RequestHash: "h", Actor: "op", Reason: "why"})
	_, errs["GetPolicy"] = c.GetPolicy(ctx, &pb.GetPolicyRequest{})
	_, errs["WhoAmI"] = c.WhoAmI(ctx, &pb.WhoAmIRequest{})
	_, errs["ListBudgets"] = c.ListBudgets(ctx, &pb.ListBudgetsRequest{})
	return errs
}

// TestEveryRPCIsCovered: every() calls every method of JournalService, so
// the role and tenant tests cannot miss a new one.
func TestEveryRPCIsCovered(t *testing.T) {
	called := every(context.Background(), pb.NewJournalServiceClient(deadConn{}), "k")
	methods := pb.File_opjournal_v1_journal_proto.Services().ByName("JournalService").Methods()
	for i := range methods.Len() {
		if _, ok := called[string(methods.Get(i).Name())]; !ok {
			t.Errorf("every() does not call %s", methods.Get(i).Name())
		}
	}
	if len(called) != methods.Len() {
		t.Errorf("every() calls %d methods, the service has %d", len(called), methods.Len())
	}
}

// deadConn answers every call with an error, without a network.
type deadConn struct{}

func (deadConn) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return status.Error(codes.Unavailable, "no server")
}

func (deadConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unavailable, "no server")
}

// TestAuthenticationAndRoles: every RPC needs a valid token, and each role
// may call exactly its RPCs; over gRPC and REST.
func TestAuthenticationAndRoles(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t)
	ctx := ctxFor(t)
	for name, c := range map[string]pb.JournalServiceClient{"no token": srv.Client, "wrong token": as(t, srv, "tok-a-agent-0000000000000000")} {
		for method, err := range every(ctx, c, "k") {
			if status.Code(err) != codes.Unauthenticated || client.CodeOf(err) != "UNAUTHENTICATED" {
				t.Errorf("%s, %s: got %v, want UNAUTHENTICATED", name, method, err)
			}
		}
	}
	if code, _, body := doAs(t, "", http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key=k", ""); code != http.StatusUnauthorized {
		t.Errorf("REST without a token: %d %s", code, body)
	}
	if code, _, body := doAs(t, agentA, http.MethodGet, srv.BaseURL+"/v1/operations?page_size=1", ""); code != http.StatusForbidden || !strings.Contains(body, "PERMISSION_DENIED") {
		t.Errorf("REST agent listing: %d %s", code, body)
	}
	allowed := map[string]string{
		agentA: "Register Claim ExtendLease MarkSucceeded MarkUnknown MarkFailedFinal Lookup WhoAmI",
		reconA: "MarkSucceeded Lookup ListOperations ReleaseForRetry RecordCheck Escalate ListEvents GetPolicy WhoAmI ListBudgets",
		operA:  "Lookup ListOperations ReleaseForRetry Escalate Resolve Acknowledge SetNote Approve Reject ListEvents GetPolicy WhoAmI ListBudgets",
		adminA: "Register Claim ExtendLease MarkSucceeded MarkUnknown MarkFailedFinal Lookup ListOperations ReleaseForRetry RecordCheck Escalate Resolve Acknowledge SetNote Approve Reject ListEvents GetPolicy WhoAmI ListBudgets",
		metrA:  "WhoAmI", // any authenticated caller may ask who it is
	}
	for tok, may := range allowed {
		for method, err := range every(ctx, as(t, srv, tok), "roles-key") {
			denied := status.Code(err) == codes.PermissionDenied
			if strings.Contains(" "+may+" ", " "+method+" ") == denied {
				t.Errorf("%s (%s) calling %s: %v", tokens[tok].roles, tok[:10], method, err)
			}
		}
	}
	// WhoAmI names the principal, over gRPC and REST, never the token.
	who, err := as(t, srv, agentA).WhoAmI(ctx, &pb.WhoAmIRequest{})
	if err != nil || !who.GetAuthenticated() || who.GetTenant() != "team-a" || who.GetPrincipalId() == "" || strings.Join(who.GetRoles(), ",") != "agent" {
		t.Errorf("WhoAmI: %+v %v", who, err)
	}
	if code, _, body := doAs(t, agentA, http.MethodGet, srv.BaseURL+"/v1/whoami", ""); code != http.StatusOK || !strings.Contains(body, `"tenant":"team-a"`) || strings.Contains(body, agentA) {
		t.Errorf("REST whoami: %d %s", code, body)
	}
	// Nothing about the tokens reaches the log.
	for tok := range tokens {
		if strings.Contains(srv.Stderr(), tok) {
			t.Fatalf("the server log holds a token")
		}
	}
	if strings.Contains(srv.Stderr(), "tok-a-agent-0000000000000000") {
		t.Fatal("the server log holds a rejected token")
	}
	if !strings.Contains(srv.Stderr(), "authentication failed") || !strings.Contains(srv.Stderr(), "permission denied") {
		t.Fatal("auth failures and denials are not logged")
	}
}

// TestTenantIsolationForEveryRPC: tenant B, even as admin, cannot read,
// list, claim, mark, release, check, escalate, resolve or see the history
// of tenant A's operations; the same key in B is B's own operation.
func TestTenantIsolationForEveryRPC(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t)
	ctx := ctxFor(t)
	a := as(t, srv, adminA)
	if _, err := a.Register(ctx, &pb.RegisterRequest{OperationKey: "a-only", ActionType: "create_payment", Payload: mustStruct(t, `{"amount_minor": 1}`),
		Claim: &pb.ClaimOptions{WorkerId: "wa"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: "a-only", Attempt: 1, ErrorCode: "timeout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, &pb.RegisterRequest{OperationKey: "shared-key", ActionType: "create_payment", Payload: mustStruct(t, `{"amount_minor": 1}`)}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() (*pb.Operation, []*pb.Event) {
		op, err := a.Lookup(ctx, &pb.LookupRequest{OperationKey: "a-only"})
		if err != nil {
			t.Fatal(err)
		}
		evs, err := a.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: "a-only"})
		if err != nil {
			t.Fatal(err)
		}
		return op.GetOperation(), evs.GetEvents()
	}
	beforeOp, beforeEvs := snapshot()

	b := as(t, srv, adminB)
	for method, err := range every(ctx, b, "a-only") {
		switch method {
		case "Register": // creates B's own "a-only": proves the key space is B's
			if err != nil {
				t.Errorf("B registering its own a-only: %v", err)
			}
		case "ListOperations":
			if err != nil {
				t.Errorf("B listing: %v", err)
			}
		default:
			// After B's Register, B's a-only exists (pending): the calls
			// that need a lease or an unknown outcome are refused by B's
			// own operation's state; none may touch A's.
			if err != nil && status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.InvalidArgument {
				t.Errorf("B %s: %v", method, err)
			}
		}
	}
	list, err := b.ListOperations(ctx, &pb.ListOperationsRequest{View: pb.OperationView_OPERATION_VIEW_FULL})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range list.GetOperations() {
		if op.GetActionType() != "create_payment" || op.GetPayload().GetFields()["amount_minor"].GetNumberValue() != 100 {
			t.Errorf("B's list shows an operation that is not B's: %v", op)
		}
	}
	// Tenant B's agent: A's keys do not exist for it.
	for _, key := range []string{"shared-key"} {
		if _, err := as(t, srv, agentB).Lookup(ctx, &pb.LookupRequest{OperationKey: key}); status.Code(err) != codes.NotFound {
			t.Errorf("B sees A's %s: %v", key, err)
		}
	}
	// The same key with other parameters in B is B's own, not a conflict.
	if res, err := as(t, srv, agentB).Register(ctx, &pb.RegisterRequest{OperationKey: "shared-key", ActionType: "create_payment", Payload: mustStruct(t, `{"amount_minor": 999}`)}); err != nil || !res.GetCreated() {
		t.Fatalf("B's shared-key: %v %v", res, err)
	}
	afterOp, afterEvs := snapshot()
	if !proto.Equal(beforeOp, afterOp) || len(beforeEvs) != len(afterEvs) {
		t.Fatalf("tenant B changed tenant A's operation:\nbefore %v\nafter  %v\n(%d → %d events)", beforeOp, afterOp, len(beforeEvs), len(afterEvs))
	}
	// REST is scoped the same way.
	if code, _, body := doAs(t, agentB, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key=a-only", ""); code != http.StatusOK || !strings.Contains(body, `"amount_minor":100`) {
		t.Errorf("REST lookup by B must show B's own a-only: %d %s", code, body)
	}
}

// TestSecretsAreNotStoredLoggedOrEchoed plants a token, a card number and
// an email address in payloads and results (valid and invalid requests)
// and proves they appear in no table, log line or error message.
func TestSecretsAreNotStoredLoggedOrEchoed(t *testing.T) {
	t.Parallel()
	srv, dir := secured(t)
	ctx := ctxFor(t)
	secrets := []string{"4111111111111111", "sk_live_51HqLyjWDarjtT1zdp7dc", "alice.secret@example.com"}
	planted := `{"amount_minor": 4900, "card_number": "4111111111111111", "api_token": "sk_live_51HqLyjWDarjtT1zdp7dc",
		"customer": {"email": "alice.secret@example.com"}}`
	a := as(t, srv, adminA)
	var messages []string
	res, err := a.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-1", ActionType: "create_payment", Payload: mustStruct(t, planted), Claim: &pb.ClaimOptions{WorkerId: "w"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "pay-1", Attempt: res.GetAttempt(), ExternalId: "pay_1", Result: mustStruct(t, planted)}); err != nil {
		t.Fatal(err)
	}
	// Refused requests carrying the secrets: a conflict, a float amount, a
	// bad token, and the secret itself as a number the journal refuses
	// (beyond 2^53, or a fraction where an integer is due): refusals name
	// the field, never the value, at any log level.
	for _, body := range []string{
		strings.Replace(planted, "4900", "5000", 1),
		strings.Replace(planted, "4900", "49.5", 1),
		strings.Replace(planted, `"card_number": "4111111111111111"`, `"card_number": 4111111111111111000`, 1),
		strings.Replace(planted, `"amount_minor": 4900`, `"amount_minor": 4111111111111111.5`, 1),
		strings.Replace(planted, `"amount_minor": 4900`, `"amount_minor": 4111111111111111e400`, 1),
	} {
		if st := new(structpb.Struct); protojson.Unmarshal([]byte(body), st) == nil { // 1e400 has no gRPC form
			_, err := a.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-1", ActionType: "create_payment", Payload: st})
			if err == nil {
				t.Fatal("a refused request was accepted")
			}
			messages = append(messages, err.Error())
		}
		_, _, rest := doAs(t, adminA, http.MethodPost, srv.BaseURL+"/v1/operations:register",
			`{"operation_key":"pay-1","action_type":"create_payment","payload":`+body+`}`)
		messages = append(messages, rest)
	}
	_, err = as(t, srv, "sk_live_51HqLyjWDarjtT1zdp7dc").Lookup(ctx, &pb.LookupRequest{OperationKey: "pay-1"})
	messages = append(messages, fmt.Sprint(err))
	// What the journal shows: the fields are there, their values are not.
	op, err := a.Lookup(ctx, &pb.LookupRequest{OperationKey: "pay-1"})
	if err != nil {
		t.Fatal(err)
	}
	shown := fmt.Sprint(op.GetOperation())
	if !strings.Contains(shown, "[redacted]") {
		t.Fatalf("no redaction visible: %s", shown)
	}
	messages = append(messages, shown)
	if srv.StopWith(os.Interrupt) != 0 {
		t.Fatal("server did not stop cleanly")
	}
	// Every byte of the database (file, WAL, shared memory) and the log.
	var stored bytes.Buffer
	files, _ := filepath.Glob(filepath.Join(dir, "journal.db*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		stored.Write(b)
	}
	if stored.Len() == 0 {
		t.Fatal("read no database bytes: the test proves nothing")
	}
	for _, secret := range secrets {
		if bytes.Contains(stored.Bytes(), []byte(secret)) {
			t.Errorf("the database holds %q", secret)
		}
		if strings.Contains(srv.Stderr(), secret) {
			t.Errorf("the log holds %q", secret)
		}
		for _, m := range messages {
			if strings.Contains(m, secret) {
				t.Errorf("a message holds %q: %s", secret, m)
			}
		}
	}
}

// TestRateLimitIsPerTenant: a tenant over its rate gets RESOURCE_EXHAUSTED
// / 429 with Retry-After; another tenant is not slowed by it.
func TestRateLimitIsPerTenant(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t, "--rate-limit", "5", "--rate-burst", "5")
	ctx := ctxFor(t)
	a, b := as(t, srv, adminA), as(t, srv, adminB)
	limited := 0
	for range 30 {
		_, err := a.ListOperations(ctx, &pb.ListOperationsRequest{})
		if status.Code(err) == codes.ResourceExhausted && client.CodeOf(err) == "RATE_LIMITED" {
			limited++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if limited < 20 {
		t.Fatalf("30 calls at once with a burst of 5: only %d limited", limited)
	}
	if _, err := b.ListOperations(ctx, &pb.ListOperationsRequest{}); err != nil {
		t.Fatalf("tenant B was slowed by tenant A: %v", err)
	}
	code, h, body := doAs(t, adminA, http.MethodGet, srv.BaseURL+"/v1/operations", "")
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(body, "RATE_LIMITED") {
		t.Fatalf("REST over the limit: %d %v %s", code, h, body)
	}
}

// TestTLSOnBothListeners: with a certificate, gRPC and REST (and the
// gateway's hop between them) run over TLS; plain text is refused.
func TestTLSOnBothListeners(t *testing.T) {
	t.Parallel()
	certPEM, keyPEM := selfSigned(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, certPEM, 0o600)
	_ = os.WriteFile(keyFile, keyPEM, 0o600)
	srv := startServer(t, "--database-url", sqliteURL(t), "--tls-cert", certFile, "--tls-key", keyFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	tlsCfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(srv.GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewJournalServiceClient(conn)
	if _, err := c.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: "tls-1", ActionType: "send_email", Payload: mustStruct(t, `{"to":"x"}`)}); err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	if _, err := srv.Client.Lookup(ctxFor(t), &pb.LookupRequest{OperationKey: "tls-1"}); err == nil {
		t.Fatal("a plain-text gRPC call was answered")
	}
	hc := &http.Client{Timeout: callTimeout, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	resp, err := hc.Get("https://" + srv.HTTPAddr + "/v1/operations:lookup?operation_key=tls-1")
	if err != nil {
		t.Fatalf("REST over TLS: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "tls-1") {
		t.Fatalf("REST over TLS through the gateway: %d %s", resp.StatusCode, body)
	}
	if resp, err := http.Get(srv.BaseURL + "/healthz"); err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("plain HTTP was answered")
	}
}

// TestSecureByDefault: no authentication on a non-loopback address is
// refused unless --insecure says so.
func TestSecureByDefault(t *testing.T) {
	t.Parallel()
	code, out := runBinary(t, serverOpts{Dir: t.TempDir()}, "serve", "--database-url", sqliteURL(t), "--grpc-addr", "0.0.0.0:0", "--http-addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(out, "refusing to listen on 0.0.0.0:0 without authentication") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	srv := startServer(t, "--database-url", sqliteURL(t), "--grpc-addr", "0.0.0.0:0", "--insecure")
	_, port, _ := net.SplitHostPort(srv.GRPCAddr)
	conn, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewJournalServiceClient(conn).Lookup(ctxFor(t), &pb.LookupRequest{OperationKey: "x"}); status.Code(err) != codes.NotFound {
		t.Fatalf("--insecure server: %v", err)
	}
}

// selfSigned makes a certificate for localhost and 127.0.0.1.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
