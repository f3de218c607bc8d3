package server_test

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/testserver"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// BenchmarkReplay measures the replay of a succeeded operation (a
// retry's Register with claim, the 1 KiB payload of BenchmarkFusedAnswer)
// over a real gRPC connection, with the journal's replay cache on (the
// default) and off: on, the answer costs a look-up instead of a store
// read. cpu-ns/op is the process's CPU (client and server) per replay.
//
//	go test -run '^$' -bench Replay -count 10 ./server/ | benchstat -col /cache -
func BenchmarkReplay(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"on", journal.DefaultReplayCacheSize}, {"off", 0}} {
		b.Run("cache="+c.name, func(b *testing.B) {
			j := testserver.Start(b, nil, testserver.WithJournalOptions(journal.WithReplayCache(journal.ReplayCacheConfig{Size: c.size})))
			ctx := context.Background()
			reg := &pb.RegisterRequest{OperationKey: "bench-replay", ActionType: "create_payment", Payload: benchPayload(b), Claim: &pb.ClaimOptions{WorkerId: "bench"}}
			if _, err := j.Client.Register(ctx, reg); err != nil {
				b.Fatal(err)
			}
			result, err := structpb.NewStruct(map[string]any{"payment_id": "pay_5f2c", "status": "captured"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := j.Client.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "bench-replay", Attempt: 1, ExternalId: "pay_5f2c", Result: result}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			n := 0
			for b.Loop() {
				n++
				r, err := j.Client.Register(ctx, reg)
				if err != nil || r.GetNext() != pb.NextStep_NEXT_STEP_REPLAY {
					b.Fatalf("replay: %v %v", r, err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(n), "cpu-ns/op")
		})
	}
}
