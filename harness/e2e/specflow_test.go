package e2e

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// fakeProvider is the payment provider of the reproducible check of docs/spec.md,
// simulated in the test. It counts effects (what docs/spec.md says to count)
// and every call, and fails the test if it is charged by a caller that
// does not hold a lease.
type fakeProvider struct {
	t       *testing.T
	mu      sync.Mutex
	effects map[string][]string // operation key → payment ids
	charges int                 // Charge calls
	lookups int                 // Find calls (the reconciler's)
}

func newFakeProvider(t *testing.T) *fakeProvider {
	return &fakeProvider{t: t, effects: map[string][]string{}}
}

// Charge commits an effect for key (deduplication is not its job: a second
// charge is a second payment). holdsLease is the journal's answer to the
// caller's claim.
func (p *fakeProvider) Charge(key string, holdsLease bool, amountMinor int64) string {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.charges++
	if !holdsLease {
		p.t.Errorf("provider charged for %q by a caller without a lease", key)
	}
	id := fmt.Sprintf("pay_%d_%d", len(p.effects[key])+1, amountMinor)
	p.effects[key] = append(p.effects[key], id)
	return id
}

// Find is the provider's search by our key (the reconciler's question).
func (p *fakeProvider) Find(key string) (ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookups++
	return append(ids, p.effects[key]...)
}

func (p *fakeProvider) counts(key string) (effects, charges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.effects[key]), p.charges
}

