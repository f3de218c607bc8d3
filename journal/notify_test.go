package journal_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// TestWithAwaitingApprovalHearsOfEachNewQuestionOnce: the hook is called
// for an operation Register created awaiting approval, after it is
// stored, and neither for its replay nor for one that needs no approval.
func TestWithAwaitingApprovalHearsOfEachNewQuestionOnce(t *testing.T) {
	t.Parallel()
	pol, err := policy.Parse([]byte(`actions:
  create_payment:
    integer_fields: [amount_minor]
    approval:
      when: "payload.amount_minor > 100000"
`), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var heard []*opjournal.Operation
	var svc *journal.Service
	svc = journal.New(st, pol, journal.Limits{}, journal.WithAwaitingApproval(func(op *opjournal.Operation) {
		// Stored already: a Lookup from the hook finds it.
		if got, err := svc.Lookup(context.Background(), op.Tenant, op.Key); err != nil || got.Status != opjournal.StatusAwaitingApproval {
			t.Errorf("the hook ran before the operation was stored: %v %v", got, err)
		}
		heard = append(heard, op)
	}))
	register := func(key string, amount string) {
		t.Helper()
		if _, err := svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: "acme"}, Key: key,
			Action: "create_payment", Payload: json.RawMessage(`{"amount_minor":` + amount + `}`)}); err != nil {
			t.Fatal(err)
		}
	}
	register("payment:big", "490000")
	register("payment:big", "490000") // a replay
	register("payment:small", "100")
	if len(heard) != 1 || heard[0].Key != "payment:big" || heard[0].Tenant != "acme" || heard[0].Approval == nil {
		t.Fatalf("the hook heard %d operations (%+v), want payment:big once with its approval", len(heard), heard)
	}
}
