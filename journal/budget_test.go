package journal

import (
	"strings"
	"testing"

	"github.com/opjournal/opjournal/protocol/policy"
)

// A policy with budgets is refused until the journal enforces them: one
// that loaded would admit what its budgets were written to stop.
func TestBudgetsAreRefusedUntilEnforced(t *testing.T) {
	if err := CheckEnforced(policy.Default()); err != nil {
		t.Fatalf("the shipped policy: %v", err)
	}
	pol, err := policy.Parse([]byte("actions:\n  pay:\n    budgets: [{name: daily, count: true, window: 24h, limit: 3, on_exceed: reject}]\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckEnforced(pol); err == nil || !strings.Contains(err.Error(), "actions.pay.budgets: budgets are checked by the policy language but not enforced") {
		t.Fatalf("got %v", err)
	}
}
