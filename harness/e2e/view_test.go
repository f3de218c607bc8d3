package e2e

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestAgentCallsAnswerBasicByDefault: the answers of Register, Claim,
// ExtendLease and the marks leave the payload out unless FULL is asked
// for; the marks' answers leave the result out too, while a replay's
// Register and Claim answers still carry the stored result (over gRPC).
func TestAgentCallsAnswerBasicByDefault(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	ctx := ctxFor(t)
	c := srv.Client
	const full = pb.OperationView_OPERATION_VIEW_FULL
	payload := mustStruct(t, `{"order_id":"817","amount_minor":4900,"currency":"EUR"}`)
	result := mustStruct(t, `{"payment_id":"pay_v","status":"captured"}`)

	reg, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "view-1", ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "w"}})
	if err != nil || !reg.GetClaimed() || reg.GetOperation().GetPayload() != nil || reg.GetOperation().GetRequestHash() == "" {
		t.Fatalf("Register (default view) = %v, %v; want claimed, no payload", reg, err)
	}
	ext, err := c.ExtendLease(ctx, &pb.ExtendLeaseRequest{OperationKey: "view-1", Attempt: 1})
	if err != nil || ext.GetOperation().GetPayload() != nil {
		t.Fatalf("ExtendLease (default view) = %v, %v", ext, err)
	}
	ext, err = c.ExtendLease(ctx, &pb.ExtendLeaseRequest{OperationKey: "view-1", Attempt: 1, View: full})
	if err != nil || ext.GetOperation().GetPayload().GetFields()["order_id"].GetStringValue() != "817" {
		t.Fatalf("ExtendLease (FULL) = %v, %v", ext, err)
	}
	ms, err := c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "view-1", Attempt: 1, ExternalId: "pay_v", Result: result})
	if err != nil || ms.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED || ms.GetOperation().GetExternalId() != "pay_v" ||
		ms.GetOperation().GetPayload() != nil || ms.GetOperation().GetResult() != nil {
		t.Fatalf("MarkSucceeded (default view) = %v, %v; want succeeded without payload and result", ms, err)
	}
	// A replay: the stored result, still no payload.
	rep, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "view-1", ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "w2"}})
	if err != nil || rep.GetNext() != pb.NextStep_NEXT_STEP_REPLAY || rep.GetOperation().GetPayload() != nil ||
		rep.GetOperation().GetResult().GetFields()["payment_id"].GetStringValue() != "pay_v" {
		t.Fatalf("Register replay (default view) = %v, %v; want REPLAY with the stored result, no payload", rep, err)
	}
	cl, err := c.Claim(ctx, &pb.ClaimRequest{OperationKey: "view-1", WorkerId: "w2"})
	if err != nil || cl.GetClaimed() || cl.GetOperation().GetPayload() != nil || cl.GetOperation().GetResult().GetFields()["status"].GetStringValue() != "captured" {
		t.Fatalf("Claim of a succeeded operation (default view) = %v, %v", cl, err)
	}
	rep, err = c.Register(ctx, &pb.RegisterRequest{OperationKey: "view-1", ActionType: "create_payment", Payload: payload, View: full})
	if err != nil || rep.GetOperation().GetPayload().GetFields()["currency"].GetStringValue() != "EUR" || rep.GetOperation().GetResult() == nil {
		t.Fatalf("Register replay (FULL) = %v, %v; want payload and result", rep, err)
	}

	// The marks' FULL answers carry the stored result (MarkSucceeded) or refusal (MarkFailedFinal).
	for _, key := range []string{"view-2", "view-3"} {
		if _, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "w"}}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err = c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "view-2", Attempt: 1, ExternalId: "pay_2", Result: result, View: full})
	if err != nil || ms.GetOperation().GetResult().GetFields()["payment_id"].GetStringValue() != "pay_v" || ms.GetOperation().GetPayload() == nil {
		t.Fatalf("MarkSucceeded (FULL) = %v, %v", ms, err)
	}
	refusal := mustStruct(t, `{"status":402}`)
	ff, err := c.MarkFailedFinal(ctx, &pb.MarkFailedFinalRequest{OperationKey: "view-3", Attempt: 1, ErrorCode: "card_declined", Result: refusal})
	if err != nil || ff.GetOperation().GetStatus() != pb.Status_STATUS_FAILED_FINAL || ff.GetOperation().GetResult() != nil || ff.GetOperation().GetPayload() != nil {
		t.Fatalf("MarkFailedFinal (default view) = %v, %v", ff, err)
	}
	rep, err = c.Register(ctx, &pb.RegisterRequest{OperationKey: "view-3", ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "w"}})
	if err != nil || rep.GetNext() != pb.NextStep_NEXT_STEP_FAILED_FINAL || rep.GetOperation().GetResult().GetFields()["status"].GetNumberValue() != 402 {
		t.Fatalf("Register of a refused operation (default view) = %v, %v; want the stored refusal", rep, err)
	}

	// A view that is not one is refused before anything happens.
	_, err = c.Register(ctx, &pb.RegisterRequest{OperationKey: "view-bad", ActionType: "create_payment", Payload: payload, View: pb.OperationView(7)})
	wantGRPCError(t, err, codes.InvalidArgument, opjournal.CodeInvalidArgument, "view")
	_, err = c.Lookup(ctx, &pb.LookupRequest{OperationKey: "view-bad"})
	wantGRPCError(t, err, codes.NotFound, opjournal.CodeNotFound, "operation_key")
	_, err = c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: "view-2", Attempt: 1, ErrorCode: "x", View: pb.OperationView(7)})
	wantGRPCError(t, err, codes.InvalidArgument, opjournal.CodeInvalidArgument, "view")
}

