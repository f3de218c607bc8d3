package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"

	"github.com/opjournal/opjournal/internal/testkit/testjwt"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server/auth"
)

// One person is one principal, whatever credential they present: every
// rule that compares callers (distinct_from_requester, two_person, the
// history's actor and the approval's requester) must see exactly one
// principal per person, and two people as two.
//
// The world below has every identity method: tokens of one principal
// (rotated: several tokens, one id), a token without principal: (its
// name is its id), JWTs of two issuers (the same subject at two issuers
// is two principals: nothing tells us they are one person), subjects
// that are not token names ("auth0|carol"), and a JWT subject equal to a
// token's name ("bob"), which must not be that token's person.

// credential is one way a person authenticates.
type credential struct {
	label string
	// token returns a bearer token: a fixed one, or a JWT minted afresh
	// for every call (a refreshed access token is the same person).
	token func() string
}

// person is someone of the world: the principal id the journal must
// record for them, and their credentials that may register (agent) and
// decide (operator).
type person struct {
	id               string
	agents, deciders []credential
}

// identityWorld builds the tokens file and the people.
func identityWorld(t *testing.T) (*auth.Authenticator, []person) {
	t.Helper()
	issuers := []*testjwt.Issuer{testjwt.New(t, "https://agents.example.test/", "opjournal"), testjwt.New(t, "https://sso.example.test/", "opjournal")}
	var file strings.Builder
	file.WriteString("issuers:\n")
	for _, is := range issuers {
		file.WriteString(is.Entry("acme", "agent, operator"))
	}
	file.WriteString("tokens:\n")
	fixed := func(name, principal, roles string) credential {
		tok := "tok-" + name + "-5f0c8a7e3b1d4c2a9e6f"
		fmt.Fprintf(&file, "  - name: %s\n    sha256: %s\n    tenant: acme\n    roles: [%s]\n", name, auth.Digest(tok), roles)
		if principal != "" {
			fmt.Fprintf(&file, "    principal: %s\n", principal)
		}
		return credential{label: name, token: func() string { return tok }}
	}
	jwtOf := func(is *testjwt.Issuer, sub string) credential {
		return credential{label: sub, token: func() string { return is.Token(sub) }}
	}
	people := []person{
		// Rotated tokens: three tokens, one principal.
		{id: "alice", agents: []credential{fixed("alice-agent", "alice", "agent")},
			deciders: []credential{fixed("alice-laptop", "alice", "operator"), fixed("alice-phone", "alice", "operator")}},
		// A token without principal: its name is its id.
		{id: "bob", agents: []credential{fixed("bob", "", "agent, operator")}},
		// JWT subjects of the usual IdP shapes, at two issuers.
		{id: auth.JWTPrincipalID(issuers[0].URL, "auth0|carol"), agents: []credential{jwtOf(issuers[0], "auth0|carol")}},
		{id: auth.JWTPrincipalID(issuers[1].URL, "auth0|carol"), agents: []credential{jwtOf(issuers[1], "auth0|carol")}},
		{id: auth.JWTPrincipalID(issuers[1].URL, "google-oauth2|1093"), agents: []credential{jwtOf(issuers[1], "google-oauth2|1093")}},
		// A JWT subject equal to a token's name is not that token's person.
		{id: auth.JWTPrincipalID(issuers[0].URL, "bob"), agents: []credential{jwtOf(issuers[0], "bob")}},
	}
	for i := range people {
		if people[i].deciders == nil {
			people[i].deciders = people[i].agents
		}
	}
	a, err := auth.Parse([]byte(file.String()), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, people
}

const identityPolicy = `actions:
  transfer:
    approval: {required: true, two_person: true}
  payout:
    approval: {required: true}
`

// callAs adds a credential's token to ctx.
func callAs(ctx context.Context, c credential) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token())
}

