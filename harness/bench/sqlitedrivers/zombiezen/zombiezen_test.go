package zombiezen

import (
	"testing"

	"github.com/opjournal/opjournal/harness/bench/sqlitedrivers/workload"
)

func TestWorkload(t *testing.T) { workload.Check(t, Open) }

func BenchmarkFused(b *testing.B) { workload.Bench(b, Open) }
