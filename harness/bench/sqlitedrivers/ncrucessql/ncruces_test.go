// Package ncrucessql runs the workload on github.com/ncruces/go-sqlite3
// (SQLite compiled to wasm and translated to Go, no cgo) through
// database/sql, with the store's settings.
package ncrucessql

import (
	"net/url"
	"testing"

	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/opjournal/opjournal/harness/bench/sqlitedrivers/workload"
)

func open(path string) (workload.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return workload.OpenSQL("sqlite3", "file:"+path+"?"+q.Encode())
}

func TestWorkload(t *testing.T) { workload.Check(t, open) }

func BenchmarkFused(b *testing.B) { workload.Bench(b, open) }
