package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

// Two journal servers on one PostgreSQL, each with its own terminal
// replay cache (journal/replaycache.go) and its own long polls
// (journal/watch.go). What one server decides or deletes must never be
// contradicted by the other's memory: a replay after a Resolve gets the
// resolved outcome, a replay after a purge is a new operation (as
// docs/operating.md documents, "a purged key registered again is a new
// operation"), and a long poll held on one server ends when the other
// decides. TestReplayCacheAcrossReplicas covers duplicate reports; these
// cover the decisions and the purge.

// twoServersPayload is a payment without redacted fields, so that the test
// reads every field back.
const twoServersPayload = `{"order_id": "%s", "amount_minor": 490000, "currency": "RUB"}`

func twoServersRegister(key, order string, t *testing.T) *pb.RegisterRequest {
	return &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
		Payload: mustStruct(t, fmt.Sprintf(twoServersPayload, order)), Claim: &pb.ClaimOptions{WorkerId: "agent-1"}}
}

// TestTwoServersResolveOnOneIsReplayedByTheOther: an agent's call timed
// out through server B (unknown), B answers its retries "unknown", then an
// operator resolves it through server A (one as succeeded, one as
// failed_final). B's next Register of the same key replays the resolved
// outcome, never the unknown it answered before, and B's cache, filled by
// that replay, keeps answering it.
func TestTwoServersResolveOnOneIsReplayedByTheOther(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	a := startServer(t, "--database-url", dbURL, "--purge-interval", "0")
	b := startServer(t, "--database-url", dbURL, "--purge-interval", "0")
	ctx := ctxFor(t)
	cases := []struct {
		key, order string
		resolve    *pb.ResolveRequest
		want       pb.Status
	}{
		{"payment:two-servers:resolve-ok", "2001", &pb.ResolveRequest{Resolution: pb.Resolution_RESOLUTION_SUCCEEDED,
			ExternalId: "pay_found_2001", Result: mustStruct(t, `{"payment_id": "pay_found_2001"}`)}, pb.Status_STATUS_SUCCEEDED},
		{"payment:two-servers:resolve-no", "2002", &pb.ResolveRequest{Resolution: pb.Resolution_RESOLUTION_FAILED_FINAL,
			ErrorCode: "not_charged"}, pb.Status_STATUS_FAILED_FINAL},
	}
	for _, c := range cases {
		reg := twoServersRegister(c.key, c.order, t)
		if r, err := b.Client.Register(ctx, reg); err != nil || !r.GetClaimed() {
			t.Fatalf("register %s on B: %v %v", c.key, r, err)
		}
		if _, err := b.Client.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: c.key, Attempt: 1, ErrorCode: "timeout"}); err != nil {
			t.Fatal(err)
		}
		// B answers the retry from the row: unknown, nothing to claim.
		if r, err := b.Client.Register(ctx, reg); err != nil || r.GetClaimed() || r.GetOperation().GetStatus() != pb.Status_STATUS_UNKNOWN {
			t.Fatalf("retry of %s on B before the decision: %v %v", c.key, r, err)
		}
		c.resolve.OperationKey, c.resolve.Actor, c.resolve.Reason = c.key, "op-alice", "checked the provider's dashboard"
		if _, err := a.Client.Resolve(ctx, c.resolve); err != nil {
			t.Fatalf("resolve %s on A: %v", c.key, err)
		}
		// Twice: the first may fill B's cache, the second may be answered
		// from it; both must carry the decision.
		for i := range 2 {
			r, err := b.Client.Register(ctx, reg)
			if err != nil {
				t.Fatalf("replay %d of %s on B: %v", i, c.key, err)
			}
			op := r.GetOperation()
			if r.GetCreated() || r.GetClaimed() || op.GetStatus() != c.want || r.GetNext() != pb.NextStep_NEXT_STEP_REPLAY && c.want == pb.Status_STATUS_SUCCEEDED {
				t.Fatalf("replay %d of %s on B after A resolved it: created=%v claimed=%v status=%s next=%s", i, c.key, r.GetCreated(), r.GetClaimed(), op.GetStatus(), r.GetNext())
			}
			if op.GetExternalId() != c.resolve.ExternalId || c.resolve.ErrorCode != "" && op.GetErrorCode() != c.resolve.ErrorCode {
				t.Fatalf("replay %d of %s on B: external_id %q error_code %q, want %q %q", i, c.key, op.GetExternalId(), op.GetErrorCode(), c.resolve.ExternalId, c.resolve.ErrorCode)
			}
			// What A's store holds, field for field that a replay carries.
			if st := lookup(t, ctx, a.Client, c.key); st.GetStatus() != op.GetStatus() || st.GetExternalId() != op.GetExternalId() ||
				st.GetErrorCode() != op.GetErrorCode() || !proto.Equal(st.GetResult(), op.GetResult()) {
				t.Fatalf("replay %d of %s on B differs from the row:\nB   %v\nrow %v", i, c.key, op, st)
			}
			if c.want == pb.Status_STATUS_SUCCEEDED && op.GetResult().GetFields()["payment_id"].GetStringValue() != "pay_found_2001" {
				t.Fatalf("replay %d of %s on B: result %v", i, c.key, op.GetResult())
			}
		}
		// And no claim through B can start a second attempt.
		if r, err := b.Client.Claim(ctx, &pb.ClaimRequest{OperationKey: c.key, WorkerId: "agent-2"}); err == nil && r.GetClaimed() {
			t.Fatalf("claim of the resolved %s on B succeeded: %v", c.key, r)
		}
	}
}

