package policy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, doc string) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc), "policy.yaml")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p
}

// wantProblem fails unless parsing doc fails with a problem that starts
// with prefix ("policy.yaml:LINE: path: ") and contains words.
func wantProblem(t *testing.T, doc, prefix, words string) {
	t.Helper()
	_, err := Parse([]byte(doc), "policy.yaml")
	if err == nil {
		t.Fatalf("parsed, want %q", prefix)
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, words) {
			return
		}
	}
	t.Fatalf("problems:\n%v\nwant one starting %q containing %q", err, prefix, words)
}

const paymentSchema = `actions:
  create_payment:
    integer_fields: [amount_minor]
    payload_schema:
      type: object
      required: [order_id, amount_minor, currency]
      properties:
        order_id: {type: string, minLength: 1}
        amount_minor: {type: integer, minimum: 1}
        currency: {type: string, pattern: "^[A-Z]{3}$"}
        email: {type: string, format: email}
        card: {type: string, maxLength: 19}
      additionalProperties: false
`

func TestPayloadSchemaInline(t *testing.T) {
	act, _ := mustParse(t, paymentSchema).Action("create_payment")
	if act.PayloadSchema == nil {
		t.Fatal("no schema")
	}
	if v := act.PayloadSchema.Validate([]byte(`{"order_id":"817","amount_minor":1999,"currency":"EUR"}`)); v != nil {
		t.Fatalf("a good payload: %v", v)
	}
	for _, tc := range []struct {
		payload string
		want    []Violation
	}{
		{`{"order_id":"817","amount_minor":1999}`, []Violation{{"/currency", "is required"}}},
		{`{}`, []Violation{{"/amount_minor", "is required"}, {"/currency", "is required"}, {"/order_id", "is required"}}},
		{`{"order_id":"817","amount_minor":"19.99","currency":"EUR"}`, []Violation{{"/amount_minor", "must be integer, not string"}}},
		{`{"order_id":"817","amount_minor":0,"currency":"EUR"}`, []Violation{{"/amount_minor", "must be ≥ 1"}}},
		{`{"order_id":"817","amount_minor":5,"currency":"euro"}`, []Violation{{"/currency", `does not match the pattern "^[A-Z]{3}$"`}}},
		{`{"order_id":"817","amount_minor":5,"currency":"EUR","email":"not-an-email"}`, []Violation{{"/email", "is not a valid email"}}},
		{`{"order_id":"817","amount_minor":5,"currency":"EUR","card":"4111111111111111111111"}`, []Violation{{"/card", "must be at most 19 characters long"}}},
		{`{"order_id":"817","amount_minor":5,"currency":"EUR","cvc":"123"}`, []Violation{{"", `has members the schema does not allow: "cvc"`}}},
	} {
		got := act.PayloadSchema.Validate([]byte(tc.payload))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.payload, got, tc.want)
		}
		// No value of the payload is ever quoted back.
		for _, v := range got {
			for _, secret := range []string{"19.99", "euro", "not-an-email", "4111111111111111111111", "123"} {
				if strings.Contains(v.Message, secret) {
					t.Errorf("%s: message %q quotes the payload", tc.payload, v.Message)
				}
			}
		}
	}
}

func TestPayloadSchemaFromFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "email.json"), []byte(`{
  "type": "object",
  "required": ["to"],
  "properties": {"to": {"type": "string", "format": "email"}}
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := "actions:\n  send_email:\n    payload_schema: email.json\n"
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	act, _ := p.Action("send_email")
	if v := act.PayloadSchema.Validate([]byte(`{"to":"x"}`)); len(v) != 1 || v[0].Pointer != "/to" {
		t.Fatalf("violations: %v", v)
	}
	// A bad schema in a file is reported with the file's line.
	if err := os.WriteFile(filepath.Join(dir, "email.json"), []byte("{\n  \"type\": \"object\",\n  \"properties\": {\"to\": {\"type\": \"strnig\"}}\n}"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "policy.yaml:3: actions.send_email.payload_schema: email.json:3: is not a valid JSON Schema") {
		t.Fatalf("bad schema file: %v", err)
	}
	// A missing file.
	if err := os.WriteFile(path, []byte("actions:\n  send_email:\n    payload_schema: nowhere.json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "policy.yaml:3: actions.send_email.payload_schema: cannot read the schema file") {
		t.Fatalf("missing schema file: %v", err)
	}
}

func TestPayloadSchemaInvalid(t *testing.T) {
	// The problem is reported at the line of the offending part.
	wantProblem(t, "actions:\n  a:\n    payload_schema:\n      type: object\n      properties:\n        n: {type: strnig}\n",
		"policy.yaml:6: actions.a.payload_schema/properties/n/type: ", "is not a valid JSON Schema (draft 2020-12)")
	wantProblem(t, "actions:\n  a:\n    payload_schema:\n      type: object\n      properties:\n        n: {type: string, pattern: \"(?=x)\"}\n",
		"policy.yaml:6: actions.a.payload_schema/properties/n/pattern: ", "is not valid regex")
	wantProblem(t, "actions:\n  a:\n    payload_schema:\n      $ref: https://example.com/schema.json\n",
		"policy.yaml:4: actions.a.payload_schema: ", "references to other documents are not supported")
	wantProblem(t, "actions:\n  a:\n    payload_schema: [1, 2]\n",
		"policy.yaml:3: actions.a.payload_schema: ", "must be a JSON Schema (a mapping) or the path of a file")
	wantProblem(t, "actions:\n  a:\n    payload_schema:\n      properties:\n        1: {type: string}\n",
		"policy.yaml:5: actions.a.payload_schema: ", "keys of a JSON Schema must be strings, got integer 1")
}

func TestPayloadSchemaInFingerprint(t *testing.T) {
	a := mustParse(t, paymentSchema)
	b := mustParse(t, strings.Replace(paymentSchema, "minimum: 1", "minimum: 2", 1))
	if a.Fingerprint() == b.Fingerprint() {
		t.Fatal("the schema is not part of the fingerprint")
	}
	if d := a.Diff(b); len(d) != 1 || !strings.Contains(d[0], "PayloadSchema") {
		t.Fatalf("diff: %q", d)
	}
}

func TestRefsPolicy(t *testing.T) {
	act, _ := mustParse(t, "actions:\n  a:\n    refs:\n      required: [order_id]\n      forbidden: [email, card.number]\n").Action("a")
	if !slices.Equal(act.Refs.Required, []string{"order_id"}) || !slices.Equal(act.Refs.Forbidden, []string{"email", "card.number"}) {
		t.Fatalf("refs = %+v", act.Refs)
	}
	wantProblem(t, "actions:\n  a:\n    refs:\n      required: [Order]\n", "policy.yaml:4: actions.a.refs.required[0]: ", "is not a ref name")
	wantProblem(t, "actions:\n  a:\n    refs:\n      required: [x]\n      forbidden: [x]\n", "policy.yaml:5: actions.a.refs.forbidden[0]: ", "already listed under refs.required")
	wantProblem(t, "actions:\n  a:\n    refs:\n      needed: [x]\n", "policy.yaml:4: actions.a.refs.needed: ", "unknown field (known fields: required, forbidden)")
	wantProblem(t, "actions:\n  a:\n    redact_fields: [email]\n    refs:\n      required: [email]\n", "policy.yaml:5: actions.a.refs.required: ", "also in redact_fields")
}

func TestProviderDedupWindow(t *testing.T) {
	act, _ := mustParse(t, "actions:\n  a:\n    retry: {on_timeout: retry_same_key, provider_dedup_window: 24h}\n").Action("a")
	if act.ProviderDedupWindow != 24*time.Hour {
		t.Fatalf("window = %v", act.ProviderDedupWindow)
	}
	act, _ = mustParse(t, "actions:\n  a:\n    retry: {on_timeout: retry_same_key, provider_dedup_window: 7d}\n    retention: 30d\n").Action("a")
	if act.ProviderDedupWindow != 7*24*time.Hour {
		t.Fatalf("window = %v", act.ProviderDedupWindow)
	}
	if act, _ := mustParse(t, "actions:\n  a: {}\n").Action("a"); act.ProviderDedupWindow != 0 {
		t.Fatalf("default window = %v", act.ProviderDedupWindow)
	}
	wantProblem(t, "actions:\n  a:\n    retry: {provider_dedup_window: 24h}\n", "policy.yaml:3: actions.a.retry.provider_dedup_window: ", "only for on_timeout: retry_same_key")
	wantProblem(t, "actions:\n  a:\n    retry: {on_timeout: retry_same_key, provider_dedup_window: 0s}\n", "policy.yaml:3: actions.a.retry.provider_dedup_window: ", "must be positive")
	wantProblem(t, "actions:\n  a:\n    retry: {on_timeout: retry_same_key, provider_dedup_window: soon}\n", "policy.yaml:3: actions.a.retry.provider_dedup_window: ", "is not a duration")
	wantProblem(t, "actions:\n  a:\n    retry: {on_timeout: retry_same_key, provider_dedup_window: 60d}\n    retention: 30d\n",
		"policy.yaml:4: actions.a.retention: ", "shorter than retry.provider_dedup_window (1440h)")
}

// TestShippedSchemas: the shipped policy's schemas accept the example
// calls and refuse what a model might get wrong.
func TestShippedSchemas(t *testing.T) {
	for _, tc := range []struct {
		action, payload string
		violations      int
	}{
		{"create_payment", `{"order_id":"817","amount_minor":490000,"currency":"RUB"}`, 0},
		{"create_payment", `{"order_id":"817","amount_minor":490000,"currency":"RUB","card_number":"4111111111111111"}`, 0},
		{"create_payment", `{"amount_minor":490000}`, 2},
		{"create_payment", `{"order_id":"817","amount_minor":4900.5,"currency":"RUB"}`, 1},
		{"create_payment", `{"order_id":"817","amount_minor":490000,"currency":"rub"}`, 1},
		{"send_email", `{"to":"customer@example.com","subject":"Receipt"}`, 0},
		{"send_email", `{"subject":"Receipt"}`, 1},
		{"submit_application", `{"job_id":"job-1","candidate":"c-1"}`, 0},
		{"submit_application", `{"candidate":"c-1"}`, 1},
		{"create_ticket", `{"title":"printer on fire"}`, 0},
		{"create_ticket", `{"title":""}`, 1},
	} {
		act, _ := Default().Action(tc.action)
		if got := act.PayloadSchema.Validate([]byte(tc.payload)); len(got) != tc.violations {
			t.Errorf("%s %s: %v, want %d violations", tc.action, tc.payload, got, tc.violations)
		}
	}
}
