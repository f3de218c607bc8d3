package e2e

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal/client"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestRateLimitNeverRefusesMarks: a tenant whose bucket is empty (one
// token per 1000 s, so it does not refill during the test) still records
// the outcomes of calls already made and extends the lease of one in
// flight, over gRPC and REST; only new work is refused.
func TestRateLimitNeverRefusesMarks(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t, "--rate-limit", "0.001", "--rate-burst", "4")
	ctx := ctxFor(t)
	agent := as(t, srv, agentA)
	keys := []string{"payment:order-31:intent-01", "payment:order-32:intent-01", "payment:order-33:intent-01", "payment:order-34:intent-01"}
	for _, key := range keys { // the burst of 4: one Register (with its claim) each
		if _, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
			Payload: mustStruct(t, `{"amount_minor": 4900}`), Claim: &pb.ClaimOptions{WorkerId: "w1"}}); err != nil {
			t.Fatalf("register %s: %v", key, err)
		}
	}
	limited := func(err error) bool {
		return status.Code(err) == codes.ResourceExhausted && client.CodeOf(err) == "RATE_LIMITED"
	}
	// The tenant is at its limit: new work is refused.
	if _, err := agent.Register(ctx, &pb.RegisterRequest{OperationKey: "payment:order-35:intent-01", ActionType: "create_payment",
		Payload: mustStruct(t, `{"amount_minor": 4900}`)}); !limited(err) {
		t.Fatalf("register over the limit: %v", err)
	}
	if _, err := agent.Lookup(ctx, &pb.LookupRequest{OperationKey: keys[0]}); !limited(err) {
		t.Fatalf("lookup over the limit: %v", err)
	}
	// What records an effect, or keeps a call in flight alive, is not.
	if _, err := agent.ExtendLease(ctx, &pb.ExtendLeaseRequest{OperationKey: keys[0], Attempt: 1, LeaseSeconds: 30}); err != nil {
		t.Fatalf("extend lease over the limit: %v", err)
	}
	res, err := agent.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: keys[0], Attempt: 1, ExternalId: "pay_31", Result: mustStruct(t, `{"status": "captured"}`)})
	if err != nil || res.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED {
		t.Fatalf("mark succeeded over the limit: %v %v", res, err)
	}
	if res, err := agent.MarkFailedFinal(ctx, &pb.MarkFailedFinalRequest{OperationKey: keys[1], Attempt: 1, ErrorCode: "card_declined"}); err != nil || res.GetOperation().GetStatus() != pb.Status_STATUS_FAILED_FINAL {
		t.Fatalf("mark failed final over the limit: %v %v", res, err)
	}
	if res, err := agent.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: keys[2], Attempt: 1, ErrorCode: "timeout"}); err != nil || res.GetOperation().GetStatus() != pb.Status_STATUS_UNKNOWN {
		t.Fatalf("mark unknown over the limit: %v %v", res, err)
	}
	// REST too, as the gateway records its calls.
	code, _, body := doAs(t, agentA, http.MethodPost, srv.BaseURL+"/v1/operations:markSucceeded",
		`{"operation_key": "`+keys[3]+`", "attempt": 1, "external_id": "pay_34", "result": {"status": "captured"}}`)
	if code != http.StatusOK || !strings.Contains(body, "STATUS_SUCCEEDED") {
		t.Fatalf("REST mark succeeded over the limit: %d %s", code, body)
	}
	// The marks took nothing from the bucket, and new work is still refused.
	if code, _, body := doAs(t, agentA, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key="+keys[0], ""); code != http.StatusTooManyRequests {
		t.Fatalf("REST lookup over the limit: %d %s", code, body)
	}
}
