package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReconcileParsesEveryField(t *testing.T) {
	doc := `actions:
  pay:
    reconcile:
      initial_delay: 0s
      interval: 1s
      max_interval: 1s
      visibility_lag: 0s
      in_flight_window: 90s
      definitive_absence: true
      verifier:
        http:
          method: POST
          url: "${PROVIDER_URL:-https://api.example.com}/v1/payments/{external_id}/search?k={operation_key}&tenant=${TENANT}"
          headers:
            authorization: "Bearer ${PROVIDER_TOKEN}"
            X-Api-Key: "${API_KEY}"
            Accept: application/json
            Cookie: "session=${SESSION}; theme=dark"
          timeout: 5m
          list: /data/items
          found: /a~1b/~0c
          completed: /status
          completed_values: [succeeded, 3, true]
          external_id: ""
`
	p, err := Parse([]byte(doc), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := p.Action("pay")
	want := Reconcile{
		InitialDelay: 0, Interval: time.Second, MaxInterval: time.Second, VisibilityLag: 0, InFlightWindow: 90 * time.Second, DefinitiveAbsence: true,
		Verifier: &Verifier{HTTP: &HTTPVerifier{
			Method: "POST",
			URL:    "${PROVIDER_URL:-https://api.example.com}/v1/payments/{external_id}/search?k={operation_key}&tenant=${TENANT}",
			Headers: map[string]string{
				"Authorization": "Bearer ${PROVIDER_TOKEN}",
				"X-Api-Key":     "${API_KEY}",
				"Accept":        "application/json",
				"Cookie":        "session=${SESSION}; theme=dark",
			},
			Timeout: 5 * time.Minute, List: "/data/items", Found: "/a~1b/~0c", Completed: "/status",
			CompletedValues: []string{"succeeded", "3", "true"}, ExternalID: "",
		}},
	}
	if !reflect.DeepEqual(a.Reconcile, want) {
		t.Errorf("Reconcile =\n  %+v %+v\nwant\n  %+v %+v", a.Reconcile, a.Reconcile.Verifier.HTTP, want, want.Verifier.HTTP)
	}

	// The minimal verifier takes every default.
	p, err = Parse([]byte("actions:\n  a:\n    reconcile:\n      verifier:\n        http: {url: \"http://p/x/{operation_key}\", external_id: /id}\n"), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, _ = p.Action("a")
	wantHTTP := &HTTPVerifier{Method: "GET", URL: "http://p/x/{operation_key}", Timeout: 5 * time.Second, ExternalID: "/id"}
	if r := a.Reconcile; r.InitialDelay != 5*time.Second || r.Interval != 10*time.Second || r.MaxInterval != 5*time.Minute ||
		r.VisibilityLag != 30*time.Second || r.DefinitiveAbsence || !reflect.DeepEqual(r.Verifier.HTTP, wantHTTP) {
		t.Errorf("minimal reconcile = %+v, %+v", r, r.Verifier.HTTP)
	}
}

func TestReconcileInvalid(t *testing.T) {
	// Lines 1-3 are "actions:", "  a:", "    reconcile:"; the fields
	// start on line 4.
	const head = "actions:\n  a:\n    reconcile:\n"
	// An http verifier whose fields start on line 6.
	const vhead = head + "      verifier:\n        http:\n"
	const okURL = "          url: \"http://p/x?k={operation_key}\"\n"
	const okID = "          external_id: /id\n"
	const path = "actions.a.reconcile."
	const vpath = path + "verifier.http."
	tests := []struct {
		name string
		doc  string
		want []problemLine
	}{
		{
			name: "reconcile is not a mapping",
			doc:  "actions:\n  a:\n    reconcile: yes\n",
			want: []problemLine{{"policy.yaml:3: actions.a.reconcile: ", `must be a mapping of reconciliation fields, got string "yes"`}},
		},
		{
			name: "unknown reconcile field",
			doc:  head + "      intervall: 5s\n",
			want: []problemLine{{"policy.yaml:4: " + path + "intervall: ", "unknown field (known fields: initial_delay, interval, max_interval, visibility_lag, in_flight_window, definitive_absence, verifier)"}},
		},
		{
			// Issue 10: a definitive search proves nothing while the
			// provider may still carry out the request it received.
			name: "definitive absence without an in-flight window",
			doc:  head + "      visibility_lag: 5s\n      definitive_absence: true\n",
			want: []problemLine{{"policy.yaml:4: " + path + "in_flight_window: ", "is required with definitive_absence: true"}},
		},
		{
			name: "in-flight window of zero",
			doc:  head + "      in_flight_window: 0s\n      definitive_absence: true\n",
			want: []problemLine{
				{"policy.yaml:4: " + path + "in_flight_window: ", "is required with definitive_absence: true"},
				{"policy.yaml:4: " + path + "in_flight_window: ", `"0s" must be greater than zero`},
			},
		},
		{
			name: "duration is a number",
			doc:  head + "      initial_delay: 5\n",
			want: []problemLine{{"policy.yaml:4: " + path + "initial_delay: ", "must be a duration such as 5s or 1m30s, got integer 5"}},
		},
		{
			name: "duration without a unit",
			doc:  head + "      visibility_lag: \"30\"\n",
			want: []problemLine{{"policy.yaml:4: " + path + "visibility_lag: ", `"30" is not a duration: write a Go duration such as 5s or 1m30s`}},
		},
		{
			name: "negative duration",
			doc:  head + "      initial_delay: 1s\n      visibility_lag: -1s\n",
			want: []problemLine{{"policy.yaml:5: " + path + "visibility_lag: ", `"-1s" must not be negative`}},
		},
		{
			name: "zero interval",
			doc:  head + "      interval: 0s\n",
			want: []problemLine{{"policy.yaml:4: " + path + "interval: ", `"0s" must be greater than zero`}},
		},
		{
			name: "zero max_interval",
			doc:  head + "      max_interval: 0ms\n",
			want: []problemLine{{"policy.yaml:4: " + path + "max_interval: ", `"0ms" must be greater than zero`}},
		},
		{
			name: "interval longer than max_interval",
			doc:  head + "      interval: 2m\n      max_interval: 1m\n",
			want: []problemLine{{"policy.yaml:4: " + path + "interval: ", "interval 2m is longer than max_interval 1m"}},
		},
		{
			name: "interval longer than the default max_interval",
			doc:  head + "      initial_delay: 0s\n      interval: 10m\n",
			want: []problemLine{{"policy.yaml:5: " + path + "interval: ", "interval 10m is longer than max_interval 5m"}},
		},
		{
			name: "max_interval shorter than the default interval",
			doc:  head + "      max_interval: 5s\n",
			want: []problemLine{{"policy.yaml:4: " + path + "max_interval: ", "interval 10s is longer than max_interval 5s"}},
		},
		{
			name: "definitive_absence is a string",
			doc:  head + "      definitive_absence: \"true\"\n",
			want: []problemLine{{"policy.yaml:4: " + path + "definitive_absence: ", `must be true or false, got string "true"`}},
		},
		{
			name: "empty verifier",
			doc:  head + "      verifier: {}\n",
			want: []problemLine{{"policy.yaml:4: " + path + "verifier: ", "must configure a kind of verifier (http)"}},
		},
		{
			name: "unknown verifier kind",
			doc:  head + "      verifier:\n        grpc: {}\n",
			want: []problemLine{{"policy.yaml:5: " + path + "verifier.grpc: ", "unknown field (known fields: http)"}},
		},
		{
			name: "http verifier without url and external_id",
			doc:  vhead + "          method: GET\n",
			want: []problemLine{
				{"policy.yaml:6: " + vpath + "url: ", "missing: an http verifier needs a url holding {operation_key} or {external_id}"},
				{"policy.yaml:6: " + vpath + "external_id: ", "missing: a pointer to the provider's id"},
			},
		},
		{
			name: "unknown http field",
			doc:  vhead + okURL + okID + "          body: x\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "body: ", "unknown field (known fields: method, url, headers, timeout, list, found, completed, completed_values, external_id)"}},
		},
		{
			name: "method PUT",
			doc:  vhead + okURL + okID + "          method: PUT\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "method: ", "PUT is not one of GET, POST"}},
		},
		{
			name: "url without a placeholder",
			doc:  vhead + "          url: \"http://p/payments\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "must contain {operation_key} or {external_id}"}},
		},
		{
			name: "relative url",
			doc:  vhead + "          url: \"/payments/{operation_key}\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "must be an absolute http:// or https:// URL (with the environment empty, it reads /payments/opjournal-placeholder)"}},
		},
		{
			name: "url that is only an unset variable",
			doc:  vhead + "          url: \"${PROVIDER_URL}/payments/{operation_key}\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "must be an absolute http:// or https:// URL"}},
		},
		{
			name: "ftp url",
			doc:  vhead + "          url: \"ftp://p/{operation_key}\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "must be an absolute http:// or https:// URL"}},
		},
		{
			name: "url without a host",
			doc:  vhead + "          url: \"http:///x/{operation_key}\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "has no host"}},
		},
		{
			name: "placeholder in the host",
			doc:  vhead + "          url: \"http://{operation_key}.example.com/x\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "the placeholders may only appear in the path or the query"}},
		},
		{
			name: "unparseable url",
			doc:  vhead + "          url: \"http://p:port/{operation_key}\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", `is not a valid URL: invalid port ":port" after host`}},
		},
		{
			name: "unterminated variable in url",
			doc:  vhead + "          url: \"${PROVIDER_URL/x/{operation_key}\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "${PROVIDER_URL/x/{operation_key} is not a valid reference"}},
		},
		{
			name: "bad variable name in url",
			doc:  vhead + "          url: \"${1X}/x/{operation_key}\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "${1X} is not a valid reference: write ${NAME} or ${NAME:-default}"}},
		},
		{
			name: "unterminated reference at the end",
			doc:  vhead + "          url: \"http://p/{operation_key}${X\"\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "unterminated ${ at offset 24"}},
		},
		{
			name: "url is a number",
			doc:  vhead + "          url: 8099\n" + okID,
			want: []problemLine{{"policy.yaml:6: " + vpath + "url: ", "must be a string, got integer 8099"}},
		},
		{
			name: "literal Authorization header",
			doc:  vhead + okURL + okID + "          headers:\n            Authorization: \"Bearer sk_live_123\"\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + "headers.Authorization: ", "secrets come from the environment (${VAR}), never from the policy file"}},
		},
		{
			name: "secret header with only a default",
			doc:  vhead + okURL + okID + "          headers:\n            X-Api-Token: \"${TOKEN:-sk_live_123}\"\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + "headers.X-Api-Token: ", "secrets come from the environment (${VAR}), never from the policy file"}},
		},
		{
			name: "every kind of secret header",
			doc: vhead + okURL + okID + "          headers:\n" +
				"            proxy-authorization: Basic abc\n" +
				"            Cookie: session=abc\n" +
				"            X-Secret: abc\n" +
				"            X-APIKEY: abc\n" +
				"            X-Authn: abc\n" +
				"            Accept: application/json\n",
			want: []problemLine{
				{"policy.yaml:9: " + vpath + "headers.proxy-authorization: ", "secrets come from the environment (${VAR})"},
				{"policy.yaml:10: " + vpath + "headers.Cookie: ", "secrets come from the environment (${VAR})"},
				{"policy.yaml:11: " + vpath + "headers.X-Secret: ", "secrets come from the environment (${VAR})"},
				{"policy.yaml:12: " + vpath + "headers.X-APIKEY: ", "secrets come from the environment (${VAR})"},
				{"policy.yaml:13: " + vpath + "headers.X-Authn: ", "secrets come from the environment (${VAR})"},
			},
		},
		{
			name: "the secret's value is not in the error",
			doc:  vhead + okURL + okID + "          headers:\n            Authorization: \"Bearer sk_live_123\"\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + "headers.Authorization: ", "write the secret part of this header as ${VAR} (without a :- default)"}},
		},
		{
			name: "header name with a space",
			doc:  vhead + okURL + okID + "          headers:\n            \"X Trace\": a\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + `headers["X Trace"]: `, "is not a valid HTTP header name"}},
		},
		{
			name: "duplicate header in another case",
			doc:  vhead + okURL + okID + "          headers:\n            Accept: a\n            accept: b\n",
			want: []problemLine{{"policy.yaml:10: " + vpath + "headers.accept: ", "duplicate header (first defined at line 9; header names are case-insensitive)"}},
		},
		{
			name: "Host header",
			doc:  vhead + okURL + okID + "          headers:\n            Host: evil\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + "headers.Host: ", "is set by the HTTP client and cannot be configured"}},
		},
		{
			name: "header value with a line break",
			doc:  vhead + okURL + okID + "          headers:\n            X-Trace: \"a\\nb\"\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + "headers.X-Trace: ", "has a control character at offset 1"}},
		},
		{
			name: "headers is a list",
			doc:  vhead + okURL + okID + "          headers: [Accept]\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "headers: ", "must be a mapping from header name to value, got a sequence"}},
		},
		{
			name: "timeout too short",
			doc:  vhead + okURL + okID + "          timeout: 500ms\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "timeout: ", "500ms is out of range 1s..5m"}},
		},
		{
			name: "timeout too long",
			doc:  vhead + okURL + okID + "          timeout: 301s\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "timeout: ", "5m1s is out of range 1s..5m"}},
		},
		{
			name: "timeout zero",
			doc:  vhead + okURL + okID + "          timeout: 0s\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "timeout: ", `"0s" must be greater than zero`}},
		},
		{
			name: "pointer without a leading slash",
			doc:  vhead + okURL + "          external_id: id\n",
			want: []problemLine{{"policy.yaml:7: " + vpath + "external_id: ", "id is not a JSON pointer: it must be empty or start with '/'"}},
		},
		{
			name: "pointer with a bad escape",
			doc:  vhead + okURL + okID + "          found: /a~2b\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "found: ", "/a~2b is not a JSON pointer: '~' must be followed by 0 (for '~') or 1 (for '/')"}},
		},
		{
			name: "pointer ending in a tilde",
			doc:  vhead + okURL + okID + "          completed: /status~\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "completed: ", "is not a JSON pointer"}},
		},
		{
			name: "list is the whole response",
			doc:  vhead + okURL + okID + "          list: \"\"\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "list: ", `"" (the whole response) cannot be a list`}},
		},
		{
			name: "completed is the match itself",
			doc:  vhead + okURL + okID + "          completed: \"\"\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "completed: ", `"" (the match itself) cannot be the completion state`}},
		},
		{
			name: "completed_values without completed",
			doc:  vhead + okURL + okID + "          completed_values: [succeeded]\n",
			want: []problemLine{{"policy.yaml:8: " + vpath + "completed_values: ", "needs completed"}},
		},
		{
			name: "completed_values empty",
			doc:  vhead + okURL + okID + "          completed: /status\n          completed_values: []\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + "completed_values: ", "must list at least one value"}},
		},
		{
			name: "completed_values is a string",
			doc:  vhead + okURL + okID + "          completed: /status\n          completed_values: succeeded\n",
			want: []problemLine{{"policy.yaml:9: " + vpath + "completed_values: ", `must be a list of values, got string "succeeded"`}},
		},
		{
			name: "completed_values with a duplicate and a null",
			doc:  vhead + okURL + okID + "          completed: /status\n          completed_values:\n            - succeeded\n            - null\n            - succeeded\n",
			want: []problemLine{
				{"policy.yaml:11: " + vpath + "completed_values[1]: ", "must be a string, got null"},
				{"policy.yaml:12: " + vpath + "completed_values[2]: ", `"succeeded" is listed twice (first at line 10)`},
			},
		},
		{
			name: "duplicate reconcile field",
			doc:  head + "      interval: 1s\n      interval: 2s\n",
			want: []problemLine{{"policy.yaml:5: " + path + "interval: ", "duplicate key (first defined at line 4)"}},
		},
		{
			name: "problems in two actions are all reported",
			doc: "actions:\n  a:\n    reconcile:\n      interval: soon\n  b:\n    reconcile:\n      verifier:\n        http:\n" +
				"          url: \"http://p/x\"\n          external_id: /id\n          headers: {Authorization: secret}\n",
			want: []problemLine{
				{"policy.yaml:4: actions.a.reconcile.interval: ", `"soon" is not a duration`},
				{"policy.yaml:9: actions.b.reconcile.verifier.http.url: ", "must contain {operation_key} or {external_id}"},
				{"policy.yaml:11: actions.b.reconcile.verifier.http.headers.Authorization: ", "secrets come from the environment"},
			},
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
			if strings.Contains(err.Error(), "sk_live_123") {
				t.Errorf("the error repeats a secret: %v", err)
			}
		})
	}
}

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"HOST": "http://h:1", "EMPTY": "", "TOKEN": "s3cr3t"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for in, want := range map[string]string{
		"":                               "",
		"plain $ text {operation_key} $": "plain $ text {operation_key} $",
		"${HOST}/x":                      "http://h:1/x",
		"${MISSING:-http://d:2}/x":       "http://d:2/x",
		"${EMPTY:-fallback}":             "fallback",
		"${HOST:-unused}":                "http://h:1",
		"${EMPTY}":                       "",
		"a${TOKEN}b${TOKEN}c":            "as3cr3tbs3cr3tc",
		"${MISSING:-}":                   "",
		"${MISSING:-a:-b}":               "a:-b",
	} {
		got, err := ExpandEnv(in, lookup)
		if err != nil || got != want {
			t.Errorf("ExpandEnv(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, wantErr := range map[string]string{
		"Bearer ${MISSING}": "environment variable MISSING is not set",
		"${":                "unterminated ${ at offset 0",
		"${A-B}":            "${A-B} is not a valid reference",
		"${}":               "${} is not a valid reference",
		"${ HOST}":          `"${ HOST}" is not a valid reference`,
	} {
		got, err := ExpandEnv(in, lookup)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ExpandEnv(%q) = %q, %v; want error containing %q", in, got, err, wantErr)
		}
	}
	refs, err := EnvRefs("${A}x${B:-d}")
	if err != nil || !reflect.DeepEqual(refs, []EnvRef{{Name: "A"}, {Name: "B", Default: "d", HasDefault: true}}) {
		t.Errorf("EnvRefs = %+v, %v", refs, err)
	}
}

func TestCheckPointer(t *testing.T) {
	for _, ok := range []string{"", "/", "/data", "/data/0/id", "/a~0b~1c", "//"} {
		if err := CheckPointer(ok); err != nil {
			t.Errorf("CheckPointer(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"data", "#/data", "/a~", "/a~2", "~0"} {
		if err := CheckPointer(bad); err == nil {
			t.Errorf("CheckPointer(%q) accepted", bad)
		}
	}
}

func TestReconcileIsCopied(t *testing.T) {
	p := Default()
	a, _ := p.Action("create_payment")
	a.Reconcile.Verifier.HTTP.URL = "changed"
	a.Reconcile.Verifier.HTTP.CompletedValues[0] = "changed"
	a.Reconcile.Verifier.HTTP.Headers = map[string]string{"X": "y"}
	b, _ := p.Action("create_payment")
	if h := b.Reconcile.Verifier.HTTP; h.URL == "changed" || h.CompletedValues[0] == "changed" || h.Headers != nil {
		t.Errorf("modifying a returned Action's verifier changed the policy: %+v", h)
	}
	p2, err := Parse([]byte("actions:\n  a:\n    reconcile:\n      verifier:\n        http:\n          url: \"http://p/{operation_key}\"\n          external_id: /id\n          headers: {Accept: x}\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := p2.Action("a")
	c.Reconcile.Verifier.HTTP.Headers["Accept"] = "changed"
	d, _ := p2.Action("a")
	if d.Reconcile.Verifier.HTTP.Headers["Accept"] != "x" {
		t.Error("modifying a returned Action's headers changed the policy")
	}
}
