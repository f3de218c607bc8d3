package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

// leasePolicy has short leases, so that calls can outlive them in a test.
func leasePolicy(t *testing.T, maxAttempt int) *policy.Policy {
	t.Helper()
	doc := "actions:\n  send_email:\n    lease_seconds: 2\n"
	if maxAttempt > 0 {
		doc += "    max_attempt_seconds: " + itoa(maxAttempt) + "\n"
	}
	pol, err := policy.Parse([]byte(doc), "lease.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func email(key string) client.Op {
	return client.Op{Key: key, Action: "send_email", Payload: map[string]any{"to": "a@example.com"}}
}

// events returns an operation's reasons, oldest first.
func reasons(t *testing.T, c *client.Client, key string) []string {
	t.Helper()
	var out []string
	for e, err := range c.Events(context.Background(), key) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e.GetReason())
	}
	return out
}

// TestSlowCallKeepsItsLeaseByHeartbeat: a call three times longer than
// its lease keeps the lease by heartbeats, so nobody else may claim it
// meanwhile, and its effect is recorded as the first attempt's: the lease
// never expires under the call.
func TestSlowCallKeepsItsLeaseByHeartbeat(t *testing.T) {
	t.Parallel()
	c, _ := newClientWith(t, leasePolicy(t, 0))
	op := email("email:slow-heartbeat")
	var calls atomic.Int32
	out := mustExecute(t, c, op, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		calls.Add(1)
		if a.Lease != 2*time.Second {
			t.Errorf("lease %s, want 2s", a.Lease)
		}
		select { // a provider that takes 6 s: three leases
		case <-time.After(6 * time.Second):
		case <-ctx.Done():
			return client.Effect{}, ctx.Err()
		}
		return client.Effect{ExternalID: "eml_1"}, nil
	})
	wantKind(t, out, client.Succeeded)
	if out.Replayed || calls.Load() != 1 || out.Operation.GetAttemptCount() != 1 {
		t.Fatalf("out = %+v after %d calls", out, calls.Load())
	}
	extended := 0
	for _, r := range reasons(t, c, op.Key) {
		if r == "lease extended" {
			extended++
		}
	}
	if extended < 2 {
		t.Fatalf("%d heartbeats in the history, want at least 2: %q", extended, reasons(t, c, op.Key))
	}
}

// TestCallIsBoundedByItsLease: without heartbeats, Execute stops waiting
// for fn before the lease ends (less the safety margin), cancels fn's
// context and leaves the outcome unknown; the provider's late answer is
// still recorded when it comes.
func TestCallIsBoundedByItsLease(t *testing.T) {
	t.Parallel()
	c, _ := newClientWith(t, leasePolicy(t, 0), client.WithHeartbeat(false))
	op := email("email:slow-bounded")
	canceled, finish := make(chan struct{}), make(chan struct{})
	start := time.Now()
	out := mustExecute(t, c, op, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		<-ctx.Done()
		close(canceled)
		<-finish // the provider answers after all
		return client.Effect{ExternalID: "eml_late"}, nil
	})
	took := time.Since(start)
	wantKind(t, out, client.VerificationRequired)
	if out.ErrorCode != "lease_expired" {
		t.Fatalf("out = %+v, want lease_expired", out)
	}
	if limit := 2*time.Second - opjournal.LeaseSafetyMargin(2*time.Second) + 500*time.Millisecond; took > limit {
		t.Fatalf("Execute waited %s, beyond lease − margin (%s)", took, limit)
	}
	select {
	case <-canceled:
	default:
		t.Fatal("fn's context was not canceled")
	}
	rec := lookup(t, c, op.Key)
	wantStatus(t, rec, opjournalv1.Status_STATUS_UNKNOWN, "lease_expired")
	close(finish)
	awaitStatus(t, c, op.Key, opjournalv1.Status_STATUS_SUCCEEDED)
	if rec := lookup(t, c, op.Key); rec.GetExternalId() != "eml_late" || rec.GetAttemptCount() != 1 {
		t.Fatalf("late effect: %v", rec)
	}
}

// TestHeartbeatStopsAtMaxAttempt: the policy bounds heartbeats; once
// max_attempt_seconds is reached the lease ends and Execute gives up.
func TestHeartbeatStopsAtMaxAttempt(t *testing.T) {
	t.Parallel()
	c, _ := newClientWith(t, leasePolicy(t, 3))
	op := email("email:max-attempt")
	start := time.Now()
	out := mustExecute(t, c, op, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		<-ctx.Done() // a provider that never answers
		return client.Effect{}, ctx.Err()
	})
	took := time.Since(start)
	wantKind(t, out, client.VerificationRequired)
	if out.ErrorCode != "lease_expired" {
		t.Fatalf("out = %+v", out)
	}
	// Heartbeats carried the lease to max_attempt_seconds (3 s) and no
	// further; Execute gave up before it ended.
	if took < 2*time.Second || took > 3*time.Second {
		t.Fatalf("gave up after %s, want between the first lease (2 s) and max_attempt_seconds (3 s)", took)
	}
	wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "lease_expired")
}

