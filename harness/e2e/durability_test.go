package e2e

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestRestartKeepsEverything registers operations in every state, kills
// the server with SIGKILL, starts a new one on the same database and finds
// every record exactly as it was; the lease holder of the in-progress one
// can still finish it.
func TestRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		srv := startServer(t, "--database-url", dbURL)
		c, ctx := srv.Client, ctxFor(t)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		register := func(key, action string, claim bool) *pb.RegisterResponse {
			t.Helper()
			req := &pb.RegisterRequest{OperationKey: key, ActionType: action,
				Payload: mustStruct(t, fmt.Sprintf(`{"amount_minor": 1000, "currency": "EUR", "order_id": %q, "title": "incident", "to": "a@example.com", "job_id": "job-1", "lines": [{"sku": "a", "qty": 2}]}`, key))}
			if claim {
				req.Claim = &pb.ClaimOptions{WorkerId: "worker-" + key}
			}
			res, err := c.Register(ctx, req)
			if err != nil || !res.GetCreated() || res.GetClaimed() != claim {
				t.Fatalf("Register %s: %v %v", key, res, err)
			}
			return res
		}

		register("op-pending", "create_payment", false)
		inProgress := register("op-in-progress", "create_payment", true)
		u := register("op-unknown", "create_ticket", true)
		_, err := c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: "op-unknown", Attempt: u.GetAttempt(), ErrorCode: "connection_reset"})
		must(err)
		s := register("op-succeeded", "send_email", true)
		_, err = c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "op-succeeded", Attempt: s.GetAttempt(), ExternalId: "msg_1",
			Result: mustStruct(t, `{"message_id": "msg_1", "accepted": true, "recipients": 3}`)})
		must(err)
		f := register("op-failed", "submit_application", true)
		_, err = c.MarkFailedFinal(ctx, &pb.MarkFailedFinalRequest{OperationKey: "op-failed", Attempt: f.GetAttempt(), ErrorCode: "validation_rejected"})
		must(err)
		d := register("op-duplicate", "create_payment", true)
		_, err = c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "op-duplicate", Attempt: d.GetAttempt(), ExternalId: "pay_1"})
		must(err)
		_, err = c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "op-duplicate", Attempt: d.GetAttempt(), ExternalId: "pay_2"})
		must(err)

		keys := []string{"op-pending", "op-in-progress", "op-unknown", "op-succeeded", "op-failed", "op-duplicate"}
		wantStatus := map[string]pb.Status{
			"op-pending": pb.Status_STATUS_PENDING, "op-in-progress": pb.Status_STATUS_IN_PROGRESS,
			"op-unknown": pb.Status_STATUS_UNKNOWN, "op-succeeded": pb.Status_STATUS_SUCCEEDED,
			"op-failed": pb.Status_STATUS_FAILED_FINAL, "op-duplicate": pb.Status_STATUS_SUCCEEDED,
		}
		before := map[string]*pb.Operation{}
		for _, k := range keys {
			before[k] = lookup(t, ctx, c, k)
			if before[k].GetStatus() != wantStatus[k] {
				t.Fatalf("%s is %v before the restart, want %v", k, before[k].GetStatus(), wantStatus[k])
			}
		}
		if d := before["op-duplicate"]; !d.GetNeedsReview() || d.GetExternalId() != "pay_1" || d.GetDuplicateExternalId() != "pay_2" {
			t.Fatalf("op-duplicate before the restart: %v", d)
		}

		srv.Kill()
		srv2 := startServer(t, "--database-url", dbURL)
		c2 := srv2.Client
		for _, k := range keys {
			if got := lookup(t, ctx, c2, k); !proto.Equal(got, before[k]) {
				t.Errorf("%s after the restart:\n got %v\nwant %v", k, got, before[k])
			}
		}

		// The in-progress lease survived: another worker cannot take it…
		cl, err := c2.Claim(ctx, &pb.ClaimRequest{OperationKey: "op-in-progress", WorkerId: "intruder"})
		must(err)
		if cl.GetClaimed() || cl.GetRetryAfterSeconds() < 1 || cl.GetRetryAfterSeconds() > 30 {
			t.Fatalf("Claim of a live lease after the restart: claimed=%v retry_after=%d", cl.GetClaimed(), cl.GetRetryAfterSeconds())
		}
		// …and its holder can still finish it with its attempt.
		ms, err := c2.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: "op-in-progress", Attempt: inProgress.GetAttempt(), ExternalId: "pay_ip",
			Result: mustStruct(t, `{"payment_id": "pay_ip"}`)})
		must(err)
		if op := ms.GetOperation(); op.GetStatus() != pb.Status_STATUS_SUCCEEDED || op.GetAttemptCount() != 1 || op.GetExternalId() != "pay_ip" {
			t.Fatalf("MarkSucceeded after the restart: %v", op)
		}
	})
}