// TestTwoServersPurgeOnOneIsNotReplayedByTheOther: an old succeeded
// payment (past its retention) is replayed through server B, so B has seen
// it; then `opjournal purge` (another process, as another replica's purge
// would be) deletes it. B's next Register of that key must be what the
// manual documents for a purged key, a new operation, never the deleted
// result from B's memory: the replay cache keeps no entry past its row's
// retention (minus its age bound), so B must not have kept this one.
func TestTwoServersPurgeOnOneIsNotReplayedByTheOther(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	a := startServer(t, "--database-url", dbURL, "--purge-interval", "0")
	b := startServer(t, "--database-url", dbURL, "--purge-interval", "0")
	ctx := ctxFor(t)
	key := "payment:two-servers:purged"
	reg := twoServersRegister(key, "3001", t)
	if r, err := a.Client.Register(ctx, reg); err != nil || !r.GetClaimed() {
		t.Fatalf("register: %v %v", r, err)
	}
	if _, err := a.Client.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: 1, ExternalId: "pay_3001",
		Result: mustStruct(t, `{"payment_id": "pay_3001"}`)}); err != nil {
		t.Fatal(err)
	}
	// The payment finished 31 days ago (the shipped retention is 30):
	// moved in the database, whose clock the purge reads.
	age(t, dbURL, "operation_key = '"+key+"'", 31)
	// B replays it (several times: a fill, then what would be hits).
	for i := range 3 {
		r, err := b.Client.Register(ctx, reg)
		if err != nil || r.GetCreated() || r.GetNext() != pb.NextStep_NEXT_STEP_REPLAY || r.GetOperation().GetExternalId() != "pay_3001" {
			t.Fatalf("replay %d on B before the purge: %v %v", i, r, err)
		}
	}
	code, out := runBinary(t, serverOpts{}, "purge", "--database-url", dbURL, "--action", "create_payment")
	if code != 0 || !strings.Contains(out, "removed 1 operations") {
		t.Fatalf("opjournal purge: exit %d:\n%s", code, out)
	}
	if n := mustSQL(t, dbURL, "SELECT count(*) FROM operations WHERE operation_key = '"+key+"'"); n != "0" {
		t.Fatalf("the purge left %s rows of %s", n, key)
	}
	// Lookup on B: gone.
	if _, err := b.Client.Lookup(ctx, &pb.LookupRequest{OperationKey: key}); err == nil {
		t.Fatal("Lookup on B still finds the purged operation")
	}
	// Register on B: a new operation, attempt 1, claimed, with none of the
	// purged result.
	r, err := b.Client.Register(ctx, reg)
	if err != nil {
		t.Fatalf("register on B after the purge: %v", err)
	}
	op := r.GetOperation()
	if !r.GetCreated() || !r.GetClaimed() || r.GetAttempt() != 1 || op.GetStatus() != pb.Status_STATUS_IN_PROGRESS || op.GetExternalId() != "" || op.GetResult() != nil {
		t.Fatalf("B answered the purged key from memory: created=%v claimed=%v attempt=%d status=%s external_id=%q result=%v",
			r.GetCreated(), r.GetClaimed(), r.GetAttempt(), op.GetStatus(), op.GetExternalId(), op.GetResult())
	}
	// Both servers now see the one new row.
	if got := lookup(t, ctx, a.Client, key); got.GetStatus() != pb.Status_STATUS_IN_PROGRESS || got.GetAttemptCount() != 1 {
		t.Fatalf("A sees %s attempt %d", got.GetStatus(), got.GetAttemptCount())
	}
	if n := mustSQL(t, dbURL, "SELECT count(*) FROM operations WHERE operation_key = '"+key+"'"); n != "1" {
		t.Fatalf("%s rows of %s after the new registration", n, key)
	}
}

