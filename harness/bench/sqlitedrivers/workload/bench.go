package workload

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Opener opens a driver's database on a new file at path.
type Opener func(path string) (DB, error)

// Writers are the concurrencies measured: one caller, and the store's
// BenchmarkFused's 32 callers (SetParallelism(16) on 2 CPUs).
var Writers = []int{1, 32}

// Bench runs the fused cycle b.N times for each of Writers, in
// sub-benchmarks "writers=N", reporting cpu-µs/op: the process's user +
// system CPU (getrusage, so a cgo driver's threads count too) per cycle.
// Every key must end succeeded, or the benchmark fails.
func Bench(b *testing.B, open Opener) {
	for _, w := range Writers {
		b.Run(fmt.Sprintf("writers=%d", w), func(b *testing.B) {
			db, err := open(filepath.Join(b.TempDir(), "bench.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			c := &Committer{DB: db}
			var n atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			if err := Cycles(c, w, b.N, &n); err != nil {
				b.Fatal(err)
			}
			cpu1 := processCPU()
			b.StopTimer()
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			if err := Verify(db, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// Cycles runs total fused cycles (Register, then MarkSucceeded, each in a
// write transaction through c) from writers goroutines, on keys k<n>. It
// returns the first error.
func Cycles(c *Committer, writers, total int, n *atomic.Int64) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range writers {
		wg.Go(func() {
			for {
				i := n.Add(1)
				if i > int64(total) {
					return
				}
				key := fmt.Sprintf("k%d", i)
				err := c.Do(func(tx Tx) error { return Register(tx, key) })
				if err == nil {
					err = c.Do(func(tx Tx) error { return MarkSucceeded(tx, key) })
				}
				if err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// Verify checks that total cycles left total succeeded operations and
// two events each, and nothing else.
func Verify(db DB, total int) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer db.Rollback(tx) //nolint:errcheck // read only
	var ops, succeeded, events int64
	if _, err := tx.QueryRow(`SELECT count(*), count(*) FILTER (WHERE status = 'succeeded' AND external_id = 'x'),
		(SELECT count(*) FROM operation_events) FROM operations`, nil, &ops, &succeeded, &events); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if ops != int64(total) || succeeded != int64(total) || events != 2*int64(total) {
		return fmt.Errorf("verify: %d cycles left %d operations, %d succeeded, %d events", total, ops, succeeded, events)
	}
	return nil
}

// Check runs 500 cycles from 8 writers through open and verifies them: a
// driver adapter's test.
func Check(t *testing.T, open Opener) {
	db, err := open(filepath.Join(t.TempDir(), "check.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n atomic.Int64
	if err := Cycles(&Committer{DB: db}, 8, 500, &n); err != nil {
		t.Fatal(err)
	}
	if err := Verify(db, 500); err != nil {
		t.Fatal(err)
	}
	// A second register of a key fails inside its savepoint and changes
	// nothing.
	c := &Committer{DB: db}
	if err := c.Do(func(tx Tx) error { return Register(tx, "k1") }); err == nil {
		t.Fatal("registering k1 again succeeded")
	}
	if err := Verify(db, 500); err != nil {
		t.Fatal(err)
	}
}

// processCPU is the process's user + system time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