// TestTwoServersOnePostgres runs two server processes on one PostgreSQL
// schema and races 64 clients (half through each) to register-and-claim
// the same 30 keys: each key is created once and claimed once.
func TestTwoServersOnePostgres(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	// Start both at once: their migrations race too.
	var (
		wg    sync.WaitGroup
		procs [2]*proc
		errs  [2]error
	)
	for i := range procs {
		wg.Go(func() { procs[i], errs[i] = spawn(t, serverOpts{}, "--database-url", dbURL) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxFor(t)

	const (
		nKeys    = 30
		nClients = 64
	)
	keys := make([]string, nKeys)
	payloads := make([]*structpb.Struct, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("payment:order-%d:intent-01", i)
		payloads[i] = mustStruct(t, fmt.Sprintf(`{"order_id": "817", "amount_minor": %d, "currency": "RUB"}`, 1000+i))
	}
	var (
		mu      sync.Mutex
		created = map[string]int{}
		claimed = map[string]int{}
		failed  []error
	)
	start := make(chan struct{})
	for w := range nClients {
		client := procs[w%2].Client
		order := rand.Perm(nKeys)
		wg.Go(func() {
			<-start
			for _, i := range order {
				key := keys[i]
				res, err := client.Register(ctx, &pb.RegisterRequest{
					OperationKey: key, ActionType: "create_payment",
					Payload: payloads[i],
					Claim:   &pb.ClaimOptions{WorkerId: fmt.Sprintf("worker-%d", w)},
				})
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Errorf("worker %d, %s: %w", w, key, err))
				} else {
					if res.GetCreated() {
						created[key]++
					}
					if res.GetClaimed() {
						claimed[key]++
						if res.GetAttempt() != 1 {
							failed = append(failed, fmt.Errorf("worker %d claimed %s with attempt %d", w, key, res.GetAttempt()))
						}
					} else if rs := res.GetRetryAfterSeconds(); rs < 1 || rs > 30 {
						failed = append(failed, fmt.Errorf("worker %d lost %s with retry_after_seconds %d", w, key, rs))
					}
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range failed {
		t.Error(err)
	}
	for _, key := range keys {
		if created[key] != 1 || claimed[key] != 1 {
			t.Errorf("%s: created %d times, claimed %d times; want exactly 1 and 1", key, created[key], claimed[key])
		}
		for i, p := range procs {
			op := lookup(t, ctx, p.Client, key)
			if op.GetAttemptCount() != 1 || op.GetStatus() != pb.Status_STATUS_IN_PROGRESS {
				t.Errorf("%s via server %d: attempt_count %d, status %v; want 1, IN_PROGRESS", key, i, op.GetAttemptCount(), op.GetStatus())
			}
		}
	}
}

// TestLeaseExpiryOverTheWire lets one-second leases expire on the
// database's clock: a retry_same_key action may then be claimed again (and
// the old attempt is fenced out), a reconcile_before_retry action may not.
func TestLeaseExpiryOverTheWire(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		srv := startServer(t, "--database-url", dbURL)
		c, ctx := srv.Client, ctxFor(t)
		const ticket, payment = "ticket:incident-5:intent-01", "payment:order-5:intent-01"
		for key, action := range map[string]string{ticket: "create_ticket", payment: "create_payment"} {
			res, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: action,
				Payload: mustStruct(t, `{"order_id": "5", "amount_minor": 1, "currency": "EUR", "title": "incident 5"}`), Claim: &pb.ClaimOptions{WorkerId: "vanishing-worker", LeaseSeconds: 1}})
			if err != nil || !res.GetClaimed() || res.GetAttempt() != 1 {
				t.Fatalf("Register %s: %v %v", key, res, err)
			}
			// Both times come from the database's clock in one statement.
			if d := res.GetLeaseUntil().AsTime().Sub(res.GetOperation().GetUpdatedAt().AsTime()); d < 900*time.Millisecond || d > 1100*time.Millisecond {
				t.Fatalf("%s: lease_until - updated_at = %v, want the 1 s asked for", key, d)
			}
		}
		// While the lease is live, nobody else gets it.
		if cl, err := c.Claim(ctx, &pb.ClaimRequest{OperationKey: ticket, WorkerId: "early-worker"}); err != nil || cl.GetClaimed() {
			t.Fatalf("Claim of a live lease: %v %v", cl, err)
		}

		// The worker vanishes; wait for the database to say so.
		for _, key := range []string{ticket, payment} {
			eventually(t, 15*time.Second, func() (bool, string) {
				op := lookup(t, ctx, c, key)
				return op.GetStatus() == pb.Status_STATUS_UNKNOWN, fmt.Sprintf("%s is %v", key, op.GetStatus())
			})
		}

		// The old attempt can no longer report anything but success.
		expired := lookup(t, ctx, c, ticket)
		_, err := c.MarkFailedFinal(ctx, &pb.MarkFailedFinalRequest{OperationKey: ticket, Attempt: 1, ErrorCode: "late"})
		wantGRPCError(t, err, codes.FailedPrecondition, opjournal.CodeStaleAttempt, "attempt")
		if got := lookup(t, ctx, c, ticket); !proto.Equal(got, expired) {
			t.Fatalf("a refused MarkFailedFinal changed the record:\n%v\n%v", expired, got)
		}

		// retry_same_key: another worker claims it, as attempt 2.
		cl, err := c.Claim(ctx, &pb.ClaimRequest{OperationKey: ticket, WorkerId: "second-worker"})
		if err != nil {
			t.Fatal(err)
		}
		if !cl.GetClaimed() || cl.GetAttempt() != 2 || cl.GetOperation().GetStatus() != pb.Status_STATUS_IN_PROGRESS ||
			cl.GetOperation().GetLeaseOwner() != "second-worker" {
			t.Fatalf("Claim after expiry (retry_same_key): claimed=%v attempt=%d %v", cl.GetClaimed(), cl.GetAttempt(), cl.GetOperation())
		}
		claimedOp := lookup(t, ctx, c, ticket)
		_, err = c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: ticket, Attempt: 1, ErrorCode: "timeout"})
		wantGRPCError(t, err, codes.FailedPrecondition, opjournal.CodeStaleAttempt, "attempt")
		if got := lookup(t, ctx, c, ticket); !proto.Equal(got, claimedOp) {
			t.Fatalf("a stale MarkUnknown changed the record:\n%v\n%v", claimedOp, got)
		}
		if ms, err := c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: ticket, Attempt: 2, ExternalId: "TCK-5"}); err != nil ||
			ms.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED {
			t.Fatalf("MarkSucceeded by attempt 2: %v %v", ms, err)
		}

		// reconcile_before_retry: the expired payment waits for reconciliation.
		pc, err := c.Claim(ctx, &pb.ClaimRequest{OperationKey: payment, WorkerId: "second-worker"})
		if err != nil {
			t.Fatal(err)
		}
		if pc.GetClaimed() || pc.GetAttempt() != 0 || pc.GetRetryAfterSeconds() != 0 ||
			pc.GetOperation().GetStatus() != pb.Status_STATUS_UNKNOWN || pc.GetOperation().GetAttemptCount() != 1 {
			t.Fatalf("Claim after expiry (reconcile_before_retry): claimed=%v attempt=%d retry_after=%d %v",
				pc.GetClaimed(), pc.GetAttempt(), pc.GetRetryAfterSeconds(), pc.GetOperation())
		}
		if res, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: payment, ActionType: "create_payment",
			Payload: mustStruct(t, `{"order_id": "5", "amount_minor": 1, "currency": "EUR", "title": "incident 5"}`), Claim: &pb.ClaimOptions{WorkerId: "third-worker"}}); err != nil ||
			res.GetCreated() || res.GetClaimed() || res.GetOperation().GetStatus() != pb.Status_STATUS_UNKNOWN {
			t.Fatalf("Register-with-claim of an expired payment: %v %v", res, err)
		}
	})
}

