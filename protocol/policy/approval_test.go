package policy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
)

const approvalDoc = `actions:
  pay:
    payload_schema:
      type: object
      properties:
        amount_minor: {type: integer}
        currency: {type: string}
        rush: {type: boolean}
    approval:
      when: "payload.amount_minor > 100000 || (payload.currency == 'USD' && payload.rush)"
      approvers: [admin]
      two_person: true
      timeout: 2h
      on_timeout: escalate
      notify: https://hooks.example/approvals
  free:
    approval:
      when: "payload.amount > 5 || refs.customer == 'vip'"
  always:
    approval: {required: true, distinct_from_requester: false}
`

// TestApprovalParsed: the block's fields and defaults; when is compiled
// and decides on the payload (and refs).
func TestApprovalParsed(t *testing.T) {
	p, err := Parse([]byte(approvalDoc), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pay, _ := p.Action("pay")
	a := pay.Approval
	if a == nil || a.TwoPerson != true || a.Timeout != 2*time.Hour || a.OnTimeout != opjournal.ApprovalTimeoutEscalate ||
		strings.Join(a.Approvers, ",") != "admin" || a.Notify != "https://hooks.example/approvals" || !a.DistinctFor(true) || a.DistinctFor(false) {
		t.Fatalf("pay's approval: %+v", a)
	}
	free, _ := p.Action("free")
	if f := free.Approval; strings.Join(f.Approvers, ",") != "operator,admin" || f.Timeout != 24*time.Hour || f.OnTimeout != opjournal.ApprovalTimeoutReject {
		t.Fatalf("defaults: %+v", f)
	}
	always, _ := p.Action("always")
	if n, rule := always.Approval.Needed(json.RawMessage(`{}`), nil); !n || rule != ApprovalRuleRequired || always.Approval.DistinctFor(true) {
		t.Fatalf("required: %v %q", n, rule)
	}
	for _, tc := range []struct {
		a       *ApprovalPolicy
		payload string
		refs    map[string]string
		need    bool
		failed  bool // the rule says it could not be evaluated
	}{
		{pay.Approval, `{"amount_minor":100000,"currency":"EUR"}`, nil, false, false},
		{pay.Approval, `{"amount_minor":100001,"currency":"EUR"}`, nil, true, false},
		{pay.Approval, `{"amount_minor":5,"currency":"USD","rush":true}`, nil, true, false},
		{pay.Approval, `{"amount_minor":5,"currency":"USD","rush":false}`, nil, false, false},
		// Missing members fail safe: approval needed.
		{pay.Approval, `{"currency":"EUR"}`, nil, true, true},
		{free.Approval, `{"amount":6.5}`, nil, true, false},
		{free.Approval, `{"amount":5}`, map[string]string{"customer": "x"}, false, false},
		{free.Approval, `{"amount":1}`, map[string]string{"customer": "vip"}, true, false},
		{free.Approval, `{"amount":"lots"}`, nil, true, true},
		{free.Approval, `{}`, nil, true, true},
	} {
		need, rule := tc.a.Needed(json.RawMessage(tc.payload), tc.refs)
		if need != tc.need || strings.Contains(rule, "could not be evaluated") != tc.failed || (need && !strings.HasPrefix(rule, tc.a.When)) {
			t.Errorf("%s on %s %v: need %v rule %q", tc.a.When, tc.payload, tc.refs, need, rule)
		}
		if strings.Contains(rule, "lots") {
			t.Errorf("the rule quotes a payload value: %q", rule)
		}
	}
}

// TestApprovalRefused: every bad approval block fails the load with its
// line and field, the expression checked against payload_schema.
func TestApprovalRefused(t *testing.T) {
	schema := `    payload_schema:
      type: object
      properties:
        amount_minor: {type: integer}
`
	for name, tc := range map[string]struct{ block, want string }{
		"wrong type":        {schema + "    approval: {when: 'payload.amount_minor > \"x\"'}\n", `p.yaml:7: actions.a.approval.when: does not fit payload_schema (its properties: amount_minor): column 22: found no matching overload for '_>_' applied to '(int, string)'`},
		"unknown member":    {schema + "    approval: {when: 'payload.amount > 1'}\n", `p.yaml:7: actions.a.approval.when: does not fit payload_schema (its properties: amount_minor): column 1: reads a member of payload that payload_schema does not list`},
		"syntax":            {"    approval: {when: 'payload.x >'}\n", `p.yaml:3: actions.a.approval.when: is not a valid CEL expression over payload and refs:`},
		"not boolean":       {"    approval: {when: '1 + 2'}\n", `p.yaml:3: actions.a.approval.when: must be a boolean expression, is int`},
		"unknown variable":  {"    approval: {when: 'request.x > 1'}\n", `undeclared reference to 'request'`},
		"both":              {"    approval: {when: 'true', required: true}\n", `p.yaml:3: actions.a.approval.when: is not allowed with required: true`},
		"neither":           {"    approval: {timeout: 1h}\n", `p.yaml:3: actions.a.approval: needs when (a CEL expression over payload) or required: true`},
		"agent approver":    {"    approval: {required: true, approvers: [operator, agent]}\n", `p.yaml:3: actions.a.approval.approvers[1]: agent may not decide`},
		"reconciler":        {"    approval: {required: true, approvers: [reconciler]}\n", `approvers[0]: reconciler may not decide`},
		"metrics":           {"    approval: {required: true, approvers: [metrics]}\n", `approvers[0]: metrics may not decide`},
		"no approvers":      {"    approval: {required: true, approvers: []}\n", `approval.approvers: must name at least one role`},
		"bad on_timeout":    {"    approval: {required: true, on_timeout: retry}\n", `approval.on_timeout: "retry" is not one of reject, escalate`},
		"bad timeout":       {"    approval: {required: true, timeout: 0s}\n", `approval.timeout: "0s" is outside 1s..720h`},
		"long timeout":      {"    approval: {required: true, timeout: 31d}\n", `approval.timeout: "31d" is outside`},
		"notify not http":   {"    approval: {required: true, notify: 'ftp://x'}\n", `approval.notify: must be an absolute http(s) URL`},
		"notify with creds": {"    approval: {required: true, notify: 'https://u:p@hooks.example/x'}\n", `approval.notify: must not carry credentials`},
		"unknown field":     {"    approval: {required: true, approver: [admin]}\n", `approval.approver: unknown field`},
		"not a mapping":     {"    approval: true\n", `actions.a.approval: must be a mapping`},
	} {
		_, err := Parse([]byte("actions:\n  a:\n"+tc.block), "p.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}