// TestRESTAnswersBasicByDefault is the same over REST: "payload" is null by
// default, "result" set in a replay, both with "view": "OPERATION_VIEW_FULL".
func TestRESTAnswersBasicByDefault(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	payload := map[string]any{"order_id": "817", "amount_minor": 4900, "currency": "EUR"}
	opOf := func(r restResponse) map[string]any {
		t.Helper()
		if r.Status != http.StatusOK {
			t.Fatalf("status %d: %s", r.Status, r.Body)
		}
		return r.JSON(t)["operation"].(map[string]any)
	}
	op := opOf(post(t, srv, "register", map[string]any{"operation_key": "rv-1", "action_type": "create_payment", "payload": payload, "claim": map[string]any{"worker_id": "w"}}))
	if op["payload"] != nil || op["status"] != "STATUS_IN_PROGRESS" {
		t.Fatalf("register (default view): %v", op)
	}
	op = opOf(post(t, srv, "markSucceeded", map[string]any{"operation_key": "rv-1", "attempt": 1, "external_id": "pay_r", "result": map[string]any{"payment_id": "pay_r"}}))
	if op["payload"] != nil || op["result"] != nil || op["status"] != "STATUS_SUCCEEDED" || op["external_id"] != "pay_r" {
		t.Fatalf("markSucceeded (default view): %v", op)
	}
	op = opOf(post(t, srv, "register", map[string]any{"operation_key": "rv-1", "action_type": "create_payment", "payload": payload, "claim": map[string]any{"worker_id": "w"}}))
	if res, _ := op["result"].(map[string]any); res["payment_id"] != "pay_r" {
		t.Fatalf("register replay (default view): no stored result: %v", op)
	}
	if op["payload"] != nil {
		t.Fatalf("register replay (default view) carries the payload: %v", op)
	}
	op = opOf(post(t, srv, "claim", map[string]any{"operation_key": "rv-1", "worker_id": "w"}))
	if res, _ := op["result"].(map[string]any); res["payment_id"] != "pay_r" {
		t.Fatalf("claim of a succeeded operation (default view): no stored result: %v", op)
	}
	op = opOf(post(t, srv, "register", map[string]any{"operation_key": "rv-1", "action_type": "create_payment", "payload": payload, "view": "OPERATION_VIEW_FULL"}))
	if p, _ := op["payload"].(map[string]any); p["order_id"] != "817" || op["result"] == nil {
		t.Fatalf("register replay (FULL): %v", op)
	}
	opOf(post(t, srv, "register", map[string]any{"operation_key": "rv-2", "action_type": "create_payment", "payload": payload, "claim": map[string]any{"worker_id": "w"}}))
	op = opOf(post(t, srv, "markSucceeded", map[string]any{"operation_key": "rv-2", "attempt": 1, "external_id": "pay_2", "result": map[string]any{"payment_id": "pay_2"}, "view": "OPERATION_VIEW_FULL"}))
	if res, _ := op["result"].(map[string]any); res["payment_id"] != "pay_2" || op["payload"] == nil {
		t.Fatalf("markSucceeded (FULL): %v", op)
	}
	wantRESTError(t, post(t, srv, "register", map[string]any{"operation_key": "rv-3", "action_type": "create_payment", "payload": payload, "view": 7}),
		http.StatusBadRequest, opjournal.CodeInvalidArgument, "view")
}
