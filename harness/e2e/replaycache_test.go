package e2e

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestReplayCacheAcrossReplicas: two real servers on one PostgreSQL, the
// replay cache on in one and off in the other. A replay of a succeeded
// operation gets the same answer from both, before and after a duplicate
// report through the other replica changes the row's review: the answer
// is the final record, which no replica's entry can get wrong. Lookup
// shows the review.
func TestReplayCacheAcrossReplicas(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	cached := startServer(t, "--database-url", dbURL, "--purge-interval", "0")
	plain := startServer(t, "--database-url", dbURL, "--purge-interval", "0", "--replay-cache-size", "0")
	ctx := ctxFor(t)
	key := "payment:order-817:replay-cache"
	reg := &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}`), Claim: &pb.ClaimOptions{WorkerId: "w"}}
	if r, err := cached.Client.Register(ctx, reg); err != nil || !r.GetClaimed() {
		t.Fatalf("register: %v %v", r, err)
	}
	if _, err := cached.Client.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: 1, ExternalId: "pay_1",
		Result: mustStruct(t, `{"id": "pay_1"}`)}); err != nil {
		t.Fatal(err)
	}
	replay := func(what string) *pb.RegisterResponse {
		t.Helper()
		a, err := cached.Client.Register(ctx, reg)
		if err != nil {
			t.Fatalf("%s: cached replica: %v", what, err)
		}
		b, err := plain.Client.Register(ctx, reg)
		if err != nil {
			t.Fatalf("%s: plain replica: %v", what, err)
		}
		if !proto.Equal(a, b) {
			t.Fatalf("%s: the replicas answer differently:\ncached %v\nplain  %v", what, a, b)
		}
		if a.GetNext() != pb.NextStep_NEXT_STEP_REPLAY || a.GetClaimed() || a.GetOperation().GetExternalId() != "pay_1" ||
			a.GetOperation().GetResult().GetFields()["id"].GetStringValue() != "pay_1" {
			t.Fatalf("%s: %v", what, a)
		}
		return a
	}
	first := replay("after the mark")
	if _, err := plain.Client.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: 1, ExternalId: "pay_2"}); err != nil {
		t.Fatal(err)
	}
	if op := lookup(t, ctx, cached.Client, key); !op.GetNeedsReview() || op.GetDuplicateReports() != 1 {
		t.Fatalf("lookup after the duplicate: %v", op)
	}
	if again := replay("after a duplicate through the other replica"); !proto.Equal(again, first) {
		t.Fatalf("the final record changed:\n%v\n%v", again, first)
	}
}

// TestReplayCacheSizeFlag: a negative or malformed --replay-cache-size is
// refused with the flag's name, before anything starts.
func TestReplayCacheSizeFlag(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"-1", "lots", "99999999999999999999"} {
		code, out := runBinary(t, serverOpts{}, "serve", "--database-url", "sqlite://"+t.TempDir()+"/j.db", "--replay-cache-size", v)
		if code == 0 || !strings.Contains(out, "replay-cache-size") {
			t.Errorf("--replay-cache-size %s: exit %d\n%s", v, code, out)
		}
	}
}
