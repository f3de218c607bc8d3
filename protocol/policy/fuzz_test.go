package policy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/httpheader"
)

var errorLineRE = regexp.MustCompile(`^fuzz\.yaml:[1-9][0-9]*: \S`)

func FuzzParse(f *testing.F) {
	f.Add(DefaultYAML())
	f.Add([]byte("actions:\n  a: {}\n"))
	f.Add([]byte("actions:\n  create_ticket:\n    lease_seconds: 86400\n    retry: {reuse_operation_key: true, on_timeout: retry_same_key}\n    retention: 30d\n    unknown_after_seconds: 1\n"))
	f.Add([]byte("actions:\n  a: &x {}\n  b: *x\n"))
	f.Add([]byte("actions:\n  a:\n    <<: {lease_seconds: 5}\n---\nactions: {}\n"))
	f.Add([]byte("actions:\n  a:\n    terminal_states: [succeeded, failed_final]\n    integer_fields: [x, x, \"\"]\n    lease_seconds: 0x1E\n"))
	f.Add([]byte(""))
	f.Add([]byte("actions:\n  a:\n    reconcile:\n      initial_delay: 0s\n      interval: 1s\n      max_interval: 1s\n      visibility_lag: 0s\n      definitive_absence: true\n      verifier:\n        http:\n          method: POST\n          url: \"${U:-https://p}/x/{external_id}?k={operation_key}\"\n          headers: {Authorization: \"Bearer ${T}\", Accept: a}\n          timeout: 5m\n          list: /data\n          found: /a~1b\n          completed: /s\n          completed_values: [ok, 1]\n          external_id: \"\"\n"))
	f.Add([]byte("actions:\n  a:\n    reconcile:\n      interval: 2m\n      max_interval: -1s\n      verifier:\n        http:\n          url: \"${X/{operation_key}\"\n          headers: {Cookie: c, \"a b\": 1, Host: h}\n          list: \"\"\n          found: x~2\n          completed_values: []\n          timeout: 0s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if p != nil {
				t.Fatal("Parse returned a policy and an error")
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !errorLineRE.MatchString(line) {
					t.Fatalf("error line %q does not start with SOURCE:LINE: ", line)
				}
			}
			return
		}
		names := p.Names()
		if len(names) == 0 {
			t.Fatal("accepted a policy with no actions")
		}
		if !slices.IsSorted(names) {
			t.Fatalf("Names() not sorted: %q", names)
		}
		for _, name := range names {
			a, ok := p.Action(name)
			if !ok || a.Name != name {
				t.Fatalf("Action(%q) = %+v, %v", name, a, ok)
			}
			if !actionNameRE.MatchString(name) {
				t.Fatalf("accepted action name %q", name)
			}
			if a.LeaseSeconds < 1 || a.LeaseSeconds > 86400 {
				t.Fatalf("%s: LeaseSeconds %d out of range", name, a.LeaseSeconds)
			}
			if a.OnTimeout != ReconcileBeforeRetry && a.OnTimeout != RetrySameKey {
				t.Fatalf("%s: OnTimeout %q", name, a.OnTimeout)
			}
			if !a.ReuseOperationKey || a.OnUnresolved != "require_human_review" {
				t.Fatalf("%s: %+v", name, a)
			}
			if a.UnknownAfter <= 0 || a.Retention < a.UnknownAfter || a.Retention < minRetention {
				t.Fatalf("%s: UnknownAfter %v, Retention %v", name, a.UnknownAfter, a.Retention)
			}
			checkReconcile(t, name, a.Reconcile)
		}
	})
}

// checkReconcile checks the invariants of an accepted reconcile section.
func checkReconcile(t *testing.T, name string, r Reconcile) {
	t.Helper()
	if r.InitialDelay < 0 || r.VisibilityLag < 0 || r.Interval <= 0 || r.MaxInterval < r.Interval {
		t.Fatalf("%s: reconcile %+v", name, r)
	}
	if r.Verifier == nil {
		return
	}
	h := r.Verifier.HTTP
	if h == nil {
		t.Fatalf("%s: a verifier of no kind", name)
	}
	if h.Method != "GET" && h.Method != "POST" || h.Timeout < time.Second || h.Timeout > 5*time.Minute {
		t.Fatalf("%s: verifier %+v", name, h)
	}
	if !strings.Contains(h.URL, PlaceholderOperationKey) && !strings.Contains(h.URL, PlaceholderExternalID) {
		t.Fatalf("%s: URL %q without a placeholder", name, h.URL)
	}
	for _, ptr := range []string{h.List, h.Found, h.Completed, h.ExternalID} {
		if CheckPointer(ptr) != nil {
			t.Fatalf("%s: accepted pointer %q", name, ptr)
		}
	}
	for k, v := range h.Headers {
		refs, err := EnvRefs(v)
		if err != nil {
			t.Fatalf("%s: header %s: %v", name, k, err)
		}
		if httpheader.IsSecret(k) && !slices.ContainsFunc(refs, func(r EnvRef) bool { return !r.HasDefault }) {
			t.Fatalf("%s: secret header %s without ${VAR}", name, k)
		}
	}
}
