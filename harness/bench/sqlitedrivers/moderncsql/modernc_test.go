// Package moderncsql runs the workload on modernc.org/sqlite through
// database/sql: the store's own driver and settings (store/sqlite's dsn).
package moderncsql

import (
	"net/url"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/opjournal/opjournal/harness/bench/sqlitedrivers/workload"
)

func open(path string) (workload.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return workload.OpenSQL("sqlite", "file:"+path+"?"+q.Encode())
}

func TestWorkload(t *testing.T) { workload.Check(t, open) }

func BenchmarkFused(b *testing.B) { workload.Bench(b, open) }
