package postgres

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/internal/protocol"
)

var update = flag.Bool("update", false, "rewrite testdata/statements.sql from the rendered statements")

// statementsFile renders every statement the store runs for the protocol
// table, named by its rule, and the shared predicates they are made of:
// what the database is asked, readable without running anything.
func statementsFile() string {
	var b strings.Builder
	b.WriteString("-- The PostgreSQL store's statements, rendered from the protocol table\n" +
		"-- (internal/protocol/table.go) by store/postgres/render.go. Generated:\n" +
		"-- go test ./store/postgres/ -run TestStatementsFile -update\n" +
		"-- $1 is the clock (NULL: now()), $2 the tenant, $3 the key; a rule's\n" +
		"-- parameters follow in the order given. Batched statements take arrays.\n")
	section := func(name, params, sql string) {
		b.WriteString("\n-- name: " + name + "\n")
		if params != "" {
			b.WriteString("-- params: " + params + "\n")
		}
		b.WriteString(strings.TrimSpace(sql) + ";\n")
	}
	for _, p := range []struct{ name, sql string }{
		{"predicate: effective status", effectiveStatus}, {"predicate: effectively unknown", isUnknown},
		{"predicate: lease expired", leaseExpired}, {"predicate: check due", checkDue},
		{"predicate: purgeable", purgeable},
	} {
		section(p.name, "", "SELECT "+p.sql)
	}
	names := func(ps []protocol.Param) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.Name()
		}
		return strings.Join(s, ", ")
	}
	for _, r := range protocol.AllRules() {
		st := inserts[r]
		if st == nil {
			st = updates[r]
		}
		if st != nil {
			section(st.name, names(st.params), st.sql)
		}
	}
	for _, st := range []*statement{batchReg, batchClaim, batchMark} {
		section("batched "+st.name, names(st.params), st.sql)
	}
	return b.String()
}

// TestStatementsFile: testdata/statements.sql is what render.go renders
// from the table today, so a change to a rule shows as a diff of SQL in
// review (rewrite it with -update).
func TestStatementsFile(t *testing.T) {
	path := filepath.Join("testdata", "statements.sql")
	got := statementsFile()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	if string(want) != got {
		t.Fatalf("%s is not what render.go renders: run go test ./store/postgres/ -run TestStatementsFile -update and review the diff", path)
	}
}

// TestBatchedRulesAreChosenByWhatTheyRequire: the batched statements
// apply the rules the one-call path would try first.
func TestBatchedRulesAreChosenByWhatTheyRequire(t *testing.T) {
	claimed, plain := insertRules()
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
