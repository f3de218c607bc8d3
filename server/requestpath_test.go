package server_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestRequestPath makes $REQUEST_PATH_CALLS Registers with a claim, the
// agent's first call, through the real server (gRPC, the journal, the
// SQLite store), after one call that sets up what every later call reuses
// (the connection, the statements, the pools). scripts/request-path.sh
// runs it twice under coverage, with no calls and with many, and keeps the
// code that ran at least once more per call: the packages and files one
// command crosses from the wire to SQL (docs/architecture.md). Without the
// variable it has nothing to measure.
func TestRequestPath(t *testing.T) {
	calls, err := strconv.Atoi(os.Getenv("REQUEST_PATH_CALLS"))
	if err != nil || testing.CoverMode() == "" {
		t.Skip("measures with coverage: run scripts/request-path.sh")
	}
	j := testserver.Start(t, nil)
	payload, err := structpb.NewStruct(map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range calls + 1 {
		key := fmt.Sprintf("payment:order-%d:intent-01", 1000+i)
		res, err := j.Client.Register(context.Background(), &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
			Payload: payload, Claim: &pb.ClaimOptions{WorkerId: "agent-1"}})
		if err != nil || !res.GetClaimed() {
			t.Fatalf("register %s: %v, %v", key, res, err)
		}
	}
}