// TestEveryRuleSeesOnePrincipalPerPerson registers approvals that need one
// person (payout, distinct from the requester) or two (transfer), then
// lets random people decide with random credentials of theirs. The model
// knows only people; the journal sees only credentials. After every
// decision they must agree: refused as the requester, refused as a repeat,
// recorded, or released; and the recorded requester, approvals and history
// actors must be the people's ids, one each, with a label beside them.
func TestEveryRuleSeesOnePrincipalPerPerson(t *testing.T) {
	a, people := identityWorld(t)
	pol, err := policy.Parse([]byte(identityPolicy), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := testserver.Start(t, pol, testserver.WithAuth(a, ""))
	client := pb.NewJournalServiceClient(j.Conn)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		n++
		key := fmt.Sprintf("intent-%d", n)
		action := rapid.SampledFrom([]string{"transfer", "payout"}).Draw(rt, "action")
		need := map[string]int{"transfer": 2, "payout": 1}[action]
		ri := rapid.IntRange(0, len(people)-1).Draw(rt, "requester")
		requester := people[ri]
		cred := requester.agents[rapid.IntRange(0, len(requester.agents)-1).Draw(rt, "requester credential")]
		payload, _ := structpb.NewStruct(map[string]any{"to": "DE02", "n": float64(n)})
		reg, err := client.Register(callAs(ctx, cred), &pb.RegisterRequest{OperationKey: key, ActionType: action, Payload: payload})
		if err != nil {
			rt.Fatalf("register: %v", err)
		}
		if got := reg.GetOperation().GetApproval().GetRequestedBy(); got != requester.id {
			rt.Fatalf("requested_by %q, want the person's id %q", got, requester.id)
		}
		if got := reg.GetOperation().GetApproval().GetRequestedByLabel(); got != cred.label {
			rt.Fatalf("requested_by_label %q, want %q", got, cred.label)
		}
		hash := reg.GetOperation().GetRequestHash()
		var approved []string // people's ids, in order
		released := false
		for step := range rapid.IntRange(1, 5).Draw(rt, "decisions") {
			di := rapid.IntRange(0, len(people)-1).Draw(rt, fmt.Sprintf("decider %d", step))
			decider := people[di]
			dc := decider.deciders[rapid.IntRange(0, len(decider.deciders)-1).Draw(rt, fmt.Sprintf("decider credential %d", step))]
			res, err := client.Approve(callAs(ctx, dc), &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "checked"})
			var want codes.Code
			switch {
			case di == ri:
				want = codes.PermissionDenied // distinct_from_requester, whatever the state
			case released:
				want = codes.FailedPrecondition // no longer awaiting
			case contains(approved, decider.id):
				want = codes.FailedPrecondition // two_person: a second person
			default:
				want = codes.OK
			}
			if status.Code(err) != want {
				rt.Fatalf("%s (%s) approves %s after %v, requested by %s: %v, want %v", decider.id, dc.label, action, approved, requester.id, err, want)
			}
			if err != nil {
				continue
			}
			approved = append(approved, decider.id)
			released = len(approved) == need
			if res.GetReleased() != released {
				rt.Fatalf("released %v after %v", res.GetReleased(), approved)
			}
			got := res.GetOperation().GetApproval().GetApprovals()
			if len(got) != len(approved) {
				rt.Fatalf("approvals %v, want %v", got, approved)
			}
			for i, d := range got {
				if d.GetPrincipal() != approved[i] || d.GetLabel() == "" {
					rt.Fatalf("approval %d: %q (label %q), want %q", i, d.GetPrincipal(), d.GetLabel(), approved[i])
				}
			}
		}
		// The history's actors are the people's ids, labelled.
		evs, err := client.ListEvents(callAs(ctx, people[0].deciders[0]), &pb.ListEventsRequest{OperationKey: key})
		if err != nil {
			rt.Fatal(err)
		}
		want := append([]string{requester.id}, approved...)
		if len(evs.GetEvents()) != len(want) {
			rt.Fatalf("%d events, want %d (%v)", len(evs.GetEvents()), len(want), want)
		}
		for i, e := range evs.GetEvents() {
			if e.GetActor() != want[i] || e.GetActorLabel() == "" {
				rt.Fatalf("event %d: actor %q (label %q), want %q", i, e.GetActor(), e.GetActorLabel(), want[i])
			}
		}
	})
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
