package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal/internal/testkit/benchpayload"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// kibPayload is the benchmarks' 1 KiB order (package benchpayload).
func kibPayload(tb testing.TB) *structpb.Struct { return benchpayload.Order(tb) }

// restBenchOperation is a FULL-view operation in progress with the 1 KiB
// payload, a result, refs and an approval.
func restBenchOperation(tb testing.TB, i int) *pb.Operation {
	now := timestamppb.New(time.Date(2026, 12, 1, 14, 0, 0, 123456789, time.UTC))
	result, err := structpb.NewStruct(map[string]any{"payment_id": "pay_5f2c", "status": "captured"})
	if err != nil {
		tb.Fatal(err)
	}
	return &pb.Operation{OperationKey: fmt.Sprintf("payment:order-817:intent-%02d", i), ActionType: "create_payment",
		RequestHash: strings.Repeat("ab", 32), Status: pb.Status_STATUS_SUCCEEDED, AttemptCount: 1, ExternalId: "pay_5f2c",
		Result: result, Payload: kibPayload(tb), LeaseOwner: "agent-1", LeaseUntil: now, CreatedAt: now, UpdatedAt: now,
		AttemptStartedAt: now, FirstAttemptAt: now, Refs: map[string]string{"order_id": "817", "customer": "c-93"},
		Approval: &pb.Approval{Approvers: []string{"ops"}, Approvals: []*pb.ApprovalDecision{{Principal: "alice", At: now}}}}
}

// BenchmarkRESTEncode compares the REST answer's encoder (restMarshaler)
// with protojson under the gateway's options on a register's answer with
// the 1 KiB payload and on a page of 20 such operations:
//
//	go test -run '^$' -bench RESTEncode -benchmem -count 6 ./server/
func BenchmarkRESTEncode(b *testing.B) {
	now := timestamppb.New(time.Date(2026, 12, 1, 14, 0, 0, 123456789, time.UTC))
	reg := &pb.RegisterResponse{Operation: restBenchOperation(b, 0), Created: true, Claimed: true, Attempt: 1, LeaseUntil: now, LeaseSeconds: 30,
		Next: pb.NextStep_NEXT_STEP_CALL_PROVIDER}
	list := &pb.ListOperationsResponse{NextPageToken: "opaque-token"}
	for i := range 20 {
		list.Operations = append(list.Operations, restBenchOperation(b, i))
	}
	mo := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	m := restMarshaler{&runtime.JSONPb{MarshalOptions: mo}}
	for _, c := range []struct {
		name string
		msg  proto.Message
	}{{"register", reg}, {"list20", list}} {
		b.Run(c.name+"/protojson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := mo.Marshal(c.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/marshaler", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Marshal(c.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
