package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/testjwt"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// The approval rules compare people, not credentials: the real journal,
// with a tokens file that gives alice and carol two tokens each (rotated,
// one principal), bob one token without principal:, and two JWT issuers
// whose subjects have the shapes identity providers give them
// ("auth0|alice") or equal a token's name ("alice-ops").

// identityStack is a journal with approvalPolicy and the people above.
type identityStack struct {
	srv              *proc
	agentsIss, opIss *testjwt.Issuer
}

const (
	aliceLaptop = "tok-alice-laptop-7c1e9a3b5d"
	alicePhone  = "tok-alice-phone-2f8d6b4a0c"
	carolAgent  = "tok-carol-agent-9e3a1c7b5f"
	carolOps    = "tok-carol-ops-4b2d8f6a0e1"
	bobOps      = "tok-bob-ops-6a4c2e8b0d9f"
	aliceOps    = "tok-alice-ops-1d3f5b7a9c"
	plainAgent  = "tok-plain-agent-8b6d4f2a0e"
)

func startIdentityStack(t *testing.T, dbURL string, args ...string) *identityStack {
	t.Helper()
	s := &identityStack{agentsIss: testjwt.New(t, "https://agents.example.test/", "opjournal"), opIss: testjwt.New(t, "https://sso.example.test/", "opjournal")}
	tokens := "issuers:\n" + s.agentsIss.Entry("team-a", "agent") + s.opIss.Entry("team-a", "operator") + auth.FileHeader +
		auth.Entry{Name: "alice-laptop", Principal: "alice", SHA256: auth.Digest(aliceLaptop), Tenant: "team-a", Roles: []auth.Role{auth.RoleOperator}}.YAML() +
		auth.Entry{Name: "alice-phone", Principal: "alice", SHA256: auth.Digest(alicePhone), Tenant: "team-a", Roles: []auth.Role{auth.RoleOperator}}.YAML() +
		auth.Entry{Name: "carol-agent", Principal: "carol", SHA256: auth.Digest(carolAgent), Tenant: "team-a", Roles: []auth.Role{auth.RoleAgent}}.YAML() +
		auth.Entry{Name: "carol-ops", Principal: "carol", SHA256: auth.Digest(carolOps), Tenant: "team-a", Roles: []auth.Role{auth.RoleOperator}}.YAML() +
		auth.NewEntry("bob", bobOps, "team-a", []auth.Role{auth.RoleOperator}).YAML() +
		auth.NewEntry("alice-ops", aliceOps, "team-a", []auth.Role{auth.RoleOperator}).YAML() +
		auth.NewEntry("agent", plainAgent, "team-a", []auth.Role{auth.RoleAgent}).YAML()
	dir := t.TempDir()
	authFile, policyFile := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	for f, text := range map[string]string{authFile: tokens, policyFile: approvalPolicy} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.srv = startServer(t, append([]string{"--database-url", dbURL, "--auth-file", authFile, "--policy", policyFile}, args...)...)
	return s
}

// payment registers a payment over the approval threshold as token.
func (s *identityStack) payment(t *testing.T, token, key string) *pb.Operation {
	t.Helper()
	payload, _ := structpb.NewStruct(map[string]any{"order_id": key, "amount_minor": 250000, "currency": "EUR"})
	r, err := as(t, s.srv, token).Register(ctxFor(t), &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload})
	if err != nil || r.GetNext() != pb.NextStep_NEXT_STEP_AWAIT_APPROVAL {
		t.Fatalf("register a payment: %v %v", r, err)
	}
	return r.GetOperation()
}

func (s *identityStack) approve(t *testing.T, token, key, hash string) (*pb.ApproveResponse, error) {
	t.Helper()
	return as(t, s.srv, token).Approve(ctxFor(t), &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "checked"})
}

// wantAwaiting checks the operation still waits with n approvals.
func (s *identityStack) wantAwaiting(t *testing.T, key string, n int) {
	t.Helper()
	op := lookup(t, ctxFor(t), as(t, s.srv, bobOps), key)
	if op.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL || len(op.GetApproval().GetApprovals()) != n {
		t.Fatalf("%s: %v with %d approvals, want awaiting approval with %d", key, op.GetStatus(), len(op.GetApproval().GetApprovals()), n)
	}
}

