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
	// A success whose answer the journal does not hold.
	probAnswerNotStored = "succeeded-answer-not-stored"
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
}

// writeProblem answers a problem; retryAfter > 0 also sets Retry-After.
func writeProblem(w http.ResponseWriter, status int, name, title, detail, key string, retryAfter time.Duration) {
	p := problem{Type: problemBase + name, Title: title, Status: status, Detail: detail, OperationKey: key}
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		p.RetryAfterSeconds = secs
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
