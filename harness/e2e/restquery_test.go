package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// listKeys GETs /v1/operations with query and returns the keys listed.
func listKeys(t *testing.T, p *proc, query string) []string {
	t.Helper()
	r := do(t, http.MethodGet, p.BaseURL+"/v1/operations?"+query, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /v1/operations?%s: %d %s", query, r.Status, r.Body)
	}
	var res struct {
		Operations []struct {
			Key string `json:"operation_key"`
		} `json:"operations"`
	}
	if err := json.Unmarshal(r.Body, &res); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, op := range res.Operations {
		keys = append(keys, op.Key)
	}
	return keys
}

// TestRESTListRefusesUnknownQueryParameters: a misspelt filter is a 400
// that names it, suggests the parameter meant and lists those accepted,
// rather than a list of the whole tenant; status values are taken in the
// CLI's words too.
func TestRESTListRefusesUnknownQueryParameters(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	for _, key := range []string{"k-ok", "k-unknown"} {
		if r := post(t, srv, "register", `{"operation_key": "`+key+`", "action_type": "send_email", "payload": {"to": "a@example.com"}, "refs": {"order_id": "817"}, "claim": {"worker_id": "w"}}`); r.Status != http.StatusOK {
			t.Fatalf("register: %d %s", r.Status, r.Body)
		}
	}
	if r := post(t, srv, "markSucceeded", `{"operation_key": "k-ok", "attempt": 1, "external_id": "m-1"}`); r.Status != http.StatusOK {
		t.Fatalf("mark: %d %s", r.Status, r.Body)
	}
	if r := post(t, srv, "markUnknown", `{"operation_key": "k-unknown", "attempt": 1, "error_code": "timeout"}`); r.Status != http.StatusOK {
		t.Fatalf("mark: %d %s", r.Status, r.Body)
	}
	accepted := "(the query parameters of GET /v1/operations: statuses, needs_review, action_type, due_for_check, page_size, page_token, view, refs[NAME], parent_key)"
	for _, tc := range []struct{ query, field, message string }{
		{"statuse=STATUS_SUCCEEDED", "statuse", `unknown query parameter "statuse"; did you mean "statuses"? ` + accepted},
		{"status=succeeded", "status", `unknown query parameter "status"; did you mean "statuses"? ` + accepted},
		{"ref[order_id]=817", "ref[order_id]", `unknown query parameter "ref[order_id]"; did you mean "refs[order_id]"? ` + accepted},
		{"created_after=2026-01-01T00:00:00Z", "created_after", `unknown query parameter "created_after" ` + accepted},
		{"refs=817", "refs", `query parameter "refs" takes a key: refs[NAME]=VALUE ` + accepted},
		{"statuses=succeded", "statuses", `"succeded" is not a value of statuses; did you mean "succeeded"? (pending, in_progress, unknown, succeeded, failed_final, awaiting_approval, or their STATUS_NAME forms)`},
	} {
		r := do(t, http.MethodGet, srv.BaseURL+"/v1/operations?"+tc.query, nil)
		if r.Status != http.StatusBadRequest {
			t.Errorf("?%s: %d %s", tc.query, r.Status, r.Body)
			continue
		}
		if e := r.Err(t); e.Error.Code != "INVALID_ARGUMENT" || e.Error.Field != tc.field || e.Error.Message != tc.message {
			t.Errorf("?%s:\n got %s\nwant field %q message %q", tc.query, r.Body, tc.field, tc.message)
		}
	}
	for query, want := range map[string][]string{
		"statuses=succeeded":                    {"k-ok"},
		"statuses=SUCCEEDED":                    {"k-ok"},
		"statuses=STATUS_SUCCEEDED":             {"k-ok"},
		"statuses=unknown":                      {"k-unknown"},
		"statuses=unknown,succeeded":            {"k-ok", "k-unknown"},
		"statuses=unknown&statuses=in_progress": {"k-unknown"},
		"refs[order_id]=817&statuses=succeeded": {"k-ok"},
		"refs[order_id]=818":                    nil,
		"view=full&statuses=unknown":            {"k-unknown"},
		"actionType=send_email&pageSize=1":      {"k-ok"},
	} {
		if got := listKeys(t, srv, query); !slices.Equal(got, want) {
			t.Errorf("?%s: %v, want %v", query, got, want)
		}
	}
	// The other GET routes are checked too.
	r := do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?key=k-ok", nil)
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), `did you mean \"operation_key\"?`) {
		t.Errorf("lookup ?key=: %d %s", r.Status, r.Body)
	}
	if r := do(t, http.MethodGet, srv.BaseURL+"/v1/policy?verbose=1", nil); r.Status != http.StatusBadRequest {
		t.Errorf("policy ?verbose=1: %d %s", r.Status, r.Body)
	}
}
