package policy

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	p := Default()
	wantNames := []string{"create_payment", "create_ticket", "send_email", "submit_application"}
	if got := p.Names(); !slices.Equal(got, wantNames) {
		t.Fatalf("Names() = %q, want %q", got, wantNames)
	}
	fake := func(path, status string, lag, inFlight time.Duration) Reconcile {
		return Reconcile{
			InitialDelay: time.Second, Interval: 2 * time.Second, MaxInterval: time.Minute,
			VisibilityLag: lag, InFlightWindow: inFlight, DefinitiveAbsence: true,
			Verifier: &Verifier{HTTP: &HTTPVerifier{
				Method: "GET", URL: "${PROVIDER_URL:-http://127.0.0.1:8099}" + path, Timeout: 5 * time.Second,
				List: "/data", Found: "/id", Completed: "/status", CompletedValues: []string{status}, ExternalID: "/id",
			}},
		}
	}
	want := map[string]Action{
		"create_payment": {
			Name: "create_payment", LeaseSeconds: 30, ReuseOperationKey: true, MaxAttempt: 300 * time.Second,
			OnTimeout: ReconcileBeforeRetry, UnknownAfter: 900 * time.Second,
			OnUnresolved: "require_human_review", Retention: 720 * time.Hour,
			IntegerFields: []string{"amount_minor"}, RedactFields: []string{"card_number", "card_cvc"},
			Reconcile: fake("/payments?idempotency_key={operation_key}", "succeeded", 3*time.Second, 2*time.Minute),
		},
		"send_email": {
			Name: "send_email", LeaseSeconds: 30, ReuseOperationKey: true, MaxAttempt: 300 * time.Second,
			OnTimeout: ReconcileBeforeRetry, UnknownAfter: 900 * time.Second,
			OnUnresolved: "require_human_review", Retention: 720 * time.Hour,
			IntegerFields: []string{}, RedactFields: []string{},
			Reconcile: fake("/emails?reference={operation_key}", "sent", 5*time.Second, 2*time.Minute),
		},
		"submit_application": {
			Name: "submit_application", LeaseSeconds: 60, ReuseOperationKey: true, MaxAttempt: 600 * time.Second,
			OnTimeout: ReconcileBeforeRetry, UnknownAfter: 3600 * time.Second,
			OnUnresolved: "require_human_review", Retention: 2160 * time.Hour,
			IntegerFields: []string{}, RedactFields: []string{},
			// 4m: a portal may still process a submission long after the
			// caller gave up (three times the 60 s lease, and more).
			Reconcile: fake("/applications?reference={operation_key}", "submitted", 5*time.Second, 4*time.Minute),
		},
		"create_ticket": {
			Name: "create_ticket", LeaseSeconds: 30, ReuseOperationKey: true, MaxAttempt: 300 * time.Second,
			OnTimeout: RetrySameKey, UnknownAfter: 900 * time.Second, ProviderDedupWindow: 24 * time.Hour,
			OnUnresolved: "require_human_review", Retention: 720 * time.Hour,
			IntegerFields: []string{}, RedactFields: []string{},
			Reconcile: Reconcile{
				InitialDelay: 5 * time.Second, Interval: 10 * time.Second, MaxInterval: 5 * time.Minute,
				VisibilityLag: 30 * time.Second,
			},
		},
	}
	for name, w := range want {
		a, ok := p.Action(name)
		if !ok || a == nil {
			t.Fatalf("Action(%q) missing", name)
		}
		// Every shipped action has a payload schema (TestShippedSchemas).
		if a.PayloadSchema == nil {
			t.Errorf("Action(%q) has no payload_schema", name)
		}
		a.PayloadSchema = nil
		a.Gateway = nil // TestShippedGateway
		if !reflect.DeepEqual(*a, w) {
			t.Errorf("Action(%q) =\n  %+v\nwant\n  %+v", name, *a, w)
		}
		if got, wantRetry := a.AllowsRetryAfterUnknown(), name == "create_ticket"; got != wantRetry {
			t.Errorf("Action(%q).AllowsRetryAfterUnknown() = %v, want %v", name, got, wantRetry)
		}
	}
	if a, ok := p.Action("delete_everything"); ok || a != nil {
		t.Errorf("Action(undefined) = %v, %v; want nil, false", a, ok)
	}
	if Default() != p {
		t.Error("Default() returned a different *Policy on the second call")
	}
}

