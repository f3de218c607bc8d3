package server

import (
	"errors"
	"testing"

	"github.com/opjournal/opjournal"
)

func TestCheckBodyTeaches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, body string
		field, msg   string
	}{
		{"Register", `{"key": "k", "action_type": "send_email", "payload": {}}`, "key", `unknown field "key"; did you mean "operation_key"?`},
		{"Register", `{"operation_key": "k", "action": "send_email", "payload": {}}`, "action", `unknown field "action"; did you mean "action_type"?`},
		{"Register", `{"operation_key": "k", "action_typ": "send_email", "payload": {}}`, "action_typ", `unknown field "action_typ"; did you mean "action_type"?`},
		{"Register", `{"OperationKey": "k"}`, "OperationKey", `unknown field "OperationKey"; did you mean "operation_key"?`},
		{"Register", `{"operation_key": "k", "claim": {"worker": "w"}}`, "claim.worker", `unknown field "worker"; did you mean "worker_id"?`},
		{"Register", `{"operation_key": "k", "zzz": 1}`, "zzz", `unknown field "zzz" (the fields of RegisterRequest: operation_key, action_type, payload, claim, refs, parent_key, view)`},
		{"Register", `{"operation_key": "k", "payload": "x"}`, "payload", `must be a JSON object, not a string`},
		{"Register", `{"operation_key": 7}`, "operation_key", `must be a string, not a number`},
		{"Register", `{"operation_key": "k", "refs": {"order_id": 817}}`, "refs.order_id", `must be a string, not a number`},
		{"Register", `{"operation_key": "k", "claim": "w"}`, "claim", `must be a JSON object, not a string`},
		{"MarkSucceeded", `{"operation_key": "k", "attempt": 1, "result": "ok"}`, "result", `must be a JSON object, not a string`},
		{"MarkSucceeded", `{"operation_key": "k", "attempt": true}`, "attempt", `must be a number, not a boolean`},
		{"Resolve", `{"operation_key": "k", "resolution": "SUCCEEDED"}`, "resolution", `"SUCCEEDED" is not one of RESOLUTION_SUCCEEDED, RESOLUTION_FAILED_FINAL; did you mean "RESOLUTION_SUCCEEDED"?`},
		{"ListOperations", `{"statuses": "STATUS_UNKNOWN"}`, "statuses", `must be a JSON array, not a string`},
		{"Claim", `{"operation_key": "k", "worker_id": "w", "lease_seconds": 4294967297}`, "lease_seconds", `must be a whole number from -2147483648 to 2147483647`},
		{"Register", `{"operation_key": "k", "claim": {"worker_id": "w", "lease_seconds": "99999999999"}}`, "claim.lease_seconds", `must be a whole number from -2147483648 to 2147483647`},
		{"ListOperations", `{"needs_review": "yes"}`, "needs_review", `must be true or false, not a string`},
	} {
		err := checkBody(tc.method, []byte(tc.body))
		var e *opjournal.Error
		if !errors.As(err, &e) || e.Code != opjournal.CodeInvalidArgument || e.Field != tc.field || e.Message != tc.msg {
			t.Errorf("%s %s:\n got %v\nwant %s: %s", tc.method, tc.body, err, tc.field, tc.msg)
		}
	}
	for _, ok := range []struct{ method, body string }{
		{"Register", `{"operationKey": "k", "actionType": "a", "payload": {"x": [1, "a", null]}, "claim": {"workerId": "w", "lease_seconds": "30"}, "refs": {"a": "b"}, "parent_key": null}`},
		{"MarkSucceeded", `{"operation_key": "k", "attempt": "1", "result": {"a": 1}}`},
		{"ListOperations", `{"statuses": ["STATUS_UNKNOWN", 3], "needs_review": true, "page_size": 10}`},
		{"Resolve", `{"operation_key": "k", "resolution": "RESOLUTION_SUCCEEDED", "result": null}`},
	} {
		if err := checkBody(ok.method, []byte(ok.body)); err != nil {
			t.Errorf("%s %s: %v", ok.method, ok.body, err)
		}
	}
}

func TestNearest(t *testing.T) {
	t.Parallel()
	names := []string{"operation_key", "attempt", "external_id", "result", "actor"}
	for in, want := range map[string]string{
		"key": "operation_key", "atempt": "attempt", "externalID": "external_id", "external-id": "external_id",
		"results": "result", "actr": "actor", "x": "", "nothing_like_it": "", "id": "",
	} {
		if got := nearest(in, names); got != want {
			t.Errorf("nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
