package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem details (RFC 9457) for every refusal of the HTTP front door.

// problemBase prefixes the problem types: urn:opjournal:problem:NAME.
const problemBase = "urn:opjournal:problem:"

// The problems, by type name.
const (
	probKeyMissing     = "idempotency-key-missing"
	probKeyInvalid     = "idempotency-key-invalid"
	probBadBody        = "body-not-json-object"
	probTooLarge       = "too-large"
	probInvalid        = "invalid-request"
	probInProgress     = "request-in-progress"
	probOutcomeUnknown = "outcome-unknown"
	probKeyReused      = "idempotency-key-reused"
	probRejected       = "rejected-earlier"
	probUnavailable    = "journal-unavailable"
	probNoRoute        = "no-route"
	probMethod         = "method-not-allowed"
	probInternal       = "internal"
	// The refusals of a caller (identity.go).
	probUnauthenticated = "unauthenticated"
	probForbidden       = "forbidden"
	probRateLimited     = "rate-limited"
	// The refusals of a request the gateway cannot bind to its key.
	probNonCanonicalPath = "non-canonical-path"
	probMediaType        = "unsupported-media-type"
	probCrossSite        = "cross-site-request"
	probDuplicateMember  = "duplicate-member"
	probBadForm          = "body-not-form"
	probBadQuery         = "query-invalid"
	probBadHeader        = "header-invalid"
	// A success whose answer the journal does not hold.
	probAnswerNotStored = "succeeded-answer-not-stored"
	// A request held until a person approves it (approval.go), and a
	// request for the journal's decision routes, which the gateway never
	// forwards.
	probApprovalPending = "approval-pending"
	probDecisionRoute   = "approval-decision-not-here"
	// A request a budget of its action refuses (budget.go).
	probBudgetExceeded = "budget-exceeded"
)

// problem is an RFC 9457 problem document.
type problem struct {
	Type              string `json:"type"`
	Title             string `json:"title"`
	Status            int    `json:"status"`
	Detail            string `json:"detail"`
	OperationKey      string `json:"operation_key,omitempty"`
	Field             string `json:"field,omitempty"`
	ExternalID        string `json:"external_id,omitempty"`
	RetryAfterSeconds int    `json:"retry_after_seconds,omitempty"`
	// RequestHash is the journal's hash of the request a person must
	// approve (approval-pending): what the approver sees and confirms.
	RequestHash string `json:"request_hash,omitempty"`
	// ErrorCode is the stored refusal of a request rejected earlier.
	ErrorCode string `json:"error_code,omitempty"`
	// The budget a request would pass (budget-exceeded): its name, its
	// limit and what is used within its window (both always present, 0
	// included), the window, and whether the request alone is over the
	// limit (so that waiting never helps). Never a value of the request.
	Budget        string `json:"budget,omitempty"`
	Limit         *int64 `json:"limit,omitempty"`
	Used          *int64 `json:"used,omitempty"`
	WindowSeconds int64  `json:"window_seconds,omitempty"`
	NeverFits     bool   `json:"never_fits,omitempty"`
}

// writeProblem answers a problem; retryAfter > 0 also sets Retry-After.
func writeProblem(w http.ResponseWriter, status int, name, title, detail, key string, retryAfter time.Duration) {
	writeProblemDoc(w, problem{Type: problemBase + name, Title: title, Status: status, Detail: detail, OperationKey: key}, retryAfter)
}

// writeProblemDoc answers p; retryAfter > 0 also sets Retry-After (whole
// seconds, rounded up) and p's retry_after_seconds.
func writeProblemDoc(w http.ResponseWriter, p problem, retryAfter time.Duration) {
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		p.RetryAfterSeconds = secs
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}