// TestSpecFlow is the reproducible check of docs/spec.md, end to end over gRPC:
// an effect committed whose answer was lost is never performed twice, is
// reconciled to succeeded, and a different amount under the same key is a
// conflict without an external call.
func TestSpecFlow(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		srv := startServer(t, "--database-url", dbURL)
		c, ctx := srv.Client, ctxFor(t)
		provider := newFakeProvider(t)
		const key = "payment:order-817:intent-01"
		payload := mustStruct(t, `{"amount_minor": 490000, "currency": "RUB", "order_id": "order-817", "customer": {"id": "cus_42", "tags": []}}`)

		// 1–3. Register with claim, execute: the provider commits the
		// effect, then the answer is lost (a timeout).
		reg, err := c.Register(ctx, &pb.RegisterRequest{
			OperationKey: key, ActionType: "create_payment", Payload: payload,
			Claim: &pb.ClaimOptions{WorkerId: "agent-run-1"},
		})
		if err != nil {
			t.Fatalf("Register: %v", err)
		}
		if !reg.GetCreated() || !reg.GetClaimed() || reg.GetAttempt() != 1 {
			t.Fatalf("first Register: created=%v claimed=%v attempt=%d, want true true 1", reg.GetCreated(), reg.GetClaimed(), reg.GetAttempt())
		}
		if op := reg.GetOperation(); op.GetStatus() != pb.Status_STATUS_IN_PROGRESS || op.GetAttemptCount() != 1 || op.GetLeaseOwner() != "agent-run-1" ||
			reg.GetLeaseUntil() == nil || len(op.GetRequestHash()) != 64 {
			t.Fatalf("first Register: operation %v lease_until %v", op, reg.GetLeaseUntil())
		}
		hash := reg.GetOperation().GetRequestHash()
		if reg.GetClaimed() {
			provider.Charge(key, reg.GetClaimed(), 490000)
			// The answer never arrives.
		}
		if effects, _ := provider.counts(key); effects != 1 {
			t.Fatalf("after the first attempt the provider holds %d effects, want 1", effects)
		}
		mu, err := c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: key, Attempt: reg.GetAttempt(), ErrorCode: "timeout"})
		if err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		if op := mu.GetOperation(); op.GetStatus() != pb.Status_STATUS_UNKNOWN || op.GetErrorCode() != "timeout" || op.GetLeaseUntil() != nil {
			t.Fatalf("after MarkUnknown: %v", op)
		}
		if op := lookup(t, ctx, c, key); op.GetStatus() != pb.Status_STATUS_UNKNOWN {
			t.Fatalf("journal shows %v after the timeout, want STATUS_UNKNOWN", op.GetStatus())
		}

		// 4. The agent repeats the request: same key, same parameters,
		// spelled differently (member order, 4.9e5, a null member).
		again := mustStruct(t, `{"memo": null, "customer": {"tags": [], "id": "cus_42"}, "order_id": "order-817", "currency": "RUB", "amount_minor": 4.9e5}`)
		rep, err := c.Register(ctx, &pb.RegisterRequest{
			OperationKey: key, ActionType: "create_payment", Payload: again,
			Claim: &pb.ClaimOptions{WorkerId: "agent-run-2"},
		})
		if err != nil {
			t.Fatalf("repeated Register: %v", err)
		}
		if rep.GetCreated() || rep.GetOperation().GetRequestHash() != hash {
			t.Fatalf("repeated Register: created=%v hash %s, want false and %s", rep.GetCreated(), rep.GetOperation().GetRequestHash(), hash)
		}
		// create_payment is reconcile_before_retry: no claim, no call.
		if rep.GetClaimed() || rep.GetAttempt() != 0 || rep.GetOperation().GetStatus() != pb.Status_STATUS_UNKNOWN ||
			rep.GetOperation().GetAttemptCount() != 1 || rep.GetRetryAfterSeconds() != 0 {
			t.Fatalf("repeated Register of an unknown payment: claimed=%v attempt=%d retry_after=%d operation %v",
				rep.GetClaimed(), rep.GetAttempt(), rep.GetRetryAfterSeconds(), rep.GetOperation())
		}
		if rep.GetClaimed() {
			provider.Charge(key, true, 490000)
		}
		if _, charges := provider.counts(key); charges != 1 {
			t.Fatalf("the provider was called %d times, want 1", charges)
		}

		// 5. Reconciliation (played by the test): ask the provider by key.
		found := provider.Find(key)
		if len(found) != 1 {
			t.Fatalf("the provider found %v for %q, want one effect", found, key)
		}
		ms, err := c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{
			OperationKey: key, Attempt: 1, ExternalId: found[0],
			Result: mustStruct(t, fmt.Sprintf(`{"payment_id": %q}`, found[0])),
		})
		if err != nil {
			t.Fatalf("MarkSucceeded: %v", err)
		}
		if op := ms.GetOperation(); op.GetStatus() != pb.Status_STATUS_SUCCEEDED || op.GetExternalId() != found[0] || op.GetNeedsReview() {
			t.Fatalf("after reconciliation: %v", op)
		}
		succeeded := lookup(t, ctx, c, key)
		if succeeded.GetStatus() != pb.Status_STATUS_SUCCEEDED {
			t.Fatalf("Lookup after reconciliation: %v", succeeded.GetStatus())
		}

		// A repeat now returns the stored result, and a claim is refused
		// (FULL: the whole stored record, payload included).
		rep, err = c.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: again, View: pb.OperationView_OPERATION_VIEW_FULL})
		if err != nil {
			t.Fatalf("Register after success: %v", err)
		}
		// Register answers a terminal operation's final record: the stored
		// record without the bookkeeping it may still change (docs/api.md).
		final := proto.Clone(succeeded).(*pb.Operation)
		final.UpdatedAt, final.NeedsReview, final.ReviewReason, final.Note = nil, false, "", ""
		final.DuplicateExternalId, final.DuplicateExternalIds, final.DuplicateReports = "", nil, 0
		if rep.GetCreated() || rep.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED ||
			rep.GetOperation().GetResult().GetFields()["payment_id"].GetStringValue() != found[0] ||
			!proto.Equal(rep.GetOperation(), final) {
			t.Fatalf("Register after success: created=%v operation %v, want the final record %v", rep.GetCreated(), rep.GetOperation(), final)
		}
		cl, err := c.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "agent-run-3"})
		if err != nil {
			t.Fatalf("Claim after success: %v", err)
		}
		if cl.GetClaimed() || cl.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED || cl.GetOperation().GetAttemptCount() != 1 {
			t.Fatalf("Claim of a succeeded operation: claimed=%v %v", cl.GetClaimed(), cl.GetOperation())
		}

		// 6. Exactly one effect.
		if effects, charges := provider.counts(key); effects != 1 || charges != 1 {
			t.Fatalf("provider: %d effects after %d charges, want exactly 1 and 1", effects, charges)
		}

		// 7. Same key, different amount: a conflict; nothing is called,
		// nothing changes.
		before := lookup(t, ctx, c, key)
		_, err = c.Register(ctx, &pb.RegisterRequest{
			OperationKey: key, ActionType: "create_payment",
			Payload: mustStruct(t, `{"amount_minor": 500000, "currency": "RUB", "order_id": "order-817", "customer": {"id": "cus_42", "tags": []}}`),
			Claim:   &pb.ClaimOptions{WorkerId: "agent-run-4"},
		})
		wantGRPCError(t, err, codes.AlreadyExists, opjournal.CodePayloadMismatch, "payload")
		if after := lookup(t, ctx, c, key); !proto.Equal(before, after) {
			t.Fatalf("a conflicting Register changed the record:\nbefore %v\nafter  %v", before, after)
		}
		if effects, charges := provider.counts(key); effects != 1 || charges != 1 {
			t.Fatalf("provider after the conflict: %d effects, %d charges, want 1 and 1", effects, charges)
		}
	})
}
