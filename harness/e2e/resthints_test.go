package e2e

import (
	"net/http"
	"testing"
)

// TestRESTErrorsTeach: a misspelt field suggests the request's nearest
// field, and a value of the wrong type names its field and what it takes;
// the body is {"error": {code, message, field}} with HTTP 400.
func TestRESTErrorsTeach(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	for _, tc := range []struct {
		verb, body     string
		field, message string
	}{
		{"register", `{"key": "k-1", "action_type": "send_email", "payload": {"to": "x"}}`, "key", `unknown field "key"; did you mean "operation_key"?`},
		{"register", `{"operation_key": "k-1", "action_type": "send_email", "payload": {"to": "x"}, "claim": {"worker": "w"}}`, "claim.worker", `unknown field "worker"; did you mean "worker_id"?`},
		{"markSucceeded", `{"operation_key": "k-1", "attempt": 1, "external_id": "x", "result": "ok"}`, "result", "must be a JSON object, not a string"},
		{"markSucceeded", `{"operation_key": "k-1", "attempt": "one", "external_id": "x"}`, "attempt", "must be a valid int32"},
		{"resolve", `{"operation_key": "k-1", "resolution": "SUCCEEDED", "reason": "r"}`, "resolution", `"SUCCEEDED" is not one of RESOLUTION_SUCCEEDED, RESOLUTION_FAILED_FINAL; did you mean "RESOLUTION_SUCCEEDED"?`},
	} {
		r := post(t, srv, tc.verb, tc.body)
		if r.Status != http.StatusBadRequest {
			t.Errorf("%s %s: status %d %s", tc.verb, tc.body, r.Status, r.Body)
			continue
		}
		e := r.Err(t)
		if e.Error.Code != "INVALID_ARGUMENT" || e.Error.Field != tc.field || e.Error.Message != tc.message {
			t.Errorf("%s %s:\n got %s\nwant field %q message %q", tc.verb, tc.body, r.Body, tc.field, tc.message)
		}
	}
	// Nothing was registered by the misspelt request.
	if r := do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key=k-1", nil); r.Status != http.StatusNotFound {
		t.Fatalf("lookup: %d %s", r.Status, r.Body)
	}
}