func awaitStatus(t *testing.T, c *client.Client, key string, want opjournalv1.Status) {
	t.Helper()
	await.Until(t, fmt.Sprintf("%s to become %s", key, want), func() bool { return lookup(t, c, key).GetStatus() == want })
}

// vectors is protocol/testdata/next_steps.json, run by every SDK.
type vectors struct {
	Vectors []struct {
		Name   string          `json:"name"`
		Answer json.RawMessage `json:"answer"`
		Error  *struct {
			Code string `json:"code"`
		} `json:"error"`
		Expect struct {
			Call              bool            `json:"call"`
			Attempt           int             `json:"attempt"`
			LeaseSeconds      int             `json:"lease_seconds"`
			Error             bool            `json:"error"`
			Kind              string          `json:"kind"`
			Replayed          *bool           `json:"replayed"`
			ExternalID        *string         `json:"external_id"`
			Result            json.RawMessage `json:"result"`
			ErrorCode         *string         `json:"error_code"`
			RetryAfterSeconds *int            `json:"retry_after_seconds"`
			NeedsReview       *bool           `json:"needs_review"`
		} `json:"expect"`
	} `json:"vectors"`
}

// cannedConn answers Register with a canned response (or error) and every
// Mark* with an empty operation: Execute's whole decision, without a server.
type cannedConn struct {
	register proto.Message
	err      error
}

func (c cannedConn) Invoke(_ context.Context, method string, _, reply any, _ ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/Register") {
		if c.err != nil {
			return c.err
		}
		proto.Merge(reply.(proto.Message), c.register)
	}
	return nil
}

func (cannedConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

// TestNextStepVectors runs protocol/testdata/next_steps.json: the SDK acts on the
// journal's next step and nothing else.
func TestNextStepVectors(t *testing.T) {
	b, err := os.ReadFile("../protocol/testdata/next_steps.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs vectors
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			conn := cannedConn{}
			if v.Error != nil {
				st, _ := status.New(codes.AlreadyExists, "conflict").WithDetails(&errdetails.ErrorInfo{Reason: v.Error.Code, Domain: "opjournal"})
				conn.err = st.Err()
			} else {
				resp := &opjournalv1.RegisterResponse{}
				if err := protojson.Unmarshal(v.Answer, resp); err != nil {
					t.Fatal(err)
				}
				conn.register = resp
			}
			c := client.New(conn)
			var got []client.Attempt
			out, err := c.Execute(context.Background(), email("k"), func(_ context.Context, a client.Attempt) (client.Effect, error) {
				got = append(got, a)
				return client.Effect{ExternalID: "x"}, nil
			})
			e := v.Expect
			switch {
			case e.Error:
				if err == nil || len(got) != 0 {
					t.Fatalf("err = %v after %d calls; want an error and no call", err, len(got))
				}
				return
			case err != nil:
				t.Fatal(err)
			case e.Call:
				if len(got) != 1 || got[0].Number != e.Attempt || got[0].Lease != time.Duration(e.LeaseSeconds)*time.Second {
					t.Fatalf("calls %+v, want one with attempt %d and lease %ds", got, e.Attempt, e.LeaseSeconds)
				}
				return
			case len(got) != 0:
				t.Fatalf("fn was called: %+v", got)
			}
			if out.Kind.String() != e.Kind {
				t.Fatalf("kind %s, want %s", out.Kind, e.Kind)
			}
			if e.Replayed != nil && out.Replayed != *e.Replayed {
				t.Errorf("replayed %v", out.Replayed)
			}
			if e.ExternalID != nil && out.ExternalID != *e.ExternalID {
				t.Errorf("external_id %q", out.ExternalID)
			}
			if e.Result != nil && string(e.Result) != "null" && !jsonEq(out.Result, e.Result) {
				t.Errorf("result %s, want %s", out.Result, e.Result)
			}
			if string(e.Result) == "null" && out.Result != nil {
				t.Errorf("result %s, want none", out.Result)
			}
			if e.ErrorCode != nil && out.ErrorCode != *e.ErrorCode {
				t.Errorf("error_code %q", out.ErrorCode)
			}
			if e.RetryAfterSeconds != nil && out.RetryAfter != time.Duration(*e.RetryAfterSeconds)*time.Second {
				t.Errorf("retry after %s", out.RetryAfter)
			}
			if e.NeedsReview != nil && out.NeedsReview != *e.NeedsReview {
				t.Errorf("needs_review %v", out.NeedsReview)
			}
		})
	}
}

func jsonEq(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