// TestConcurrentClaimsOverGRPC races 64 Claims for one pending operation:
// exactly one wins, the others are told how long to wait.
func TestConcurrentClaimsOverGRPC(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		srv := startServer(t, "--database-url", dbURL)
		c, ctx := srv.Client, ctxFor(t)
		const key = "payment:order-64:intent-01"
		if _, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: mustStruct(t, `{"order_id": "64", "amount_minor": 6400, "currency": "EUR"}`)}); err != nil {
			t.Fatal(err)
		}
		const n = 64
		var (
			wg      sync.WaitGroup
			results [n]*pb.ClaimResponse
			errs    [n]error
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = c.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: fmt.Sprintf("worker-%02d", i)})
			})
		}
		close(start)
		wg.Wait()

		winner := ""
		for i, res := range results {
			if errs[i] != nil {
				t.Errorf("worker %d: %v", i, errs[i])
				continue
			}
			if res.GetClaimed() {
				if winner != "" {
					t.Errorf("worker-%02d and %s both claimed %s", i, winner, key)
				}
				winner = fmt.Sprintf("worker-%02d", i)
				if res.GetAttempt() != 1 || res.GetLeaseUntil() == nil {
					t.Errorf("winner: attempt %d lease_until %v", res.GetAttempt(), res.GetLeaseUntil())
				}
				continue
			}
			if rs := res.GetRetryAfterSeconds(); rs < 1 || rs > 30 || res.GetAttempt() != 0 ||
				res.GetOperation().GetStatus() != pb.Status_STATUS_IN_PROGRESS {
				t.Errorf("loser worker-%02d: retry_after_seconds %d attempt %d status %v; want 1..30, 0, IN_PROGRESS",
					i, rs, res.GetAttempt(), res.GetOperation().GetStatus())
			}
		}
		if winner == "" {
			t.Fatalf("nobody claimed %s", key)
		}
		op := lookup(t, ctx, c, key)
		if op.GetAttemptCount() != 1 || op.GetLeaseOwner() != winner || op.GetStatus() != pb.Status_STATUS_IN_PROGRESS {
			t.Fatalf("after the race: attempt_count %d lease_owner %q status %v; want 1, %s, IN_PROGRESS",
				op.GetAttemptCount(), op.GetLeaseOwner(), op.GetStatus(), winner)
		}
	})
}
