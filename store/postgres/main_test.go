package postgres

import (
	"fmt"
	"os"
	"testing"
)

// TestMain renders the statements before any test reads them, as Open
// does before a store serves.
func TestMain(m *testing.M) {
	if err := rendered(); err != nil {
		fmt.Fprintln(os.Stderr, "postgres: the protocol table does not render:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestTheTableRenders: every rule of the protocol table renders, and the
// batched statements find the rules they apply without reading a row.
// Open fails with this error instead; this test fails first, in CI.
func TestTheTableRenders(t *testing.T) {
	if err := rendered(); err != nil {
		t.Fatal(err)
	}
	if batchReg == nil || batchClaim == nil || batchMark == nil || len(inserts) == 0 || len(updates) == 0 {
		t.Fatal("rendered, but a statement is missing")
	}
}
