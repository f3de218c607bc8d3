// Command protocolgen writes every artefact derived from the protocol
// table (protocol/table.go), so that one command follows a change to a
// rule everywhere:
//
//   - store/postgres/testdata/statements.sql: the SQL the PostgreSQL store
//     runs for each rule, rendered by store/postgres/render.go;
//   - store/sqlite/terms.go: the shared terms in SQLite's dialect, the Go
//     constants the SQLite store's statements are made of;
//   - docs/protocol.md: the table as the manual shows it, between its
//     markers.
//
// Run it from the repository's root (make generate does); make
// generate-check fails when any of them is not what it writes, and each
// one's package has a test that says the same.
//
//	go run ./protocol/cmd/protocolgen
package main

import (
	"fmt"
	"os"

	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/sqlite"
)

// protocolDoc is the manual's page on the protocol.
const protocolDoc = "docs/protocol.md"

func main() {
	if len(os.Args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: go run ./protocol/cmd/protocolgen (from the repository's root; no arguments)")
		os.Exit(2)
	}
	if err := generate(); err != nil {
		fmt.Fprintln(os.Stderr, "protocolgen:", err)
		os.Exit(1)
	}
}

// generate renders each artefact, then writes them all: a table that does
// not render leaves every file as it was.
func generate() error {
	statements, err := postgres.Statements()
	if err != nil {
		return fmt.Errorf("PostgreSQL statements: %w", err)
	}
	terms, err := sqlite.Terms()
	if err != nil {
		return fmt.Errorf("SQLite terms: %w", err)
	}
	page, err := os.ReadFile(protocolDoc)
	if err != nil {
		return err
	}
	doc, err := protocol.SpliceProtocol(string(page))
	if err != nil {
		return fmt.Errorf("%s: %w", protocolDoc, err)
	}
	for _, f := range []struct {
		path string
		b    []byte
	}{{postgres.StatementsPath, []byte(statements)}, {sqlite.TermsPath, terms}, {protocolDoc, []byte(doc)}} {
		if err := os.WriteFile(f.path, f.b, 0o644); err != nil {
			return err
		}
		fmt.Println("protocolgen: wrote", f.path)
	}
	return nil
}
