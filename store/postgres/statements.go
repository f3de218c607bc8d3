package postgres

import (
	"strings"

	"github.com/opjournal/opjournal/protocol"
)

// StatementsPath is where the protocol's generator writes Statements,
// relative to the repository's root.
const StatementsPath = "store/postgres/testdata/statements.sql"

// Statements renders every statement the store runs for the protocol
// table, named by its rule, and the shared predicates they are made of:
// what the database is asked, readable without running anything. The
// protocol's generator (protocol/cmd/protocolgen) writes it to
// StatementsPath, so a change to a rule shows as a diff of SQL in review.
func Statements() (string, error) {
	if err := rendered(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("-- The PostgreSQL store's statements, rendered from the protocol table\n" +
		"-- (protocol/table.go) by store/postgres/render.go. Generated:\n" +
		"-- go run ./protocol/cmd/protocolgen (make generate)\n" +
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
	return b.String(), nil
}