// twoServersApprovalPolicy is the shipped policy plus an action whose payments above
// 1,000.00 wait for a person.
func twoServersApprovalPolicy(t *testing.T) string {
	t.Helper()
	pol := string(policy.DefaultYAML()) + `
  big_payment:
    integer_fields: [amount_minor]
    approval: {when: "payload.amount_minor > 100000", timeout: 24h}
`
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTwoServersApprovalEndsTheOthersLongPoll: an agent waits for an
// approval with a Lookup long poll (wait_seconds 30) held by server B; an
// operator decides through server A. B's long poll answers with the
// decision within a few seconds (B re-reads every second), not at the end
// of its 30 s; and B's replays then carry the decision.
func TestTwoServersApprovalEndsTheOthersLongPoll(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	pol := twoServersApprovalPolicy(t)
	a := startServer(t, "--database-url", dbURL, "--purge-interval", "0", "--policy", pol)
	b := startServer(t, "--database-url", dbURL, "--purge-interval", "0", "--policy", pol)
	ctx := ctxFor(t)
	for _, approve := range []bool{true, false} {
		key := fmt.Sprintf("payment:two-servers:approval-%v", approve)
		reg := &pb.RegisterRequest{OperationKey: key, ActionType: "big_payment",
			Payload: mustStruct(t, `{"order_id": "4001", "amount_minor": 250000, "currency": "EUR"}`), Claim: &pb.ClaimOptions{WorkerId: "agent-1"}}
		r, err := b.Client.Register(ctx, reg)
		if err != nil || r.GetOperation().GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL {
			t.Fatalf("register: %v %v", r, err)
		}
		hash := r.GetOperation().GetRequestHash()
		type answer struct {
			op  *pb.Operation
			err error
			at  time.Time
		}
		polled := make(chan answer, 1)
		go func() {
			res, err := b.Client.Lookup(ctx, &pb.LookupRequest{OperationKey: key, WaitSeconds: 30})
			polled <- answer{res.GetOperation(), err, time.Now()}
		}()
		// The long poll is held by B before A decides (B's own gauge).
		eventually(t, callTimeout, func() (bool, string) {
			m := string(do(t, http.MethodGet, b.BaseURL+"/metrics", nil).Body)
			return strings.Contains(m, "\nopjournal_lookup_long_polls 1\n"), "B holds no long poll yet"
		})
		var decided time.Time
		want := pb.Status_STATUS_PENDING
		if approve {
			decided = time.Now()
			_, err = a.Client.Approve(ctx, &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "customer verified", Actor: "op-alice"})
		} else {
			want = pb.Status_STATUS_FAILED_FINAL
			decided = time.Now()
			_, err = a.Client.Reject(ctx, &pb.RejectRequest{OperationKey: key, RequestHash: hash, Reason: "not our customer", Actor: "op-alice"})
		}
		if err != nil {
			t.Fatalf("decision on A: %v", err)
		}
		var got answer
		select {
		case got = <-polled:
		case <-time.After(callTimeout):
			t.Fatal("B's long poll did not answer")
		}
		if got.err != nil || got.op.GetStatus() != want {
			t.Fatalf("B's long poll answered %v %v, want %s", got.op, got.err, want)
		}
		// Well within the 30 s asked: B re-reads every second.
		if took := got.at.Sub(decided); took > 10*time.Second {
			t.Fatalf("B's long poll answered %v after A's decision", took)
		}
		// B's replays carry the decision too.
		// After an approval, B's register claims it (attempt 1).
		if approve {
			want = pb.Status_STATUS_IN_PROGRESS
		}
		r, err = b.Client.Register(ctx, reg)
		if err != nil || r.GetOperation().GetStatus() != want {
			t.Fatalf("register on B after the decision: %v %v", r, err)
		}
		if approve && (!r.GetClaimed() || r.GetAttempt() != 1) {
			t.Fatalf("after the approval through A, B's register does not claim attempt 1: %v", r)
		}
		if !approve && (r.GetClaimed() || r.GetOperation().GetErrorCode() != "approval_rejected") {
			t.Fatalf("after the rejection through A, B's register: %v", r)
		}
	}
}
