package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"

	pb "github.com/opjournal/opjournal/gen/opjournal/v1"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/policy"
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
	for b.Loop() {
		if _, err := s.interceptor(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInterceptor(b *testing.B) { benchInterceptor(b) }
