// Package mattnsql runs the workload on github.com/mattn/go-sqlite3 (cgo,
// SQLite's C amalgamation) through database/sql, with the store's
// settings in that driver's DSN keys.
package mattnsql

import (
	"net/url"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/opjournal/opjournal/harness/bench/sqlitedrivers/workload"
)

func open(path string) (workload.DB, error) {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_busy_timeout", "30000")
	q.Set("_foreign_keys", "1")
	q.Set("_txlock", "immediate")
	return workload.OpenSQL("sqlite3", "file:"+path+"?"+q.Encode())
}

func TestWorkload(t *testing.T) { workload.Check(t, open) }

func BenchmarkFused(b *testing.B) { workload.Bench(b, open) }
