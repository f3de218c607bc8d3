package policy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
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
		}
	})
}