func TestDefaultYAMLIsTheShippedFile(t *testing.T) {
	onDisk, err := os.ReadFile("default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(DefaultYAML(), onDisk) {
		t.Fatal("DefaultYAML() differs from default.yaml")
	}
	// The returned bytes are a copy.
	b := DefaultYAML()
	b[0] ^= 0xff
	if !bytes.Equal(DefaultYAML(), onDisk) {
		t.Fatal("modifying DefaultYAML()'s result changed the embedded policy")
	}
	loaded, err := Load("default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loaded, Default()) {
		t.Fatal("Load(default.yaml) differs from Default()")
	}
}

func TestDefaultsFillIn(t *testing.T) {
	doc := `
actions:
  bare: {}
  partial:
    lease_seconds: 45
    retry:
      on_timeout: retry_same_key
    retention: 30d
  explicit_defaults:
    operation_key: required
    retry: {reuse_operation_key: true}
    terminal_states: [failed_final, succeeded]
    integer_fields: []
`
	p, err := Parse([]byte(doc), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defaults := Action{
		LeaseSeconds: 30, ReuseOperationKey: true, OnTimeout: ReconcileBeforeRetry,
		UnknownAfter: 900 * time.Second, OnUnresolved: "require_human_review",
		Retention: 720 * time.Hour, IntegerFields: []string{}, RedactFields: []string{}, MaxAttempt: 300 * time.Second,
		Reconcile: Reconcile{
			InitialDelay: 5 * time.Second, Interval: 10 * time.Second, MaxInterval: 5 * time.Minute,
			VisibilityLag: 30 * time.Second,
		},
	}
	for _, name := range []string{"bare", "explicit_defaults"} {
		a, _ := p.Action(name)
		w := defaults
		w.Name = name
		if !reflect.DeepEqual(*a, w) {
			t.Errorf("%s = %+v, want %+v", name, *a, w)
		}
		if a.AllowsRetryAfterUnknown() {
			t.Errorf("%s allows retry after unknown by default", name)
		}
	}
	a, _ := p.Action("partial")
	w := defaults
	w.Name, w.LeaseSeconds, w.OnTimeout, w.Retention, w.MaxAttempt = "partial", 45, RetrySameKey, 30*24*time.Hour, 450*time.Second
	if !reflect.DeepEqual(*a, w) {
		t.Errorf("partial = %+v, want %+v", *a, w)
	}
	if !a.AllowsRetryAfterUnknown() {
		t.Error("partial: AllowsRetryAfterUnknown() = false with on_timeout: retry_same_key")
	}
}

func TestValidEdgeValues(t *testing.T) {
	doc := `
actions:
  a.b:c-d_9:
    lease_seconds: 86400
    unknown_after_seconds: 3600
    retention: 1h
    integer_fields: [amount_minor, fee_minor]
  z:
    lease_seconds: 1
    unknown_after_seconds: 1
    retention: 1h30m
`
	p, err := Parse([]byte(doc), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, ok := p.Action("a.b:c-d_9")
	if !ok || a.LeaseSeconds != 86400 || a.Retention != time.Hour || a.UnknownAfter != time.Hour ||
		!slices.Equal(a.IntegerFields, []string{"amount_minor", "fee_minor"}) {
		t.Errorf("a.b:c-d_9 = %+v", a)
	}
	z, ok := p.Action("z")
	if !ok || z.LeaseSeconds != 1 || z.UnknownAfter != time.Second || z.Retention != 90*time.Minute {
		t.Errorf("z = %+v", z)
	}
	long := strings.Repeat("x", 80)
	if _, err := Parse([]byte("actions:\n  "+long+": {}\n"), "policy.yaml"); err != nil {
		t.Errorf("80-character action name rejected: %v", err)
	}
}

// problemLine is one expected line of an error: it must start with prefix
// and contain substr.
type problemLine struct {
	prefix, substr string
}

func TestParseInvalid(t *testing.T) {
	tooBig := "actions:\n  a: {}\n" + strings.Repeat("# padding padding padding padding\n", (1<<20)/34+1)
	tests := []struct {
		name string
		doc  string
		want []problemLine
	}{
		{
			name: "unknown top-level field",
			doc:  "actions:\n  a: {}\nversion: 2\n",
			want: []problemLine{{"policy.yaml:3: version: ", "unknown field (known fields: actions)"}},
		},
		{
			name: "unknown action field",
			doc:  "actions:\n  create_payment:\n    lease_seconds: 30\n    leese_seconds: 30\n",
			want: []problemLine{{"policy.yaml:4: actions.create_payment.leese_seconds: ", "unknown field (known fields: operation_key, lease_seconds"}},
		},
		{
			name: "provider_link without a placeholder",
			doc:  "actions:\n  a:\n    provider_link: https://dash.example.com/payments\n",
			want: []problemLine{{"policy.yaml:3: actions.a.provider_link: ", "has neither {external_id} nor {operation_key}"}},
		},
		{
			name: "provider_link with a secret",
			doc:  "actions:\n  a:\n    provider_link: https://dash.example.com/p/{external_id}?t=${TOKEN}\n",
			want: []problemLine{{"policy.yaml:3: actions.a.provider_link: ", "takes no ${VAR}"}},
		},
		{
			name: "provider_link not http",
			doc:  "actions:\n  a:\n    provider_link: javascript:alert({external_id})\n",
			want: []problemLine{{"policy.yaml:3: actions.a.provider_link: ", "is not an absolute http(s) URL"}},
		},
		{
			name: "provider_link with userinfo",
			doc:  "actions:\n  a:\n    provider_link: https://u:p@dash.example.com/{operation_key}\n",
			want: []problemLine{{"policy.yaml:3: actions.a.provider_link: ", "is not an absolute http(s) URL"}},
		},
		{
			name: "unknown retry field",
			doc:  "actions:\n  create_payment:\n    retry:\n      reuse_operation_key: true\n      on_timout: retry_same_key\n",
			want: []problemLine{{"policy.yaml:5: actions.create_payment.retry.on_timout: ", "unknown field (known fields: reuse_operation_key, on_timeout, provider_dedup_window)"}},
		},
		{
			name: "lease_seconds is a string",
			doc:  "actions:\n  create_payment:\n    lease_seconds: \"abc\"\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.lease_seconds: ", `must be an integer, got string "abc"`}},
		},
		{
			name: "lease_seconds is a quoted number",
			doc:  "actions:\n  create_payment:\n    lease_seconds: \"30\"\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.lease_seconds: ", `must be an integer, got string "30"`}},
		},
		{
			name: "lease_seconds is a float",
			doc:  "actions:\n  create_payment:\n    lease_seconds: 30.5\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.lease_seconds: ", "must be an integer, got number 30.5"}},
		},
		{
			name: "lease_seconds 0",
			doc:  "actions:\n  create_payment:\n    lease_seconds: 0\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.lease_seconds: ", "0 is out of range 1..86400"}},
		},
		{
			name: "lease_seconds 86401",
			doc:  "actions:\n  create_payment:\n\n    lease_seconds: 86401\n",
			want: []problemLine{{"policy.yaml:4: actions.create_payment.lease_seconds: ", "86401 is out of range 1..86400"}},
		},
		{
			name: "max_attempt_seconds shorter than the lease",
			doc:  "actions:\n  create_payment:\n    lease_seconds: 30\n    max_attempt_seconds: 10\n",
			want: []problemLine{{"policy.yaml:4: actions.create_payment.max_attempt_seconds: ", "10 is shorter than lease_seconds (30)"}},
		},
		{
			name: "max_attempt_seconds beyond a week",
			doc:  "actions:\n  create_payment:\n    max_attempt_seconds: 604801\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.max_attempt_seconds: ", "604801 is out of range 1..604800"}},
		},
		{
			name: "lease_seconds null",
			doc:  "actions:\n  create_payment:\n    lease_seconds:\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.lease_seconds: ", "must be an integer, got null"}},
		},
		{
			name: "bad on_timeout (the spec's example)",
			doc: `actions:
  create_payment:
    operation_key: required
    lease_seconds: 30
    retry:
      reuse_operation_key: true
      on_timeout: retry_maybe
`,
			want: []problemLine{{`policy.yaml:7: actions.create_payment.retry.on_timeout: "retry_maybe" is not one of reconcile_before_retry, retry_same_key`, ""}},
		},
		{
			name: "reuse_operation_key false",
			doc:  "actions:\n  create_payment:\n    retry:\n      reuse_operation_key: false\n",
			want: []problemLine{{"policy.yaml:4: actions.create_payment.retry.reuse_operation_key: ", "false is not allowed: the journal exists so that every retry of an operation reuses its operation key"}},
		},
		{
			name: "reuse_operation_key yes",
			doc:  "actions:\n  create_payment:\n    retry:\n      reuse_operation_key: yes\n",
			want: []problemLine{{"policy.yaml:4: actions.create_payment.retry.reuse_operation_key: ", `must be true or false, got string "yes"`}},
		},
		{
			name: "retry is not a mapping",
			doc:  "actions:\n  create_payment:\n    retry: retry_same_key\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.retry: ", `must be a mapping with reuse_operation_key and on_timeout, got string "retry_same_key"`}},
		},
		{
			name: "retention abc",
			doc:  "actions:\n  create_payment:\n    retention: abc\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.retention: ", `"abc" is not a duration: write a Go duration such as 720h or a whole number of days such as 30d`}},
		},
		{
			name: "retention 30m",
			doc:  "actions:\n  create_payment:\n    unknown_after_seconds: 60\n    retention: 30m\n",
			want: []problemLine{{"policy.yaml:4: actions.create_payment.retention: ", `"30m" is shorter than the minimum of 1h`}},
		},
		{
			name: "retention fractional days",
			doc:  "actions:\n  create_payment:\n    retention: 1.5d\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.retention: ", `"1.5d" is not a duration`}},
		},
		{
			name: "retention is a number",
			doc:  "actions:\n  create_payment:\n    retention: 720\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.retention: ", "must be a duration such as 720h or 30d, got integer 720"}},
		},
		{
			name: "retention too long",
			doc:  "actions:\n  create_payment:\n    retention: 999999999d\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.retention: ", `"999999999d" is too long`}},
		},
		{
			name: "retention shorter than unknown_after_seconds",
			doc:  "actions:\n  create_payment:\n    retention: 1h\n    unknown_after_seconds: 7200\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.retention: ", "retention 1h is shorter than unknown_after_seconds (2h)"}},
		},
		{
			name: "default retention shorter than unknown_after_seconds",
			doc:  "actions:\n  create_payment:\n    unknown_after_seconds: 2592001\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.unknown_after_seconds: ", "retention 720h is shorter than unknown_after_seconds (720h0m1s)"}},
		},
		{
			name: "unknown_after_seconds 0",
			doc:  "actions:\n  create_payment:\n    unknown_after_seconds: 0\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.unknown_after_seconds: ", "0 is out of range 1..9223372036"}},
		},
		{
			name: "unknown_after_seconds overflows a duration",
			doc:  "actions:\n  create_payment:\n    unknown_after_seconds: 9223372037\n    retention: 2562047h\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.unknown_after_seconds: ", "9223372037 is out of range 1..9223372036"}},
		},
		{
			name: "operation_key optional",
			doc:  "actions:\n  create_payment:\n    operation_key: optional\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.operation_key: ", `"optional" is not allowed: the only accepted value is required`}},
		},
		{
			name: "on_unresolved retry",
			doc:  "actions:\n  create_payment:\n    on_unresolved: retry\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.on_unresolved: ", `"retry" is not allowed: the only accepted value is require_human_review`}},
		},
		{
			name: "duplicate action key",
			doc:  "actions:\n  create_payment: {}\n  send_email: {}\n  create_payment:\n    lease_seconds: 10\n",
			want: []problemLine{{"policy.yaml:4: actions.create_payment: ", "duplicate key (first defined at line 2)"}},
		},
		{
			name: "duplicate action key, one quoted",
			doc:  "actions:\n  create_payment: {}\n  \"create_payment\": {}\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment: ", "duplicate key (first defined at line 2)"}},
		},
		{
			name: "duplicate field key",
			doc:  "actions:\n  create_payment:\n    lease_seconds: 30\n    retention: 720h\n    lease_seconds: 60\n",
			want: []problemLine{{"policy.yaml:5: actions.create_payment.lease_seconds: ", "duplicate key (first defined at line 3)"}},
		},
		{
			name: "duplicate top-level key",
			doc:  "actions:\n  a: {}\nactions:\n  b: {}\n",
			want: []problemLine{{"policy.yaml:3: actions: ", "duplicate key (first defined at line 1)"}},
		},
		{
			name: "empty actions mapping",
			doc:  "# policy\nactions: {}\n",
			want: []problemLine{{"policy.yaml:2: actions: ", "must define at least one action"}},
		},
		{
			name: "null actions",
			doc:  "actions:\n",
			want: []problemLine{{"policy.yaml:1: actions: ", "must define at least one action"}},
		},
		{
			name: "missing actions",
			doc:  "# nothing here\n{}\n",
			want: []problemLine{{"policy.yaml:2: actions: ", "missing: a policy file must define at least one action"}},
		},
		{
			name: "actions is a list",
			doc:  "actions:\n  - create_payment\n",
			want: []problemLine{{"policy.yaml:2: actions: ", "must be a mapping from action name to action policy, got a sequence"}},
		},
		{
			name: "top level is a list",
			doc:  "- actions\n",
			want: []problemLine{{"policy.yaml:1: ", "must be a mapping with an actions field, got a sequence"}},
		},
		{
			name: "action is null",
			doc:  "actions:\n  create_payment:\n  send_email: {}\n",
			want: []problemLine{{"policy.yaml:2: actions.create_payment: ", "must be a mapping of policy fields (use {} to accept every default), got null"}},
		},
		{
			name: "bad action name: upper case",
			doc:  "actions:\n  ok: {}\n  Create_Payment: {}\n",
			want: []problemLine{{"policy.yaml:3: actions.Create_Payment: ", "invalid action name: it must be 1-80 characters"}},
		},
		{
			name: "bad action name: starts with a digit",
			doc:  "actions:\n  9lives: {}\n",
			want: []problemLine{{"policy.yaml:2: actions.9lives: ", "invalid action name"}},
		},
		{
			name: "bad action name: space",
			doc:  "actions:\n  create payment: {}\n",
			want: []problemLine{{`policy.yaml:2: actions["create payment"]: `, "invalid action name"}},
		},
		{
			name: "bad action name: 81 characters",
			doc:  "actions:\n  " + strings.Repeat("a", 81) + ": {}\n",
			want: []problemLine{{"policy.yaml:2: actions." + strings.Repeat("a", 81) + ": ", "invalid action name"}},
		},
		{
			name: "bad action name: empty",
			doc:  "actions:\n  \"\": {}\n",
			want: []problemLine{{`policy.yaml:2: actions[""]: `, "invalid action name"}},
		},
		{
			name: "action name is not a string",
			doc:  "actions:\n  true: {}\n",
			want: []problemLine{{"policy.yaml:2: actions: ", "keys must be strings, got boolean true"}},
		},
		{
			name: "integer_fields with a duplicate",
			doc:  "actions:\n  create_payment:\n    integer_fields:\n      - amount_minor\n      - fee_minor\n      - amount_minor\n",
			want: []problemLine{{"policy.yaml:6: actions.create_payment.integer_fields[2]: ", `"amount_minor" is listed twice (first at line 4)`}},
		},
		{
			name: "integer_fields with an empty string",
			doc:  "actions:\n  create_payment:\n    integer_fields: [amount_minor, \"\"]\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.integer_fields[1]: ", "must not be empty"}},
		},
		{
			name: "integer_fields with a number",
			doc:  "actions:\n  create_payment:\n    integer_fields: [amount_minor, 7]\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.integer_fields[1]: ", "must be a string, got integer 7"}},
		},
		{
			name: "integer_fields is a string",
			doc:  "actions:\n  create_payment:\n    integer_fields: amount_minor\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.integer_fields: ", `must be a list of strings, got string "amount_minor"`}},
		},
		{
			name: "anchor and alias",
			doc:  "actions:\n  create_payment: &base\n    lease_seconds: 30\n  send_email: *base\n",
			want: []problemLine{
				{"policy.yaml:2: actions.create_payment: ", "YAML anchors (&base) are not allowed"},
				{"policy.yaml:4: actions.send_email: ", "YAML aliases (*base) are not allowed"},
			},
		},
		{
			name: "anchor on a scalar used as a value",
			doc:  "actions:\n  a:\n    lease_seconds: &l 30\n  b:\n    lease_seconds: *l\n",
			want: []problemLine{
				{"policy.yaml:3: actions.a.lease_seconds: ", "YAML anchors (&l) are not allowed"},
				{"policy.yaml:5: actions.b.lease_seconds: ", "YAML aliases (*l) are not allowed"},
			},
		},
		{
			name: "merge key",
			doc:  "actions:\n  a:\n    <<: {lease_seconds: 30}\n",
			want: []problemLine{{"policy.yaml:3: actions.a: ", "merge keys (<<) are not allowed"}},
		},
		{
			name: "alias to an undefined anchor",
			doc:  "actions:\n  a: *nope\n",
			want: []problemLine{{"policy.yaml:2: ", "invalid YAML: unknown anchor 'nope' referenced"}},
		},
		{
			name: "two documents",
			doc:  "actions:\n  a: {}\n---\nactions:\n  b: {}\n",
			want: []problemLine{{"policy.yaml:3: ", "a policy file must contain exactly one YAML document, but another document starts here"}},
		},
		{
			name: "trailing empty document",
			doc:  "actions:\n  a: {}\n---\n",
			want: []problemLine{{"policy.yaml:3: ", "exactly one YAML document"}},
		},
		{
			name: "empty file",
			doc:  "",
			want: []problemLine{{"policy.yaml:1: ", "policy file is empty; it must define actions"}},
		},
		{
			name: "only comments",
			doc:  "# nothing\n\n# still nothing\n",
			want: []problemLine{{"policy.yaml:1: ", "policy file is empty"}},
		},
		{
			name: "only a document marker",
			doc:  "---\n",
			want: []problemLine{{"policy.yaml:2: ", "policy file is empty"}},
		},
		{
			name: "file over 1 MiB",
			doc:  tooBig,
			want: []problemLine{{"policy.yaml:1: ", "policy file is larger than 1 MiB"}},
		},
		{
			name: "syntax error found by the YAML scanner",
			doc:  "actions:\n  a: {}\n  b: c: d\n",
			want: []problemLine{{"policy.yaml:3: ", "invalid YAML: mapping values are not allowed in this context"}},
		},
		{
			name: "syntax error found by the YAML parser",
			doc:  "actions:\n  a: {}\n  b: {lease_seconds: 30\n",
			want: []problemLine{{"policy.yaml:3: ", "did not find expected ',' or '}'"}},
		},
		{
			name: "syntax error found by the YAML parser after a sequence",
			doc:  "- a\nb: 1\n",
			want: []problemLine{{"policy.yaml:2: ", "did not find expected '-' indicator"}},
		},
		{
			name: "syntax error found by the YAML parser on line 1",
			doc:  "{actions: {a: {}}",
			want: []problemLine{{"policy.yaml:1: ", "did not find expected ',' or '}'"}},
		},
		{
			name: "bad indentation",
			doc:  "actions:\n  a: {}\n b: {}\n",
			want: []problemLine{{"policy.yaml:3: ", "did not find expected key"}},
		},
		{
			name: "key with spaces is quoted in the path",
			doc:  "actions:\n  a:\n    lease seconds: 30\n",
			want: []problemLine{{`policy.yaml:3: actions.a["lease seconds"]: `, "unknown field"}},
		},
		{
			name: "terminal_states missing one",
			doc:  "actions:\n  create_payment:\n    terminal_states: [succeeded]\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.terminal_states: ", "the terminal states are fixed by the journal's state machine"}},
		},
		{
			name: "terminal_states with an extra state",
			doc:  "actions:\n  create_payment:\n    terminal_states:\n      - succeeded\n      - failed_final\n      - cancelled\n",
			want: []problemLine{{"policy.yaml:6: actions.create_payment.terminal_states[2]: ", `"cancelled" is not a terminal state; the terminal states are fixed`}},
		},
		{
			name: "terminal_states with a duplicate",
			doc:  "actions:\n  create_payment:\n    terminal_states: [succeeded, succeeded, failed_final]\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.terminal_states[1]: ", `"succeeded" is listed twice; the terminal states are fixed`}},
		},
		{
			name: "terminal_states empty",
			doc:  "actions:\n  create_payment:\n    terminal_states: []\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.terminal_states: ", "must list exactly succeeded and failed_final"}},
		},
		{
			name: "custom tag",
			doc:  "actions:\n  create_payment:\n    lease_seconds: !seconds 30\n",
			want: []problemLine{{"policy.yaml:3: actions.create_payment.lease_seconds: ", `must be an integer, got value "30" tagged !seconds`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.doc), "policy.yaml")
			if err == nil {
				t.Fatalf("Parse succeeded (%v), want an error", p.Names())
			}
			if p != nil {
				t.Errorf("Parse returned a non-nil policy with an error")
			}
			checkProblems(t, err, tt.want)
		})
	}
}

