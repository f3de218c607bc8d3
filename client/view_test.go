package client_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/client"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// recordingConn records the view of every request that has one and the
// operation of every answer.
type recordingConn struct {
	grpc.ClientConnInterface
	mu      sync.Mutex
	views   map[string]opjournalv1.OperationView
	answers map[string][]*opjournalv1.Operation
}

func (r *recordingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	err := r.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	name := method[strings.LastIndex(method, "/")+1:]
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := args.(interface {
		GetView() opjournalv1.OperationView
	}); ok {
		r.views[name] = v.GetView()
	}
	if a, ok := reply.(interface {
		GetOperation() *opjournalv1.Operation
	}); ok && err == nil {
		r.answers[name] = append(r.answers[name], a.GetOperation())
	}
	return err
}

func dialRecording(t *testing.T, addr string) (*client.Client, *recordingConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rec := &recordingConn{ClientConnInterface: conn, views: map[string]opjournalv1.OperationView{}, answers: map[string][]*opjournalv1.Operation{}}
	return client.New(rec, client.WithWorkerID("lean")), rec
}

// TestExecuteAsksForLeanAnswers: Execute asks for the BASIC view in every
// call of the protocol; the answers carry no payload, the success's no
// result (the outcome holds the one sent), and a replay's Register answer
// still carries the stored result.
func TestExecuteAsksForLeanAnswers(t *testing.T) {
	t.Parallel()
	addr, stop := startJournal()
	t.Cleanup(stop)
	c, rec := dialRecording(t, addr)
	op := payment("payment:lean", 4900)
	fn := func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{ExternalID: "pay_lean", Result: map[string]any{"payment_id": "pay_lean", "status": "captured"}}, nil
	}
	first := mustExecute(t, c, op, fn)
	wantKind(t, first, client.Succeeded)
	const want = `{"payment_id":"pay_lean","status":"captured"}`
	if string(first.Result) != want || first.Replayed {
		t.Fatalf("first = %+v, want result %s", first, want)
	}
	again := mustExecute(t, c, op, fn)
	if !again.Replayed || string(again.Result) != want || again.ExternalID != "pay_lean" {
		t.Fatalf("replay = %+v, want result %s", again, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range []string{"Register", "MarkSucceeded"} {
		if rec.views[m] != opjournalv1.OperationView_OPERATION_VIEW_BASIC {
			t.Errorf("%s asked for view %s, want BASIC", m, rec.views[m])
		}
	}
	for m, ops := range rec.answers {
		for _, o := range ops {
			if o.GetPayload() != nil {
				t.Errorf("a %s answer carries the payload: %v", m, o.GetPayload())
			}
		}
	}
	if ms := rec.answers["MarkSucceeded"]; len(ms) != 1 || ms[0].GetResult() != nil || ms[0].GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED {
		t.Errorf("MarkSucceeded answers %v, want one, succeeded, without the result", ms)
	}
	if regs := rec.answers["Register"]; len(regs) != 2 || regs[1].GetResult().GetFields()["payment_id"].GetStringValue() != "pay_lean" {
		t.Errorf("Register answers %v, want the replay's with the stored result", regs)
	}
}

// TestDuplicateEffectOutcomeHasTheStoredResult: when the journal already
// holds another effect, the outcome carries the stored (first) effect's
// id and result, not the one fn returned, although the lean answer of
// MarkSucceeded carries neither result.
func TestDuplicateEffectOutcomeHasTheStoredResult(t *testing.T) {
	t.Parallel()
	addr, stop := startJournal()
	t.Cleanup(stop)
	c, _ := dialRecording(t, addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := opjournalv1.NewJournalServiceClient(conn)
	op := payment("payment:dup-outcome", 100)
	out := mustExecute(t, c, op, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		// Someone else records the first effect of this attempt first.
		first, _ := structpb.NewStruct(map[string]any{"who": "first"})
		if _, err := raw.MarkSucceeded(ctx, &opjournalv1.MarkSucceededRequest{OperationKey: a.Key, Attempt: int32(a.Number), ExternalId: "pay_first", Result: first}); err != nil {
			t.Error(err)
		}
		return client.Effect{ExternalID: "pay_second", Result: map[string]any{"who": "second"}}, nil
	})
	wantKind(t, out, client.Succeeded)
	if out.ExternalID != "pay_first" || string(out.Result) != `{"who":"first"}` || !out.NeedsReview {
		t.Fatalf("outcome = %+v, want the first effect (pay_first, its result) under review", out)
	}
}
