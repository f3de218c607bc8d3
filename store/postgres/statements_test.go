package postgres

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opjournal/opjournal/protocol"
)

// TestStatementsFile: testdata/statements.sql is what render.go renders
// from the table today, so a change to a rule shows as a diff of SQL in
// review (the protocol's generator rewrites it).
func TestStatementsFile(t *testing.T) {
	path := filepath.Join("testdata", "statements.sql")
	got, err := Statements()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Fatalf("%s is not what render.go renders: run go run ./protocol/cmd/protocolgen (make generate) and review the diff", path)
	}
}

// TestBatchedRulesAreChosenByWhatTheyRequire: the batched statements
// apply the rules the one-call path would try first.
func TestBatchedRulesAreChosenByWhatTheyRequire(t *testing.T) {
	claimed, plain, err := insertRules()
	if err != nil {
		t.Fatal(err)
	}
	if got := insertRule(&protocol.Command{Kind: protocol.CmdRegister, Claim: true}); got != claimed {
		t.Errorf("a claimed Register inserts by %q, the batch by %q", got.Case, claimed.Case)
	}
	if got := insertRule(&protocol.Command{Kind: protocol.CmdRegister}); got != plain {
		t.Errorf("a plain Register inserts by %q, the batch by %q", got.Case, plain.Case)
	}
	for _, st := range []*statement{batchClaim, batchMark} {
		if first := protocol.Rules(st.rule.Command)[0]; first != st.rule {
			t.Errorf("batched %s applies %q; the first rule is %q", st.rule.Command, st.rule.Case, first.Case)
		}
	}
}

// TestEveryKindRenders: every kind of condition in the protocol's table
// has its SQL here (but Register's own, decided by the insert, and the
// combinations, which cond renders), and so does every kind of expression.
func TestEveryKindRenders(t *testing.T) {
	for _, k := range protocol.CondKinds() {
		switch {
		case k == protocol.CondNot || k == protocol.CondAnd || k == protocol.CondOr:
		case k.RegisterOnly():
			if condSQL[k] != nil {
				t.Errorf("condition kind %d is Register's own but has SQL", k)
			}
		case condSQL[k] == nil:
			t.Errorf("condition kind %d has no SQL in condSQL", k)
		}
	}
	for _, k := range protocol.ExprKinds() {
		if exprSQL[k] == nil {
			t.Errorf("expression kind %d has no SQL in exprSQL", k)
		}
	}
}
