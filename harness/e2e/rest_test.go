package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	_ "modernc.org/sqlite" // to count rows in the server's SQLite file

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestRESTWalkthrough drives one operation through its life over REST with
// plain net/http and checks the wire format, OpenAPI, metrics and health.
func TestRESTWalkthrough(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	const key = "payment:order-900:intent-01"
	payload := map[string]any{"amount_minor": 125000, "currency": "EUR", "order_id": "order-900"}

	// Register (the FULL view: the stored payload comes back too).
	r := post(t, srv, "register", map[string]any{"operation_key": key, "action_type": "create_payment", "payload": payload, "view": "OPERATION_VIEW_FULL"})
	if r.Status != http.StatusOK {
		t.Fatalf("register: %d %s", r.Status, r.Body)
	}
	reg := r.JSON(t)
	checkSnakeCase(t, reg)
	op := reg["operation"].(map[string]any)
	for _, f := range []string{"operation_key", "action_type", "request_hash", "status", "attempt_count", "created_at", "updated_at", "payload"} {
		if _, ok := op[f]; !ok {
			t.Errorf("register response operation lacks %q: %s", f, r.Body)
		}
	}
	if reg["created"] != true || op["status"] != "STATUS_PENDING" || op["attempt_count"] != 0.0 || op["operation_key"] != key {
		t.Fatalf("register: %s", r.Body)
	}
	hash := op["request_hash"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(hash) {
		t.Fatalf("request_hash %q is not lowercase hex SHA-256", hash)
	}

	// Claim.
	r = post(t, srv, "claim", map[string]any{"operation_key": key, "worker_id": "rest-worker"})
	if r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	cl := r.JSON(t)
	checkSnakeCase(t, cl)
	if cl["claimed"] != true || cl["attempt"] != 1.0 || cl["lease_until"] == nil ||
		cl["operation"].(map[string]any)["status"] != "STATUS_IN_PROGRESS" {
		t.Fatalf("claim: %s", r.Body)
	}

	// MarkSucceeded.
	r = post(t, srv, "markSucceeded", map[string]any{
		"operation_key": key, "attempt": 1, "external_id": "pay_900",
		"result": map[string]any{"payment_id": "pay_900", "receipt": nil},
	})
	if r.Status != http.StatusOK {
		t.Fatalf("markSucceeded: %d %s", r.Status, r.Body)
	}
	ms := r.JSON(t)
	checkSnakeCase(t, ms)
	if o := ms["operation"].(map[string]any); o["status"] != "STATUS_SUCCEEDED" || o["external_id"] != "pay_900" {
		t.Fatalf("markSucceeded: %s", r.Body)
	}

	// Replay: same key, same request (other member order, a null member).
	r = post(t, srv, "register", `{"payload": {"order_id": "order-900", "note": null, "currency": "EUR", "amount_minor": 1.25e5},
		"action_type": "create_payment", "operation_key": "`+key+`"}`)
	if r.Status != http.StatusOK {
		t.Fatalf("replay: %d %s", r.Status, r.Body)
	}
	rep := r.JSON(t)
	o := rep["operation"].(map[string]any)
	if rep["created"] != false || o["request_hash"] != hash || o["status"] != "STATUS_SUCCEEDED" {
		t.Fatalf("replay: %s", r.Body)
	}
	if res, _ := o["result"].(map[string]any); len(res) != 1 || res["payment_id"] != "pay_900" {
		t.Fatalf("replay result %v, want {payment_id: pay_900} (null members dropped)", o["result"])
	}

	// Conflict: same key, another amount.
	r = post(t, srv, "register", map[string]any{"operation_key": key, "action_type": "create_payment",
		"payload": map[string]any{"amount_minor": 125001, "currency": "EUR", "order_id": "order-900"}})
	wantRESTError(t, r, http.StatusUnprocessableEntity, opjournal.CodePayloadMismatch, "payload")

	// A stale attempt: the operation is no longer in progress.
	r = post(t, srv, "markUnknown", map[string]any{"operation_key": key, "attempt": 1, "error_code": "timeout"})
	wantRESTError(t, r, http.StatusConflict, opjournal.CodeStaleAttempt, "attempt")

	// The record is unchanged by the conflict and the stale call.
	r = do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key="+url.QueryEscape(key), nil)
	if r.Status != http.StatusOK {
		t.Fatalf("lookup: %d %s", r.Status, r.Body)
	}
	lk := r.JSON(t)
	checkSnakeCase(t, lk)
	if lo := lk["operation"].(map[string]any); lo["status"] != "STATUS_SUCCEEDED" || lo["attempt_count"] != 1.0 ||
		lo["error_code"] != "" || lo["needs_review"] != false || lo["request_hash"] != hash {
		t.Fatalf("lookup after conflict and stale call: %s", r.Body)
	}

	// Lookup of a missing key.
	r = do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key=payment:order-900:intent-02", nil)
	wantRESTError(t, r, http.StatusNotFound, opjournal.CodeNotFound, "operation_key")

	// A key using every awkward visible ASCII character round-trips
	// through the query string.
	odd := `ticket:a+b/c?d&e=f#g%h;i"j'k<l>m\n` + "`|~"
	r = post(t, srv, "register", map[string]any{"operation_key": odd, "action_type": "send_email", "payload": map[string]any{"to": "a@example.com"}})
	if r.Status != http.StatusOK {
		t.Fatalf("register %q: %d %s", odd, r.Status, r.Body)
	}
	r = do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key="+url.QueryEscape(odd), nil)
	if r.Status != http.StatusOK || r.JSON(t)["operation"].(map[string]any)["operation_key"] != odd {
		t.Fatalf("lookup %q: %d %s", odd, r.Status, r.Body)
	}

	// OpenAPI.
	r = do(t, http.MethodGet, srv.BaseURL+"/openapi.json", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("openapi.json: %d", r.Status)
	}
	var spec struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.Body, &spec); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	for path, method := range map[string]string{
		"/v1/operations:register": "post", "/v1/operations:claim": "post", "/v1/operations:markSucceeded": "post",
		"/v1/operations:markUnknown": "post", "/v1/operations:markFailedFinal": "post", "/v1/operations:lookup": "get",
	} {
		if _, ok := spec.Paths[path][method]; !ok {
			t.Errorf("openapi.json has no %s %s (paths: %v)", method, path, keys(spec.Paths))
		}
	}

	// Metrics count what happened.
	r = do(t, http.MethodGet, srv.BaseURL+"/metrics", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("metrics: %d", r.Status)
	}
	metrics := string(r.Body)
	for outcome, n := range map[string]int{
		"registered": 1, "claim_won": 1, "succeeded": 1, "replayed": 1, "conflict": 1, "stale_attempt": 1,
	} {
		line := fmt.Sprintf(`opjournal_operations_total{action="create_payment",outcome=%q} %d`, outcome, n)
		if !hasLine(metrics, line) {
			t.Errorf("metrics lack %s; got:\n%s", line, grepLines(metrics, "opjournal_operations_total"))
		}
	}
	// The server's logger never fell behind its stderr here; the counter
	// is there to say so.
	if !hasLine(metrics, "opjournal_log_lines_dropped_total 0") {
		t.Errorf("metrics lack opjournal_log_lines_dropped_total 0:\n%s", grepLines(metrics, "opjournal_log_lines"))
	}
	for _, absent := range []string{"claim_lost", "unknown", "failed_final", "duplicate_effect"} {
		if strings.Contains(metrics, `action="create_payment",outcome="`+absent+`"`) {
			t.Errorf("metrics count a create_payment %s that never happened:\n%s", absent, grepLines(metrics, "opjournal_operations_total"))
		}
	}

	// Health.
	r = do(t, http.MethodGet, srv.BaseURL+"/healthz", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("healthz: %d %s", r.Status, r.Body)
	}
}

