package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/sqlite"
	"github.com/opjournal/opjournal/store/storetest"
)

// BenchmarkFused measures the embedded store alone on the fused path
// (register with claim, then mark succeeded) from 32 goroutines, with the
// CPU it spends per operation (go-cpu-µs/op), to profile what the
// server's SQLite figure is made of:
//
//	go test -run '^$' -bench Fused -benchtime 4s -cpuprofile /tmp/sqlite.prof ./store/sqlite/
func BenchmarkFused(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	payload := json.RawMessage(`{"amount_minor":490000,"currency":"RUB","order_id":"817"}`)
	b.SetParallelism(16)
	b.ResetTimer()
	c0 := bench.ReadCPU(0)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			key := fmt.Sprintf("k%d", n.Add(1))
			r, err := s.Apply(ctx, "", storetest.Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "create_payment", RequestHash: "h", Payload: payload}, &storetest.ClaimPolicy{WorkerID: "w", LeaseSeconds: 30}))
			if err != nil || !r.Claimed {
				b.Errorf("register and claim: %v %+v", err, r)
				return
			}
			if _, err := storetest.Op(s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: key, Attempt: 1, ExternalID: "x", Result: json.RawMessage(`{"ok":true}`)})); err != nil {
				b.Errorf("mark: %v", err)
				return
			}
		}
	})
	c1 := bench.ReadCPU(0)
	b.ReportMetric(float64(c1.Client-c0.Client)/float64(b.N), "go-cpu-µs/op")
}
