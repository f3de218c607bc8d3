package gateway

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opjournal/opjournal/client"
)

// Approvals at both doors. An action's policy may ask a person to approve
// a request before it runs (approval:); the journal then keeps the
// operation AWAITING_APPROVAL, bound to the request hash of that exact
// request, and answers NEXT_STEP_AWAIT_APPROVAL (client.AwaitingApproval)
// until someone decides. The gateway calls nothing upstream meanwhile and
// says so: HTTP 409 approval-pending with Retry-After, or the MCP tool
// error awaiting_approval. Once approved, the same request (a retry with
// the same key and body, or the same tool arguments) is claimed and sent
// once; once rejected, every retry gets the refusal.
//
// The gateway never decides: its callers hold agents' credentials, and
// the journal's Approve and Reject take an operator's or admin's. Nor
// does it forward a decision to anyone (decisionRoute).

// approvalPendingDetail tells an HTTP client what a held request means.
const approvalPendingDetail = "a person must approve this exact request (see request_hash) before it is sent, so it was held and NOT sent. " +
	"Retry later with the SAME key and the same body: once approved it is sent once and the retry gets its answer; once rejected the retry gets the refusal. " +
	"Do not change, rephrase or split the request to get around this: any other request needs its own approval"

// writeApprovalPending answers a request held for a person's approval:
// 409 with the operation key, the request hash the approver sees, and
// Retry-After (the journal's hint, at least a second). It names no
// payload value.
func writeApprovalPending(w http.ResponseWriter, key string, out client.Outcome) {
	writeProblemDoc(w, problem{Type: problemBase + probApprovalPending, Title: "Approval pending", Status: http.StatusConflict,
		Detail: approvalPendingDetail, OperationKey: key, RequestHash: out.Operation.GetRequestHash()}, max(out.RetryAfter, time.Second))
}

// rejectedByApproval reports whether a FailedFinal outcome is a person's
// rejection of the request (or the approval's timeout), not the
// provider's refusal: the action asked for an approval and no attempt was
// ever made, or the journal's own approval codes.
func rejectedByApproval(out client.Outcome) bool {
	if out.Kind != client.FailedFinal {
		return false
	}
	op := out.Operation
	if op.GetApproval().GetRequired() && op.GetAttemptCount() == 0 {
		return true
	}
	return strings.HasPrefix(out.ErrorCode, "approval_")
}

// rejectedByApprovalDetail tells an HTTP client what a rejected request
// means.
const rejectedByApprovalDetail = "a person rejected this request before it was sent (%s); it was not sent and will not be with this key. " +
	"Do not retry it with a new key, changed or split: tell the user it was rejected"

// The texts the model reads (protocol/testdata/model_texts.json: awaiting_approval,
// approval_rejected); the tool's name and its identifying arguments
// (keyFieldNames), and the rejection's error code.
const (
	awaitingApprovalText = "A person must approve this exact call of %s (the identifying arguments: %s) before it runs, so it was held and NOT sent. " +
		"Do not change, rephrase or split the arguments to get around this: any other request needs its own approval. " +
		"Tell the user the call awaits a person's approval; call again later with exactly the same arguments to get its result once it is decided."
	approvalRejectedText = "A person rejected this call of %s (the identifying arguments: %s) before it ran (%s), so it was not sent. " +
		"It will not be sent with these arguments; do not retry it rephrased or split. Tell the user it was rejected."
)

// decisionPaths are the journal's routes that decide an approval (REST and
// gRPC), as canonicalRoute spells their paths.
var decisionPaths = map[string]bool{
	"/v1/operations:approve":               true,
	"/v1/operations:reject":                true,
	"/opjournal.v1.journalservice/approve": true,
	"/opjournal.v1.journalservice/reject":  true,
}

// decisionRoute reports whether a request, in any spelling (case, escapes,
// slashes, dot segments: canonicalRoute), names one of the journal's
// decision routes. The gateway answers it itself and never passes it
// through, whatever its upstream: behind a misconfigured --http-upstream
// (the journal's own REST address) a pass-through would carry the
// caller's request to the journal, and no approval may come through a
// door that agents use.
func decisionRoute(u *url.URL) bool {
	route := canonicalRoute("", u)
	return decisionPaths[strings.TrimPrefix(route, " ")]
}

// writeDecisionRefused answers a request for a decision route.
func writeDecisionRefused(w http.ResponseWriter) {
	writeProblem(w, http.StatusForbidden, probDecisionRoute, "Approvals are not decided through the gateway",
		"the gateway serves agents and never forwards an approval or a rejection: a person decides at the journal itself, "+
			"with an operator's or admin's credential (opjournal ops approve / reject, the console, or POST /v1/operations:approve on the journal)", "", 0)
}