var camelCase = regexp.MustCompile(`[A-Z]`)

// checkSnakeCase fails if any member name outside payload and result (the
// caller's own data) has an upper-case letter.
func checkSnakeCase(t *testing.T, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if camelCase.MatchString(k) {
				t.Errorf("response member %q is not snake_case", k)
			}
			if k != "payload" && k != "result" {
				checkSnakeCase(t, e)
			}
		}
	case []any:
		for _, e := range v {
			checkSnakeCase(t, e)
		}
	}
}

func hasLine(text, line string) bool {
	for l := range strings.SplitSeq(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func grepLines(text, substr string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, substr) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// badCase is one bad request and the answer it must get.
type badCase struct {
	name   string
	method string // default POST
	path   string // /v1/operations:VERB…
	body   any    // string, []byte, or io.Reader (sent chunked)
	status int
	code   opjournal.Code
	field  string
	// key is a syntactically valid key the request named, which must not
	// exist afterwards.
	key string
}

// TestBadInputIsRejectedAndChangesNothing sends bad requests over REST and
// gRPC: each gets its documented status, code and field (never a 500), the
// existing records stay exactly as they were, nothing new is stored, and
// the server keeps serving.
func TestBadInputIsRejectedAndChangesNothing(t *testing.T) {
	t.Parallel()
	dbURL := sqliteURL(t)
	srv := startServer(t, "--database-url", dbURL)
	c, ctx := srv.Client, ctxFor(t)

	// Two records the bad requests aim at: one pending, one claimed.
	pay := func(amount int) *structpb.Struct {
		return mustStruct(t, fmt.Sprintf(`{"order_id": "817", "amount_minor": %d, "currency": "RUB"}`, amount))
	}
	if _, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "snap-pending", ActionType: "create_payment", Payload: pay(100)}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "snap-claimed", ActionType: "create_payment", Payload: pay(200),
		Claim: &pb.ClaimOptions{WorkerId: "holder"}}); err != nil || !res.GetClaimed() {
		t.Fatalf("register snap-claimed: %v %v", res, err)
	}
	snapshot := map[string]*pb.Operation{
		"snap-pending": lookup(t, ctx, c, "snap-pending"),
		"snap-claimed": lookup(t, ctx, c, "snap-claimed"),
	}

	reg := func(key, action, payload string) string {
		return fmt.Sprintf(`{"operation_key": %q, "action_type": %q, "payload": %s}`, key, action, payload)
	}
	long := func(n int) string { return strings.Repeat("k", n) }
	bigPayload := `{"body": "` + strings.Repeat("x", 70<<10) + `"}`
	hugeBody := reg("bad-huge-body", "send_email", `{"body": "`+strings.Repeat("x", 1<<20)+`"}`)
	bigResult := `{"text": "` + strings.Repeat("x", 70<<10) + `"}`

	const (
		bad400 = http.StatusBadRequest
		bad404 = http.StatusNotFound
		bad413 = http.StatusRequestEntityTooLarge
	)
	inv, unk, tl, nf := opjournal.CodeInvalidArgument, opjournal.CodeUnknownAction, opjournal.CodeTooLarge, opjournal.CodeNotFound
	cases := []badCase{
		// Keys.
		{name: "key with a space", path: "register", body: reg("bad key", "create_payment", `{}`), status: bad400, code: inv, field: "operation_key"},
		{name: "key with non-ASCII", path: "register", body: reg("bad-ключ", "create_payment", `{}`), status: bad400, code: inv, field: "operation_key"},
		{name: "key with a control character", path: "register", body: reg("bad\tkey", "create_payment", `{}`), status: bad400, code: inv, field: "operation_key"},
		{name: "key of 201 characters", path: "register", body: reg(long(201), "create_payment", `{}`), status: bad400, code: inv, field: "operation_key"},
		{name: "empty key", path: "register", body: reg("", "create_payment", `{}`), status: bad400, code: inv, field: "operation_key"},
		{name: "no key", path: "register", body: `{"action_type": "create_payment", "payload": {}}`, status: bad400, code: inv, field: "operation_key"},
		// Payloads.
		{name: "missing payload", path: "register", body: `{"operation_key": "bad-no-payload", "action_type": "create_payment"}`, status: bad400, code: inv, field: "payload", key: "bad-no-payload"},
		{name: "payload an array", path: "register", body: reg("bad-payload-array", "create_payment", `[1]`), status: bad400, code: inv, field: "payload", key: "bad-payload-array"},
		{name: "payload a string", path: "register", body: reg("bad-payload-string", "create_payment", `"x"`), status: bad400, code: inv, field: "payload", key: "bad-payload-string"},
		{name: "payload with a duplicate member", path: "register", body: reg("bad-payload-dup", "create_payment", `{"a": 1, "a": 2}`), status: bad400, code: inv, field: "payload/a", key: "bad-payload-dup"},
		{name: "payload over 64 KiB canonical", path: "register", body: reg("bad-too-large", "send_email", bigPayload), status: bad413, code: tl, field: "payload", key: "bad-too-large"},
		{name: "amount_minor 4900.5", path: "register", body: reg("bad-fraction", "create_payment", `{"amount_minor": 4900.5}`), status: bad400, code: inv, field: "payload/amount_minor", key: "bad-fraction"},
		{name: "amount_minor 9007199254740993", path: "register", body: reg("bad-unsafe-int", "create_payment", `{"amount_minor": 9007199254740993}`), status: bad400, code: inv, field: "payload/amount_minor", key: "bad-unsafe-int"},
		// A fraction that a double rounds to an integer: only the JSON text
		// shows it is not one, and it must not be silently rounded.
		{name: "amount_minor 4900.0000000000000001", path: "register", body: reg("bad-rounded-fraction", "create_payment", `{"amount_minor": 4900.0000000000000001}`), status: bad400, code: inv, field: "payload/amount_minor", key: "bad-rounded-fraction"},
		{name: "number beyond 2^53 in any member", path: "register", body: reg("bad-unsafe-any", "send_email", `{"nested": {"n": 1e16}}`), status: bad400, code: inv, field: "payload/nested/n", key: "bad-unsafe-any"},
		{name: "number overflowing a double", path: "register", body: reg("bad-overflow", "send_email", `{"n": 1e400}`), status: bad400, code: inv, field: "payload/n", key: "bad-overflow"},
		{name: "payload nested deeper than 64", path: "register", body: reg("bad-deep", "send_email", `{"a": `+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`), status: bad400, code: inv, field: "body", key: "bad-deep"},
		// Deep enough that protobuf's default recursion limit would refuse
		// the message the gateway forwards (once a 500).
		{name: "payload nested 5000 levels", path: "register", body: reg("bad-deeper", "send_email", `{"a": `+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)+`}`), status: bad400, code: inv, field: "body", key: "bad-deeper"},
		// Actions.
		{name: "unknown action", path: "register", body: reg("bad-unknown-action", "wire_money", `{}`), status: bad400, code: unk, field: "action_type", key: "bad-unknown-action"},
		{name: "action_type missing", path: "register", body: `{"operation_key": "bad-no-action", "payload": {}}`, status: bad400, code: inv, field: "action_type", key: "bad-no-action"},
		{name: "action_type of 81 characters", path: "register", body: reg("bad-long-action", long(81), `{}`), status: bad400, code: inv, field: "action_type", key: "bad-long-action"},
		// Bodies.
		{name: "malformed JSON body", path: "register", body: `{"operation_key": "bad-malformed", `, status: bad400, code: inv, field: "body"},
		{name: "body not an object", path: "register", body: `[{"operation_key": "bad-array-body"}]`, status: bad400, code: inv, field: "body"},
		{name: "body null", path: "register", body: `null`, status: bad400, code: inv, field: "body"},
		{name: "empty body", path: "register", body: ``, status: bad400, code: inv, field: "body"},
		{name: "data after the body", path: "register", body: reg("bad-trailing", "send_email", `{}`) + ` {}`, status: bad400, code: inv, field: "body", key: "bad-trailing"},
		{name: "unknown body field", path: "register", body: `{"operation_key": "bad-unknown-field", "action_type": "send_email", "payload": {}, "priority": 1}`, status: bad400, code: inv, field: "priority", key: "bad-unknown-field"},
		{name: "body over the request limit", path: "register", body: hugeBody, status: bad413, code: tl, field: "body", key: "bad-huge-body"},
		{name: "chunked body over the request limit", path: "register", body: io.MultiReader(strings.NewReader(hugeBody)), status: bad413, code: tl, field: "body", key: "bad-huge-body"},
		// Claims.
		{name: "register with lease_seconds 31", path: "register", body: `{"operation_key": "bad-reg-lease", "action_type": "create_payment", "payload": {}, "claim": {"worker_id": "w", "lease_seconds": 31}}`, status: bad400, code: inv, field: "claim.lease_seconds", key: "bad-reg-lease"},
		{name: "register with claim but no worker", path: "register", body: `{"operation_key": "bad-reg-worker", "action_type": "create_payment", "payload": {}, "claim": {}}`, status: bad400, code: inv, field: "claim.worker_id", key: "bad-reg-worker"},
		{name: "claim lease_seconds 31 for create_payment", path: "claim", body: `{"operation_key": "snap-pending", "worker_id": "w", "lease_seconds": 31}`, status: bad400, code: inv, field: "lease_seconds"},
		{name: "claim negative lease", path: "claim", body: `{"operation_key": "snap-pending", "worker_id": "w", "lease_seconds": -5}`, status: bad400, code: inv, field: "lease_seconds"},
		{name: "claim lease beyond int32", path: "claim", body: `{"operation_key": "snap-pending", "worker_id": "w", "lease_seconds": 4294967297}`, status: bad400, code: inv, field: "lease_seconds"},
		{name: "claim worker_id missing", path: "claim", body: `{"operation_key": "snap-pending"}`, status: bad400, code: inv, field: "worker_id"},
		{name: "claim worker_id with a space", path: "claim", body: `{"operation_key": "snap-pending", "worker_id": "w 1"}`, status: bad400, code: inv, field: "worker_id"},
		{name: "claim of a missing key", path: "claim", body: `{"operation_key": "bad-claim-missing", "worker_id": "w"}`, status: bad404, code: nf, field: "operation_key", key: "bad-claim-missing"},
		{name: "claim with an invalid key", path: "claim", body: `{"operation_key": "bad key", "worker_id": "w"}`, status: bad400, code: inv, field: "operation_key"},
		// Marks.
		{name: "markSucceeded attempt 0", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 0, "external_id": "x"}`, status: bad400, code: inv, field: "attempt"},
		{name: "markSucceeded attempt never issued", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 2, "external_id": "x"}`, status: bad400, code: inv, field: "attempt"},
		{name: "markSucceeded attempt not a number", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": "one"}`, status: bad400, code: inv, field: "attempt"},
		{name: "external_id of 201 characters", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 1, "external_id": "` + long(201) + `"}`, status: bad400, code: inv, field: "external_id"},
		{name: "external_id with a newline", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 1, "external_id": "a\nb"}`, status: bad400, code: inv, field: "external_id"},
		{name: "result not an object", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 1, "external_id": "x", "result": [1]}`, status: bad400, code: inv, field: "result"},
		{name: "result a string", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 1, "external_id": "x", "result": "ok"}`, status: bad400, code: inv, field: "result"},
		{name: "result over 64 KiB", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 1, "external_id": "x", "result": ` + bigResult + `}`, status: bad413, code: tl, field: "result"},
		{name: "result with an unsafe number", path: "markSucceeded", body: `{"operation_key": "snap-claimed", "attempt": 1, "external_id": "x", "result": {"n": 1e300}}`, status: bad400, code: inv, field: "result/n"},
		{name: "markSucceeded of a missing key", path: "markSucceeded", body: `{"operation_key": "bad-ms-missing", "attempt": 1, "external_id": "x"}`, status: bad404, code: nf, field: "operation_key", key: "bad-ms-missing"},
		{name: "markUnknown attempt 0", path: "markUnknown", body: `{"operation_key": "snap-claimed", "attempt": 0}`, status: bad400, code: inv, field: "attempt"},
		{name: "error_code of 101 characters", path: "markUnknown", body: `{"operation_key": "snap-claimed", "attempt": 1, "error_code": "` + long(101) + `"}`, status: bad400, code: inv, field: "error_code"},
		{name: "markUnknown of a missing key", path: "markUnknown", body: `{"operation_key": "bad-mu-missing", "attempt": 1}`, status: bad404, code: nf, field: "operation_key", key: "bad-mu-missing"},
		{name: "markFailedFinal negative attempt", path: "markFailedFinal", body: `{"operation_key": "snap-claimed", "attempt": -1}`, status: bad400, code: inv, field: "attempt"},
		{name: "markFailedFinal error_code with NUL", path: "markFailedFinal", body: `{"operation_key": "snap-claimed", "attempt": 1, "error_code": "a\u0000b"}`, status: bad400, code: inv, field: "error_code"},
		{name: "markFailedFinal error_code of 101 characters", path: "markFailedFinal", body: `{"operation_key": "snap-claimed", "attempt": 1, "error_code": "` + long(101) + `"}`, status: bad400, code: inv, field: "error_code"},
		{name: "markFailedFinal of a missing key", path: "markFailedFinal", body: `{"operation_key": "bad-mf-missing", "attempt": 1}`, status: bad404, code: nf, field: "operation_key", key: "bad-mf-missing"},
		// Lookups and routes.
		{name: "lookup without a key", method: http.MethodGet, path: "lookup", status: bad400, code: inv, field: "operation_key"},
		{name: "lookup with an invalid key", method: http.MethodGet, path: "lookup?operation_key=" + url.QueryEscape("bad key"), status: bad400, code: inv, field: "operation_key"},
		{name: "lookup of a missing key", method: http.MethodGet, path: "lookup?operation_key=bad-lookup-missing", status: bad404, code: nf, field: "operation_key", key: "bad-lookup-missing"},
		{name: "unknown route", path: "delete", body: `{"operation_key": "snap-pending"}`, status: bad404, code: nf},
		// A wrong method is the client's mistake: 405, never a 5xx (which
		// clients must treat as "unknown, maybe retry").
		{name: "wrong method on a known route", method: http.MethodGet, path: "register", status: http.StatusMethodNotAllowed, code: "METHOD_NOT_ALLOWED"},
		{name: "PUT on a known route", method: http.MethodPut, path: "claim", body: `{"operation_key": "snap-pending", "worker_id": "w"}`, status: http.StatusMethodNotAllowed, code: "METHOD_NOT_ALLOWED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			r := do(t, method, srv.BaseURL+"/v1/operations:"+tc.path, tc.body)
			if r.Status >= 500 {
				t.Fatalf("server error %d: %s", r.Status, r.Body)
			}
			wantRESTError(t, r, tc.status, tc.code, tc.field)
		})
	}

	// The same over gRPC, where the transport allows it.
	big := &structpb.Struct{Fields: map[string]*structpb.Value{"body": structpb.NewStringValue(strings.Repeat("x", 70<<10))}}
	overLimit := &structpb.Struct{Fields: map[string]*structpb.Value{"body": structpb.NewStringValue(strings.Repeat("x", 300<<10))}}
	nan := &structpb.Struct{Fields: map[string]*structpb.Value{"amount_minor": structpb.NewNumberValue(math.NaN())}}
	inf := mustStruct(t, `{"outer": {"x": 1}}`)
	inf.Fields["outer"].GetStructValue().Fields["x"] = structpb.NewNumberValue(math.Inf(1))
	grpcCases := []struct {
		name  string
		call  func() error
		code  codes.Code
		oj    opjournal.Code
		field string
		key   string
	}{
		{"key with a space", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad key", ActionType: "create_payment", Payload: pay(1)})
			return err
		}, codes.InvalidArgument, inv, "operation_key", ""},
		{"key of 201 characters", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: long(201), ActionType: "create_payment", Payload: pay(1)})
			return err
		}, codes.InvalidArgument, inv, "operation_key", ""},
		{"unknown action", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-action", ActionType: "wire_money", Payload: pay(1)})
			return err
		}, codes.InvalidArgument, unk, "action_type", "bad-grpc-action"},
		{"missing payload", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-nil", ActionType: "create_payment"})
			return err
		}, codes.InvalidArgument, inv, "payload", "bad-grpc-nil"},
		{"payload over 64 KiB canonical", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-big", ActionType: "send_email", Payload: big})
			return err
		}, codes.InvalidArgument, tl, "payload", "bad-grpc-big"},
		{"message over the request limit", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-huge", ActionType: "send_email", Payload: overLimit})
			return err
		}, codes.ResourceExhausted, "", "-", "bad-grpc-huge"},
		{"NaN amount", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-nan", ActionType: "create_payment", Payload: nan})
			return err
		}, codes.InvalidArgument, inv, "payload/amount_minor", "bad-grpc-nan"},
		{"infinity deep in the payload", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-inf", ActionType: "send_email", Payload: inf})
			return err
		}, codes.InvalidArgument, inv, "payload/outer/x", "bad-grpc-inf"},
		{"amount_minor 4900.5", func() error {
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-fraction", ActionType: "create_payment",
				Payload: mustStruct(t, `{"amount_minor": 4900.5}`)})
			return err
		}, codes.InvalidArgument, inv, "payload/amount_minor", "bad-grpc-fraction"},
		{"payload nested 5000 levels", func() error {
			v := structpb.NewListValue(&structpb.ListValue{})
			for range 5000 {
				v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
			}
			_, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "bad-grpc-deep", ActionType: "send_email",
				Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"a": v}}})
			return err
		}, codes.InvalidArgument, inv, "payload/a" + strings.Repeat("/0", 63), "bad-grpc-deep"},
		{"claim lease 31", func() error {
			_, err := c.Claim(ctx, &pb.ClaimRequest{OperationKey: "snap-pending", WorkerId: "w", LeaseSeconds: 31})
			return err
		}, codes.InvalidArgument, inv, "lease_seconds", ""},
		{"NaN in a result", func() error {
			_, err := c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "snap-claimed", Attempt: 1, ExternalId: "x",
				Result: &structpb.Struct{Fields: map[string]*structpb.Value{"v": structpb.NewNumberValue(math.NaN())}}})
			return err
		}, codes.InvalidArgument, inv, "result/v", ""},
		{"markUnknown of a missing key", func() error {
			_, err := c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: "bad-grpc-missing", Attempt: 1})
			return err
		}, codes.NotFound, nf, "operation_key", "bad-grpc-missing"},
	}
	for _, tc := range grpcCases {
		t.Run("grpc/"+tc.name, func(t *testing.T) {
			wantGRPCError(t, tc.call(), tc.code, tc.oj, tc.field)
		})
	}

	// Nothing changed.
	for key, want := range snapshot {
		if got := lookup(t, ctx, c, key); !proto.Equal(got, want) {
			t.Errorf("%s changed:\nbefore %v\nafter  %v", key, want, got)
		}
	}
	var missing []string
	for _, tc := range cases {
		if tc.key != "" {
			missing = append(missing, tc.key)
		}
	}
	for _, tc := range grpcCases {
		if tc.key != "" {
			missing = append(missing, tc.key)
		}
	}
	for _, key := range missing {
		_, err := c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
		if err == nil {
			t.Errorf("a bad request stored %q", key)
			continue
		}
		wantGRPCError(t, err, codes.NotFound, nf, "operation_key")
	}
	if n := countRows(t, dbURL); n != len(snapshot) {
		t.Errorf("the database holds %d operations, want only the %d registered before the bad requests", n, len(snapshot))
	}

	// The server is alive and serving.
	if srv.Exited() {
		t.Fatal("the server exited")
	}
	if r := do(t, http.MethodGet, srv.BaseURL+"/healthz", nil); r.Status != http.StatusOK {
		t.Fatalf("healthz after bad input: %d %s", r.Status, r.Body)
	}
	if res, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "good-after-bad", ActionType: "send_email", Payload: mustStruct(t, `{"to": "a@example.com"}`)}); err != nil || !res.GetCreated() {
		t.Fatalf("a good Register after the bad ones: %v %v", res, err)
	}
}

// countRows counts the operations in the SQLite file at dbURL (read while
// the server runs; WAL lets a reader in beside it).
func countRows(t *testing.T, dbURL string) int {
	t.Helper()
	path := strings.TrimPrefix(dbURL, "sqlite://")
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM operations`).Scan(&n); err != nil {
		t.Fatalf("count operations: %v", err)
	}
	return n
}