// actors returns the history's (actor, label) pairs of key.
func (s *identityStack) actors(t *testing.T, key string) []string {
	t.Helper()
	evs, err := as(t, s.srv, bobOps).ListEvents(ctxFor(t), &pb.ListEventsRequest{OperationKey: key})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.GetEvents() {
		out = append(out, e.GetActor()+" ["+e.GetActorLabel()+"]")
	}
	return out
}

func TestOnePersonIsOnePrincipal(t *testing.T) {
	forEachStore(t, func(t *testing.T, dbURL string) {
		s := startIdentityStack(t, dbURL)
		t.Run("RotatedTokensGiveOneOfTwoApprovals", func(t *testing.T) { testRotatedTokensOneApproval(t, s) })
		t.Run("RequesterCannotApproveWithAnotherToken", func(t *testing.T) { testRequesterOtherToken(t, s) })
		t.Run("JWTSubjectsOfAnyShapeAreTwoPeople", func(t *testing.T) { testJWTSubjectsAnyShape(t, s) })
		t.Run("JWTSubjectEqualToATokenNameIsAnotherPerson", func(t *testing.T) { testJWTSubjectEqualsTokenName(t, s) })
	})
}

// Alice's second token does not give a two-person transfer its second
// approval: the transfer still waits, and bob's releases it.
func testRotatedTokensOneApproval(t *testing.T, s *identityStack) {
	op := transfer(t, as(t, s.srv, plainAgent), "transfer-rotated")
	if _, err := s.approve(t, aliceLaptop, "transfer-rotated", op.GetRequestHash()); err != nil {
		t.Fatal(err)
	}
	_, err := s.approve(t, alicePhone, "transfer-rotated", op.GetRequestHash())
	wantGRPCError(t, err, codes.FailedPrecondition, "INVALID_STATE", "")
	if !strings.Contains(err.Error(), "already approved") {
		t.Fatalf("alice's other token: %v", err)
	}
	s.wantAwaiting(t, "transfer-rotated", 1)
	res, err := s.approve(t, bobOps, "transfer-rotated", op.GetRequestHash())
	if err != nil || !res.GetReleased() {
		t.Fatalf("bob's approval: %v %v", res, err)
	}
	got := res.GetOperation().GetApproval().GetApprovals()
	if len(got) != 2 || got[0].GetPrincipal() != "alice" || got[0].GetLabel() != "alice-laptop" || got[1].GetPrincipal() != "bob" {
		t.Fatalf("approvals %v", got)
	}
	want := []string{"agent [agent]", "alice [alice-laptop]", "bob [bob]"}
	if a := s.actors(t, "transfer-rotated"); strings.Join(a, ",") != strings.Join(want, ",") {
		t.Fatalf("history actors %v, want %v", a, want)
	}
}

// Carol registers a payment with her agent token and may not approve it
// with her operator token (distinct_from_requester); bob may.
func testRequesterOtherToken(t *testing.T, s *identityStack) {
	op := s.payment(t, carolAgent, "pay-carol")
	if a := op.GetApproval(); a.GetRequestedBy() != "carol" || a.GetRequestedByLabel() != "carol-agent" {
		t.Fatalf("requested_by %q label %q", a.GetRequestedBy(), a.GetRequestedByLabel())
	}
	_, err := s.approve(t, carolOps, "pay-carol", op.GetRequestHash())
	wantGRPCError(t, err, codes.PermissionDenied, "PERMISSION_DENIED", "")
	if !strings.Contains(err.Error(), "distinct_from_requester") {
		t.Fatalf("carol's other token: %v", err)
	}
	s.wantAwaiting(t, "pay-carol", 0)
	if res, err := s.approve(t, bobOps, "pay-carol", op.GetRequestHash()); err != nil || !res.GetReleased() {
		t.Fatalf("bob's approval: %v %v", res, err)
	}
}