// checkProblems checks that err has exactly one line per expected problem,
// in order.
func checkProblems(t *testing.T, err error, want []problemLine) {
	t.Helper()
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w.prefix) || !strings.Contains(lines[i][len(w.prefix):], w.substr) {
			t.Errorf("problem %d:\n  got  %s\n  want prefix %q containing %q", i, lines[i], w.prefix, w.substr)
		}
	}
}

func TestParseReportsEveryProblemInLineOrder(t *testing.T) {
	// The anchor on line 6 is found by a pass over the whole document
	// before the fields are validated, so sorting is what puts it last.
	doc := `actions:
  create_payment:
    lease_seconds: 0
    retry:
      on_timeout: later
  send_email: &e {}
  Bad: {}
`
	_, err := Parse([]byte(doc), "p.yaml")
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	checkProblems(t, err, []problemLine{
		{"p.yaml:3: actions.create_payment.lease_seconds: ", "0 is out of range"},
		{"p.yaml:5: actions.create_payment.retry.on_timeout: ", `"later" is not one of`},
		{"p.yaml:6: actions.send_email: ", "YAML anchors (&e) are not allowed"},
		{"p.yaml:7: actions.Bad: ", "invalid action name"},
	})
}

func TestParseTwoErrors(t *testing.T) {
	doc := "actions:\n  create_payment:\n    lease_seconds: \"abc\"\n    reetention: 720h\n"
	_, err := Parse([]byte(doc), "policy.yaml")
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	checkProblems(t, err, []problemLine{
		{"policy.yaml:3: actions.create_payment.lease_seconds: ", "must be an integer"},
		{"policy.yaml:4: actions.create_payment.reetention: ", "unknown field"},
	})
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	missing := filepath.Join(dir, "nope.yaml")
	p, err := Load(missing)
	if err == nil || p != nil {
		t.Fatalf("Load(missing) = %v, %v; want nil, error", p, err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the path %q", err, missing)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %q is not fs.ErrNotExist", err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("actions:\n  a:\n    lease_seconds: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+":3: actions.a.lease_seconds: ") {
		t.Errorf("Load(bad) error = %v, want it to start with %q", err, bad+":3: ")
	}

	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#\n"), 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(big)
	if err == nil || !strings.HasPrefix(err.Error(), big+":1: policy file is larger than 1 MiB") {
		t.Errorf("Load(big) error = %v", err)
	}

	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("actions:\n  create_ticket:\n    retry: {on_timeout: retry_same_key}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := p.Action("create_ticket"); !ok || !a.AllowsRetryAfterUnknown() {
		t.Errorf("Load(good): create_ticket = %+v, %v", a, ok)
	}
}

func TestActionReturnsACopy(t *testing.T) {
	p := Default()
	a, _ := p.Action("create_payment")
	a.LeaseSeconds = 1
	a.IntegerFields[0] = "changed"
	b, _ := p.Action("create_payment")
	if b.LeaseSeconds != 30 || b.IntegerFields[0] != "amount_minor" {
		t.Errorf("modifying a returned Action changed the policy: %+v", b)
	}
	names := p.Names()
	names[0] = "changed"
	if p.Names()[0] != "create_payment" {
		t.Error("modifying Names() changed the policy")
	}
}

func TestNilReceivers(t *testing.T) {
	var p *Policy
	if a, ok := p.Action("create_payment"); a != nil || ok {
		t.Error("nil Policy: Action returned something")
	}
	if p.Names() != nil {
		t.Error("nil Policy: Names returned something")
	}
	var a *Action
	if a.AllowsRetryAfterUnknown() {
		t.Error("nil Action allows retry")
	}
}

func TestCountLines(t *testing.T) {
	for in, want := range map[string]int{
		"":             0,
		"a":            1,
		"a\n":          1,
		"a\nb":         2,
		"a\r\nb\r\n":   2,
		"a\rb\rc":      3,
		"a\u2028b\n\n": 3,
		"\n\n":         2,
	} {
		if got := countLines([]byte(in)); got != want {
			t.Errorf("countLines(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestSyntaxErrorLineWithCRLineBreaks(t *testing.T) {
	_, err := Parse([]byte("actions:\r  a: {}\r  b: c: d\r"), "policy.yaml")
	if err == nil || !strings.HasPrefix(err.Error(), "policy.yaml:3: invalid YAML: mapping values are not allowed") {
		t.Errorf("error = %v", err)
	}
}

func TestDocumentTextCannotBreakAnErrorLine(t *testing.T) {
	doc := "actions:\n  a:\n    lease_seconds: !x%0Ay 30\n    operation_key: \"a\\nb\"\n    \"x\\ny\": 1\n"
	_, err := Parse([]byte(doc), "policy.yaml")
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	checkProblems(t, err, []problemLine{
		{"policy.yaml:3: actions.a.lease_seconds: ", `must be an integer, got value "30" tagged "!x\ny"`},
		{"policy.yaml:4: actions.a.operation_key: ", `"a\nb" is not allowed`},
		{`policy.yaml:5: actions.a["x\ny"]: `, "unknown field"},
	})
}

// TestProviderLink: the console's link to the provider's record escapes
// the values, so a key cannot point the link elsewhere, and is absent
// while a value it needs is unknown.
func TestProviderLink(t *testing.T) {
	p, err := Parse([]byte("actions:\n  a:\n    provider_link: https://dash.example.com/p/{external_id}?k={operation_key}\n  b: {}\n"), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Action("a")
	if got := a.Link("k/../x?y#z", "pi 1"); got != "https://dash.example.com/p/pi%201?k=k%2F..%2Fx%3Fy%23z" {
		t.Fatalf("link %q", got)
	}
	if got := a.Link("k", ""); got != "" {
		t.Fatalf("link without an external_id: %q", got)
	}
	b, _ := p.Action("b")
	if got := b.Link("k", "x"); got != "" {
		t.Fatalf("link without provider_link: %q", got)
	}
}
