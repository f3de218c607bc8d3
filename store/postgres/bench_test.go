package postgres_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/storetest"
)

// BenchmarkFused measures the store alone on the fused path (register with
// claim, then mark succeeded) from 32 goroutines, with the hot path's
// batching on (the default) and off:
//
//	go test -run '^$' -bench Fused -benchtime 5s ./store/postgres/
//
// parallelism is per GOMAXPROCS (-cpu): 16 with 2 CPUs is 32 callers;
// "-args -parallelism 0" measures one caller's latency.
var parallelism = flag.Int("parallelism", 16, "callers per GOMAXPROCS in the store benchmarks (0: one caller)")

func BenchmarkFused(b *testing.B) { benchCycle(b, true) }

// BenchmarkFullCycle is BenchmarkFused with register, claim and mark
// succeeded as three calls:
//
//	go test -run '^$' -bench FullCycle -benchtime 5s ./store/postgres/
func BenchmarkFullCycle(b *testing.B) { benchCycle(b, false) }

func benchCycle(b *testing.B, fused bool) {
	for _, workers := range []int{0, 1, 2, 4} {
		b.Run(fmt.Sprintf("batch_workers=%d", workers), func(b *testing.B) {
			base := pgtest.NewSchema(b)
			url := base + "&pool_max_conns=16&opjournal_batch_workers=" + fmt.Sprint(workers)
			s, err := postgres.Open(context.Background(), url)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var n atomic.Int64
			payload := json.RawMessage(`{"amount_minor":490000,"currency":"RUB","order_id":"817"}`)
			b.SetParallelism(max(1, *parallelism))
			b.ResetTimer()
			c0 := bench.ReadCPU(0)
			cycle := func(next func() bool) {
				ctx := context.Background()
				for next() {
					key := fmt.Sprintf("k%d", n.Add(1))
					rc := &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "create_payment", RequestHash: "h", Payload: payload}
					if fused {
						rc.Claim, rc.WorkerID, rc.LeaseSeconds = true, "w", 30
					}
					r, err := s.Apply(ctx, "", rc)
					if err == nil && !fused {
						r, err = s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdClaim, Key: key, WorkerID: "w", LeaseSeconds: 30})
					}
					if err != nil || !r.Claimed {
						b.Errorf("register and claim: %v %+v", err, r)
						return
					}
					if _, err := storetest.Op(s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: key, Attempt: 1, ExternalID: "x", Result: json.RawMessage(`{"ok":true}`)})); err != nil {
						b.Errorf("mark: %v", err)
						return
					}
				}
			}
			if *parallelism == 0 {
				i := 0
				cycle(func() bool { i++; return i <= b.N })
			} else {
				b.RunParallel(func(pb *testing.PB) { cycle(pb.Next) })
			}
			c1 := bench.ReadCPU(0)
			b.ReportMetric(float64(c1.Postgres-c0.Postgres)/float64(b.N), "pg-cpu-µs/op")
			b.ReportMetric(float64(c1.Client-c0.Client)/float64(b.N), "go-cpu-µs/op")
		})
	}
}
