package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestHTTPApprovalHeldThenSentOnce: a payment a person must approve is
// answered 409 approval-pending (the key, the request hash, Retry-After)
// and not sent, however often it is retried; approved by an operator, the
// same request is sent once and then replayed; another, rejected, is
// refused with error_code approval_rejected and never sent.
func TestHTTPApprovalHeldThenSentOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, approvalPolicy(t))
	operator := pb.NewJournalServiceClient(client.BearerConn(e.journal.Conn, tokenOpOnly))
	body := map[string]any{"order_id": "a1", "amount_minor": 250000, "currency": "RUB"}
	key := "http:create_payment:" + scopeOf("agent-a") + ":ap-1"
	var hash string
	for i := range 3 {
		r := e.post("/payments", "ap-1", body)
		p := wantProblem(t, r, http.StatusConflict, "approval-pending")
		secs, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || secs < 1 || p["retry_after_seconds"] != float64(secs) || p["operation_key"] != key || p["request_hash"] == "" {
			t.Fatalf("try %d: %v %s", i, r.header, r.body)
		}
		hash, _ = p["request_hash"].(string)
		if e.allEffects() != 0 {
			t.Fatalf("try %d: held, yet %d effects", i, e.allEffects())
		}
	}
	if _, err := operator.Approve(context.Background(), &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "checked"}); err != nil {
		t.Fatal(err)
	}
	if r := e.post("/payments", "ap-1", body); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" || e.effects(key) != 1 {
		t.Fatalf("after the approval: %d %s, %d effects", r.status, r.body, e.effects(key))
	}
	if r := e.post("/payments", "ap-1", body); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || e.effects(key) != 1 {
		t.Fatalf("the replay: %d %v, %d effects", r.status, r.header, e.effects(key))
	}

	key = "http:create_payment:" + scopeOf("agent-a") + ":ap-2"
	p := wantProblem(t, e.post("/payments", "ap-2", body), http.StatusConflict, "approval-pending")
	if _, err := operator.Reject(context.Background(), &pb.RejectRequest{OperationKey: key, RequestHash: p["request_hash"].(string), Reason: "too large"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		p := wantProblem(t, e.post("/payments", "ap-2", body), http.StatusUnprocessableEntity, "rejected-earlier")
		if p["error_code"] != "approval_rejected" || p["title"] != "Rejected by a person" {
			t.Fatalf("after the rejection: %v", p)
		}
	}
	if e.effects(key) != 0 {
		t.Fatalf("rejected, yet %d effects", e.effects(key))
	}

	// A person's own error code is still a person's rejection.
	key = "http:create_payment:" + scopeOf("agent-a") + ":ap-3"
	p = wantProblem(t, e.post("/payments", "ap-3", body), http.StatusConflict, "approval-pending")
	if _, err := operator.Reject(context.Background(), &pb.RejectRequest{OperationKey: key, RequestHash: p["request_hash"].(string), Reason: "too large", ErrorCode: "too_risky"}); err != nil {
		t.Fatal(err)
	}
	p = wantProblem(t, e.post("/payments", "ap-3", body), http.StatusUnprocessableEntity, "rejected-earlier")
	if p["error_code"] != "too_risky" || p["title"] != "Rejected by a person" || e.effects(key) != 0 {
		t.Fatalf("after a rejection with its own code: %v, %d effects", p, e.effects(key))
	}
}

// TestHTTPDecisionRoutesNeverPassThrough: a gateway whose default upstream
// takes everything never forwards the journal's decision routes, in any
// spelling or method, with or without a credential; other requests still
// pass through.
func TestHTTPDecisionRoutesNeverPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testPolicy)
	var hits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(up.Close)
	front := httptest.NewServer(e.newGateway(e.lookupEnv, func(c *gateway.Config) { c.DefaultUpstream = up.URL }))
	t.Cleanup(front.Close)
	for _, path := range []string{"/v1/operations:approve", "/v1/operations:reject", "/v1/operations%3Aapprove", "/V1/Operations:Reject",
		"/v1//operations:approve", "/v1/operations:approve/", "/x/../v1/operations:approve", "/opjournal.v1.JournalService/Approve"} {
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodPut} {
			for _, token := range []string{tokenA, tokenOpOnly, ""} {
				req, _ := http.NewRequest(method, front.URL+path, nil)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusForbidden || res.Header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%s %s: %d", method, path, res.StatusCode)
				}
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the upstream received %d decision requests", n)
	}
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/v1/operations", nil)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Fatalf("a pass-through: %d, %d upstream requests", res.StatusCode, hits.Load())
	}
}