// Two operators whose subjects hold a "|" are two people: together they
// release a two-person transfer; the first one's refreshed token is the
// first one again; and the JWT agent who asked is not either of them.
func testJWTSubjectsAnyShape(t *testing.T, s *identityStack) {
	op := transfer(t, as(t, s.srv, s.agentsIss.Token("auth0|agent-7")), "transfer-jwt")
	agentID := auth.JWTPrincipalID(s.agentsIss.URL, "auth0|agent-7")
	if a := op.GetApproval(); a.GetRequestedBy() != agentID || a.GetRequestedByLabel() != "auth0|agent-7" {
		t.Fatalf("requested_by %q label %q", a.GetRequestedBy(), a.GetRequestedByLabel())
	}
	if _, err := s.approve(t, s.opIss.Token("auth0|alice"), "transfer-jwt", op.GetRequestHash()); err != nil {
		t.Fatalf("the first JWT operator: %v", err)
	}
	_, err := s.approve(t, s.opIss.Token("auth0|alice"), "transfer-jwt", op.GetRequestHash())
	wantGRPCError(t, err, codes.FailedPrecondition, "INVALID_STATE", "")
	s.wantAwaiting(t, "transfer-jwt", 1)
	res, err := s.approve(t, s.opIss.Token("okta|dave"), "transfer-jwt", op.GetRequestHash())
	if err != nil || !res.GetReleased() {
		t.Fatalf("the second JWT operator: %v %v", res, err)
	}
	alice, dave := auth.JWTPrincipalID(s.opIss.URL, "auth0|alice"), auth.JWTPrincipalID(s.opIss.URL, "okta|dave")
	want := []string{agentID + " [auth0|agent-7]", alice + " [auth0|alice]", dave + " [okta|dave]"}
	if a := s.actors(t, "transfer-jwt"); strings.Join(a, ",") != strings.Join(want, ",") {
		t.Fatalf("history actors %v, want %v", a, want)
	}
}

// A JWT agent whose subject is "alice-ops" is not the tokens file's
// operator alice-ops: she may approve its payment, and the history tells
// the two apart.
func testJWTSubjectEqualsTokenName(t *testing.T, s *identityStack) {
	op := s.payment(t, s.agentsIss.Token("alice-ops"), "pay-namesake")
	jwtID := auth.JWTPrincipalID(s.agentsIss.URL, "alice-ops")
	if op.GetApproval().GetRequestedBy() != jwtID {
		t.Fatalf("requested_by %q, want %q", op.GetApproval().GetRequestedBy(), jwtID)
	}
	res, err := s.approve(t, aliceOps, "pay-namesake", op.GetRequestHash())
	if err != nil || !res.GetReleased() {
		t.Fatalf("the tokens file's alice-ops: %v %v", res, err)
	}
	want := []string{jwtID + " [alice-ops]", "alice-ops [alice-ops]"}
	if a := s.actors(t, "pay-namesake"); strings.Join(a, ",") != strings.Join(want, ",") {
		t.Fatalf("history actors %v, want %v", a, want)
	}
}

// TestRateLimitIsPerPrincipal: the journal's rate limit is one bucket per
// person (a bucket of 2 that does not refill during the test): alice's
// second token draws on the bucket her first emptied, and a refreshed JWT
// on its subject's; bob, of the same tenant, and another JWT subject are
// not slowed by either.
func TestRateLimitIsPerPrincipal(t *testing.T) {
	t.Parallel()
	s := startIdentityStack(t, sqliteURL(t), "--rate-limit", "0.001", "--rate-burst", "2")
	limited := func(token string) bool {
		_, err := as(t, s.srv, token).Lookup(ctxFor(t), &pb.LookupRequest{OperationKey: "nothing-here"})
		if code := status.Code(err); code != codes.NotFound && code != codes.ResourceExhausted {
			t.Fatalf("lookup: %v", err)
		}
		return status.Code(err) == codes.ResourceExhausted
	}
	for _, person := range []struct {
		name    string
		a, b, c string
	}{
		{"rotated tokens", aliceLaptop, alicePhone, aliceLaptop},
		{"refreshed JWTs", s.opIss.Token("auth0|alice"), s.opIss.Token("auth0|alice"), s.opIss.Token("auth0|alice")},
	} {
		if limited(person.a) || limited(person.b) {
			t.Fatalf("%s: limited within the burst", person.name)
		}
		if !limited(person.c) {
			t.Fatalf("%s: two credentials of one person got two buckets", person.name)
		}
	}
	for _, other := range []string{bobOps, s.opIss.Token("okta|dave")} {
		if limited(other) {
			t.Fatal("another principal of the tenant is starved by one over its rate")
		}
	}
}
