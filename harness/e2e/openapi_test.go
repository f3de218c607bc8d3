package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/proto/openapi"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/server/auth"
)

// openAPIValidator is libopenapi-validator on the generated OpenAPI 3.1
// document, with formats (date-time, int32, …) asserted.
func openAPIValidator(t *testing.T) validator.Validator {
	t.Helper()
	doc, err := libopenapi.NewDocument(openapi.JSON)
	if err != nil {
		t.Fatalf("libopenapi: %v", err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		t.Fatalf("libopenapi-validator: %v", errs)
	}
	return v
}

// TestOpenAPIDocumentIsValid31: the served document is the embedded one, it
// is OpenAPI 3.1 and valid against the 3.1 schema, and its errors are the
// real error body with every status of the error table on every route.
func TestOpenAPIDocumentIsValid31(t *testing.T) {
	t.Parallel()
	v := openAPIValidator(t)
	if ok, errs := v.ValidateDocument(); !ok {
		for _, e := range errs {
			t.Errorf("invalid OpenAPI document: %v", e)
		}
	}
	var doc struct {
		OpenAPI string                               `json:"openapi"`
		Paths   map[string]map[string]map[string]any `json:"paths"`
		Comps   struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"properties"`
				Enum []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapi.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	if _, ok := doc.Comps.Schemas["googleRpcStatus"]; ok {
		t.Error("the document still describes errors as google.rpc.Status")
	}
	var codes []string
	for c := range server.HTTPStatuses() {
		codes = append(codes, string(c))
	}
	slices.Sort(codes)
	got := slices.Sorted(slices.Values(doc.Comps.Schemas["ErrorCode"].Enum))
	if !slices.Equal(got, codes) {
		t.Errorf("ErrorCode enum %v, want the codes of server/errors.go %v", got, codes)
	}
	if p := doc.Comps.Schemas["Error"].Properties["error"].Properties; p["code"] == nil || p["message"] == nil || p["field"] == nil {
		t.Errorf("Error is not {error: {code, message, field}}: %v", p)
	}
	for path, ops := range doc.Paths {
		for verb, op := range ops {
			responses := op["responses"].(map[string]any)
			for _, st := range server.HTTPStatuses() {
				if responses[strconv.Itoa(st)] == nil {
					t.Errorf("%s %s does not document HTTP %d", verb, path, st)
				}
			}
		}
	}

	// The validator is not a rubber stamp: wrong bodies fail it.
	for _, bad := range []struct {
		status int
		body   string
	}{
		{200, `{}`}, // EmitUnpopulated: every field is present
		{200, `{"operation": null, "created": "yes", "claimed": false, "attempt": 0, "lease_until": null, "retry_after_seconds": 0, "next": "NEXT_STEP_CLAIM", "lease_seconds": 0}`},
		{409, `{"error": {"code": "NOPE", "message": "m"}}`},
		{422, `{"code": 9, "message": "google.rpc.Status", "details": []}`},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://journal/v1/operations:register", strings.NewReader(`{"operation_key": "k"}`))
		req.Header.Set("Content-Type", "application/json")
		resp := &http.Response{StatusCode: bad.status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(bad.body)), Request: req}
		if ok, _ := v.ValidateHttpResponse(req, resp); ok {
			t.Errorf("HTTP %d %s passes the validator", bad.status, bad.body)
		}
	}

	srv := startServer(t, "--database-url", sqliteURL(t))
	r := do(t, http.MethodGet, srv.BaseURL+"/openapi.json", nil)
	if r.Status != http.StatusOK || !bytes.Equal(r.Body, openapi.JSON) {
		t.Fatalf("GET /openapi.json: %d, %d bytes; want the embedded document (%d bytes)", r.Status, len(r.Body), len(openapi.JSON))
	}
}

// routeCheck calls the REST mirror and validates each request and its real
// response against the document, noting which routes answered a success
// and which an error.
type routeCheck struct {
	t       *testing.T
	v       validator.Validator
	base    string
	doc     map[string]map[string]map[string]any // path → verb → operation
	success map[string]bool                      // "VERB /path"
	failure map[string]bool
}

// call sends method path?query with body (JSON text, "" for none) and
// token, validates both sides, checks the status is want and documented
// for the route, and returns the decoded response.
func (c *routeCheck) call(token, method, target, body string, want int) map[string]any {
	c.t.Helper()
	newReq := func() *http.Request {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, c.base+target, rd)
		if err != nil {
			c.t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return req
	}
	resp, err := http.DefaultClient.Do(newReq())
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, target, err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	route := method + " " + strings.SplitN(target, "?", 2)[0]
	if resp.StatusCode != want {
		c.t.Fatalf("%s: HTTP %d, want %d: %s", target, resp.StatusCode, want, data)
	}
	op := c.doc[strings.SplitN(target, "?", 2)[0]][strings.ToLower(method)]
	if op == nil {
		c.t.Fatalf("%s is not in the OpenAPI document", route)
	}
	if op["responses"].(map[string]any)[strconv.Itoa(resp.StatusCode)] == nil {
		c.t.Errorf("%s answered HTTP %d, which the document does not list for it", route, resp.StatusCode)
	}
	// The validator reads the bodies: give it fresh copies.
	resp.Body = io.NopCloser(bytes.NewReader(data))
	if ok, errs := c.v.ValidateHttpRequestResponse(newReq(), resp); !ok {
		for _, e := range errs {
			c.t.Errorf("%s → %d %s\n  does not match the OpenAPI document: %v", target, resp.StatusCode, data, e)
		}
	}
	if resp.StatusCode == http.StatusOK {
		c.success[route] = true
	} else {
		c.failure[route] = true
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		c.t.Fatalf("%s: not JSON: %s", target, data)
	}
	// An error's status is the one the table gives its code.
	if e, ok := out["error"].(map[string]any); ok && resp.StatusCode != http.StatusOK {
		if code, _ := e["code"].(string); server.HTTPStatus(opjournal.Code(code)) != resp.StatusCode {
			c.t.Errorf("%s: HTTP %d with code %s, which server/errors.go maps to %d", target, resp.StatusCode, code, server.HTTPStatus(opjournal.Code(code)))
		}
	}
	return out
}

// TestOpenAPIMatchesEveryRoute runs every route of the document on the real
// binary (with authentication) with a success and errors, and validates
// each request and its real response with libopenapi-validator. A route
// added to the document without a case here fails the test.
func TestOpenAPIMatchesEveryRoute(t *testing.T) {
	t.Parallel()
	const (
		admin   = "tok-openapi-admin-5e4d3c2b1a09f8e7"
		metrics = "tok-openapi-metric-0a1b2c3d4e5f6a7b"
	)
	dir := t.TempDir()
	authFile := filepath.Join(dir, "tokens.yaml")
	tokensYAML := fmt.Sprintf("tokens:\n  - name: admin\n    sha256: %s\n    tenant: t\n    roles: [admin]\n"+
		"  - name: metrics\n    sha256: %s\n    tenant: t\n    roles: [metrics]\n", auth.Digest(admin), auth.Digest(metrics))
	if err := os.WriteFile(authFile, []byte(tokensYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	// The shipped create_payment, but a proven absence may be released a
	// second after the attempt (not two minutes).
	policyFile := filepath.Join(dir, "policy.yaml")
	pol := `actions:
  create_payment:
    integer_fields: [amount_minor]
    retry: {on_timeout: reconcile_before_retry}
    reconcile: {definitive_absence: true, visibility_lag: 0s, in_flight_window: 1s}
  approved_payment:
    approval: {required: true, distinct_from_requester: false}
  capped_email:
    budgets: [{name: one-a-day, count: true, window: 24h, limit: 1, on_exceed: reject}]
`
	if err := os.WriteFile(policyFile, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, "--database-url", sqliteURL(t), "--auth-file", authFile, "--policy", policyFile)

	var doc struct {
		Paths map[string]map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openapi.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	c := &routeCheck{t: t, v: openAPIValidator(t), base: srv.BaseURL, doc: doc.Paths,
		success: map[string]bool{}, failure: map[string]bool{}}
	post := func(token, verb string, body map[string]any, want int) map[string]any {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		return c.call(token, http.MethodPost, "/v1/operations:"+verb, string(b), want)
	}
	wantCode := func(r map[string]any, code opjournal.Code) {
		t.Helper()
		if e, _ := r["error"].(map[string]any); e == nil || e["code"] != string(code) {
			t.Fatalf("error %v, want %s", r, code)
		}
	}
	payload := map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
	const key = "payment:order-817:intent-01"
	const key2 = "payment:order-817:intent-02"
	q := url.QueryEscape

	// Every route refuses a caller without a token (401) and one whose role
	// does not allow it (403), in the documented error body.
	for path, ops := range doc.Paths {
		for verb := range ops {
			method, body := strings.ToUpper(verb), ""
			if method == http.MethodPost {
				body = `{"operation_key": "k"}`
			}
			wantCode(c.call("", method, path, body, http.StatusUnauthorized), opjournal.CodeUnauthenticated)
			if path == "/v1/whoami" {
				c.call(metrics, method, path, body, http.StatusOK) // any authenticated caller may ask who it is
				continue
			}
			wantCode(c.call(metrics, method, path, body, http.StatusForbidden), opjournal.CodePermissionDenied)
		}
	}

	// Register with a claim, then the refusals of Register.
	r := post(admin, "register", map[string]any{"operation_key": key, "action_type": "create_payment", "payload": payload,
		"refs": map[string]any{"order_id": "817"}, "claim": map[string]any{"worker_id": "openapi-agent"}}, http.StatusOK)
	if r["created"] != true || r["claimed"] != true || r["attempt"] != 1.0 {
		t.Fatalf("register: %v", r)
	}
	wantCode(post(admin, "register", map[string]any{"operation_key": "k", "action_type": "no_such_action", "payload": payload}, http.StatusBadRequest), opjournal.CodeUnknownAction)
	wantCode(c.call(admin, http.MethodPost, "/v1/operations:register", `{"operation_key": "k", "payload": {"blob": "`+strings.Repeat("x", 2<<20)+`"}}`, http.StatusRequestEntityTooLarge), opjournal.CodeTooLarge)

	// Claim: a second worker is told to wait; a missing key is refused.
	r = post(admin, "claim", map[string]any{"operation_key": key, "worker_id": "other-agent"}, http.StatusOK)
	if r["claimed"] != false {
		t.Fatalf("claim: %v", r)
	}
	wantCode(post(admin, "claim", map[string]any{"operation_key": "payment:missing", "worker_id": "w"}, http.StatusNotFound), opjournal.CodeNotFound)

	// ExtendLease by the holder; a stale attempt is refused.
	post(admin, "extendLease", map[string]any{"operation_key": key, "attempt": 1}, http.StatusOK)

	// MarkSucceeded; then the replay and the conflict.
	r = post(admin, "markSucceeded", map[string]any{"operation_key": key, "attempt": 1, "external_id": "pay_5f2c",
		"result": map[string]any{"payment_id": "pay_5f2c"}}, http.StatusOK)
	if r["operation"].(map[string]any)["status"] != "STATUS_SUCCEEDED" {
		t.Fatalf("markSucceeded: %v", r)
	}
	wantCode(post(admin, "extendLease", map[string]any{"operation_key": key, "attempt": 1}, http.StatusConflict), opjournal.CodeStaleAttempt)
	wantCode(post(admin, "markSucceeded", map[string]any{"operation_key": "payment:missing", "attempt": 1, "external_id": "x"}, http.StatusNotFound), opjournal.CodeNotFound)
	r = post(admin, "register", map[string]any{"operation_key": key, "action_type": "create_payment", "payload": payload,
		"refs": map[string]any{"order_id": "817"}}, http.StatusOK)
	if r["created"] != false || r["operation"].(map[string]any)["result"].(map[string]any)["payment_id"] != "pay_5f2c" {
		t.Fatalf("replay: %v", r)
	}
	wantCode(post(admin, "register", map[string]any{"operation_key": key, "action_type": "create_payment",
		"payload": map[string]any{"order_id": "817", "amount_minor": 500000, "currency": "RUB"}}, http.StatusUnprocessableEntity), opjournal.CodePayloadMismatch)

	// A second intent: unknown, a check, an escalation, a resolution, an
	// acknowledgement.
	post(admin, "register", map[string]any{"operation_key": key2, "action_type": "create_payment", "payload": payload,
		"parent_key": key, "claim": map[string]any{"worker_id": "openapi-agent"}}, http.StatusOK)
	post(admin, "markUnknown", map[string]any{"operation_key": key2, "attempt": 1, "error_code": "timeout"}, http.StatusOK)
	wantCode(post(admin, "markUnknown", map[string]any{"operation_key": key2, "attempt": 1, "error_code": "timeout"}, http.StatusConflict), opjournal.CodeStaleAttempt)
	wantCode(post(admin, "markFailedFinal", map[string]any{"operation_key": key2, "attempt": 1, "error_code": "late"}, http.StatusConflict), opjournal.CodeStaleAttempt)
	post(admin, "recordCheck", map[string]any{"operation_key": key2, "attempt": 1, "actor": "openapi-reconciler",
		"note": "provider did not answer", "next_check_after_seconds": 60}, http.StatusOK)
	wantCode(post(admin, "recordCheck", map[string]any{"operation_key": key2, "attempt": 1, "actor": "openapi-reconciler",
		"note": "n", "next_check_after_seconds": 999999}, http.StatusBadRequest), opjournal.CodeInvalidArgument)
	wantCode(post(admin, "releaseForRetry", map[string]any{"operation_key": "payment:missing", "attempt": 1, "actor": "openapi-reconciler",
		"reason": "absent"}, http.StatusNotFound), opjournal.CodeNotFound)
	post(admin, "escalate", map[string]any{"operation_key": key2, "actor": "openapi-reconciler", "reason": "provider unsure"}, http.StatusOK)
	wantCode(post(admin, "escalate", map[string]any{"operation_key": "payment:missing", "actor": "a", "reason": "r"}, http.StatusNotFound), opjournal.CodeNotFound)
	wantCode(post(admin, "acknowledge", map[string]any{"operation_key": key2, "actor": "openapi-operator", "reason": "not terminal yet"}, http.StatusConflict), opjournal.CodeInvalidState)
	post(admin, "resolve", map[string]any{"operation_key": key2, "resolution": "RESOLUTION_SUCCEEDED", "external_id": "pay_77aa",
		"actor": "openapi-operator", "reason": "found in the provider's dashboard"}, http.StatusOK)
	wantCode(post(admin, "resolve", map[string]any{"operation_key": key2, "resolution": "RESOLUTION_FAILED_FINAL", "error_code": "x",
		"actor": "openapi-operator", "reason": "again"}, http.StatusConflict), opjournal.CodeInvalidState)

	// A duplicate effect puts a terminal operation under review, which
	// Acknowledge clears.
	post(admin, "markSucceeded", map[string]any{"operation_key": key, "attempt": 1, "external_id": "pay_other"}, http.StatusOK)
	post(admin, "acknowledge", map[string]any{"operation_key": key, "actor": "openapi-operator", "reason": "refunded the duplicate"}, http.StatusOK)

	// An operator's note, on a terminal operation; a control character is
	// refused.
	r = post(admin, "note", map[string]any{"operation_key": key, "note": "refund confirmed\nticket 4711"}, http.StatusOK)
	if r["operation"].(map[string]any)["note"] != "refund confirmed\nticket 4711" {
		t.Fatalf("note: %v", r)
	}
	wantCode(post(admin, "note", map[string]any{"operation_key": key, "note": "bell\a"}, http.StatusBadRequest), opjournal.CodeInvalidArgument)

	// Approvals: a request awaiting one, approved (another hash is
	// refused), and one rejected.
	for _, k := range []string{"approve-me", "reject-me"} {
		r = post(admin, "register", map[string]any{"operation_key": k, "action_type": "approved_payment", "payload": payload}, http.StatusOK)
		if r["next"] != "NEXT_STEP_AWAIT_APPROVAL" {
			t.Fatalf("register awaiting approval: %v", r)
		}
	}
	hash := r["operation"].(map[string]any)["request_hash"]
	wantCode(post(admin, "approve", map[string]any{"operation_key": "approve-me", "request_hash": "other", "reason": "ok"}, http.StatusUnprocessableEntity), opjournal.CodePayloadMismatch)
	r = post(admin, "approve", map[string]any{"operation_key": "approve-me", "request_hash": hash, "reason": "ok"}, http.StatusOK)
	if r["released"] != true {
		t.Fatalf("approve: %v", r)
	}
	wantCode(post(admin, "reject", map[string]any{"operation_key": "approve-me", "request_hash": hash, "reason": "no"}, http.StatusConflict), opjournal.CodeInvalidState)
	post(admin, "reject", map[string]any{"operation_key": "reject-me", "request_hash": hash, "reason": "no", "error_code": "not_wanted"}, http.StatusOK)
	wantCode(c.call(admin, http.MethodGet, "/v1/operations:lookup?operation_key=reject-me&wait_seconds=61", "", http.StatusBadRequest), opjournal.CodeInvalidArgument)

	// A pending operation released after a proven absence.
	const key3 = "payment:order-817:intent-03"
	post(admin, "register", map[string]any{"operation_key": key3, "action_type": "create_payment", "payload": payload,
		"claim": map[string]any{"worker_id": "openapi-agent"}}, http.StatusOK)
	post(admin, "markUnknown", map[string]any{"operation_key": key3, "attempt": 1, "error_code": "timeout"}, http.StatusOK)
	time.Sleep(1200 * time.Millisecond) // the policy's in_flight_window
	post(admin, "releaseForRetry", map[string]any{"operation_key": key3, "attempt": 1, "actor": "openapi-reconciler",
		"reason": "absent at provider"}, http.StatusOK)
	post(admin, "claim", map[string]any{"operation_key": key3, "worker_id": "openapi-agent"}, http.StatusOK)
	post(admin, "markFailedFinal", map[string]any{"operation_key": key3, "attempt": 2, "error_code": "card_declined",
		"result": map[string]any{"status": 402}}, http.StatusOK)

	// The reads.
	c.call(admin, http.MethodGet, "/v1/operations:lookup?operation_key="+q(key), "", http.StatusOK)
	c.call(admin, http.MethodGet, "/v1/operations:lookup?operation_key="+q(key)+"&view=OPERATION_VIEW_BASIC", "", http.StatusOK)
	wantCode(c.call(admin, http.MethodGet, "/v1/operations:lookup?operation_key="+q("payment:missing"), "", http.StatusNotFound), opjournal.CodeNotFound)
	r = c.call(admin, http.MethodGet, "/v1/operations?statuses=STATUS_SUCCEEDED&statuses=STATUS_FAILED_FINAL&refs%5Border_id%5D=817&view=OPERATION_VIEW_FULL&page_size=10", "", http.StatusOK)
	if ops, _ := r["operations"].([]any); len(ops) != 1 {
		t.Fatalf("ListOperations by refs: %v", r)
	}
	c.call(admin, http.MethodGet, "/v1/operations?parent_key="+q(key)+"&needs_review=false&action_type=create_payment&due_for_check=false", "", http.StatusOK)
	wantCode(c.call(admin, http.MethodGet, "/v1/operations?page_token=not-a-token", "", http.StatusBadRequest), opjournal.CodeInvalidArgument)
	c.call(admin, http.MethodGet, "/v1/operations:events?operation_key="+q(key2)+"&page_size=2", "", http.StatusOK)
	wantCode(c.call(admin, http.MethodGet, "/v1/operations:events?operation_key="+q(key2)+"&page_token=not-a-token", "", http.StatusBadRequest), opjournal.CodeInvalidArgument)
	c.call(admin, http.MethodGet, "/v1/policy", "", http.StatusOK)

	// Budgets: the counters, and a registration past one (429 BUDGET_EXCEEDED
	// with its details).
	post(admin, "register", map[string]any{"operation_key": "capped-1", "action_type": "capped_email", "payload": map[string]any{"to": "a"}}, http.StatusOK)
	wantCode(post(admin, "register", map[string]any{"operation_key": "capped-2", "action_type": "capped_email", "payload": map[string]any{"to": "b"}}, http.StatusTooManyRequests), opjournal.CodeBudgetExceeded)
	r = c.call(admin, http.MethodGet, "/v1/budgets?action_type=capped_email&budget=one-a-day", "", http.StatusOK)
	if bs, _ := r["budgets"].([]any); len(bs) != 1 || bs[0].(map[string]any)["used"] != "1" {
		t.Fatalf("ListBudgets: %v", r)
	}
	c.call(admin, http.MethodGet, "/v1/budgets", "", http.StatusOK)
	wantCode(c.call(admin, http.MethodGet, "/v1/budgets?budget=nope", "", http.StatusBadRequest), opjournal.CodeInvalidArgument)

	// Over the tenant's rate: 429 RATE_LIMITED with Retry-After.
	limited := startServer(t, "--database-url", sqliteURL(t), "--rate-limit", "0.01", "--rate-burst", "1")
	lc := *c
	lc.base = limited.BaseURL
	lc.call("", http.MethodGet, "/v1/policy", "", http.StatusOK)
	wantCode(lc.call("", http.MethodGet, "/v1/policy", "", http.StatusTooManyRequests), opjournal.CodeRateLimited)

	for path, ops := range doc.Paths {
		for verb := range ops {
			route := strings.ToUpper(verb) + " " + path
			if !c.success[route] {
				t.Errorf("%s: no successful call checked against the document", route)
			}
			if !c.failure[route] {
				t.Errorf("%s: no error checked against the document", route)
			}
		}
	}
}
