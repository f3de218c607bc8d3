package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// benchInterceptor measures the interceptor alone around a handler that
// does nothing, for a Register (the fused path's RPC): what every call
// pays for authorisation, decoding, metrics, the audit line and tracing.
//
//	go test -run '^$' -bench Interceptor ./server/
func benchInterceptor(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "j.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s := New(journal.New(st, policy.Default(), journal.Limits{}), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	info := &grpc.UnaryServerInfo{FullMethod: servicePrefix + "Register"}
	resp := &pb.RegisterResponse{Operation: &pb.Operation{OperationKey: "op_1", ActionType: "create_payment", Status: pb.Status_STATUS_IN_PROGRESS}}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	req := &pb.RegisterRequest{OperationKey: "op_1", ActionType: "create_payment"}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, n := processCPU(b), 0
	for b.Loop() {
		n++
		if _, err := s.interceptor(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
	}
	// The process's CPU per call: on a shared machine the wall time per
	// call mostly measures the wait for a CPU.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(n), "cpu-ns/op")
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkInterceptor(b *testing.B) { benchInterceptor(b) }
