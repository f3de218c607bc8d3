package server_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/benchpayload"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// benchPayload is the benchmarks' 1 KiB order (package benchpayload).
func benchPayload(b *testing.B) *structpb.Struct { return benchpayload.Order(b) }

// benchFused runs the fused path of an agent's call, Register with claim
// then MarkSucceeded with a small result, over a real gRPC connection to
// an in-process journal (SQLite), and reports the bytes of the two
// answers (resp-B/op) besides time and allocations. set adjusts the two
// requests (the view asked for).
func benchFused(b *testing.B, set func(*pb.RegisterRequest, *pb.MarkSucceededRequest)) {
	j := testserver.Start(b, nil)
	payload := benchPayload(b)
	result, err := structpb.NewStruct(map[string]any{"payment_id": "pay_5f2c", "status": "captured"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var respBytes int
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		n++
		key := fmt.Sprintf("bench-%d", n)
		reg := &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "bench"}}
		ms := &pb.MarkSucceededRequest{OperationKey: key, Attempt: 1, ExternalId: "pay_5f2c", Result: result}
		if set != nil {
			set(reg, ms)
		}
		r, err := j.Client.Register(ctx, reg)
		if err != nil || !r.GetClaimed() {
			b.Fatalf("register: %v %v", r, err)
		}
		m, err := j.Client.MarkSucceeded(ctx, ms)
		if err != nil {
			b.Fatalf("mark succeeded: %v", err)
		}
		respBytes += proto.Size(r) + proto.Size(m)
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(n), "cpu-ns/op")
	b.ReportMetric(float64(respBytes)/float64(n), "resp-B/op")
}

// cpuTime is the CPU time (user and system) the process has used: the
// client's and the server's together, as the wall time of a call is mostly
// waiting for the database.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFusedAnswer measures Register-with-claim + MarkSucceeded with
// a 1 KiB payload: "default" and "basic" are the lean answers the SDKs
// ask for, "full" the answers as they were before views (every field).
//
//	go test -run '^$' -bench FusedAnswer -benchtime 2000x ./server/
func BenchmarkFusedAnswer(b *testing.B) {
	view := func(v pb.OperationView) func(*pb.RegisterRequest, *pb.MarkSucceededRequest) {
		return func(r *pb.RegisterRequest, m *pb.MarkSucceededRequest) { r.View, m.View = v, v }
	}
	b.Run("default", func(b *testing.B) { benchFused(b, nil) })
	b.Run("basic", func(b *testing.B) { benchFused(b, view(pb.OperationView_OPERATION_VIEW_BASIC)) })
	b.Run("full", func(b *testing.B) { benchFused(b, view(pb.OperationView_OPERATION_VIEW_FULL)) })
}
