package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/await"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
)

func payment(key string, amount int) client.Op {
	return client.Op{
		Key:     key,
		Action:  "create_payment",
		Payload: map[string]any{"order_id": "817", "amount_minor": amount, "currency": "RUB"},
	}
}

// fnCounter wraps fn and counts its calls.
type fnCounter struct{ calls atomic.Int32 }

func (c *fnCounter) wrap(fn func(context.Context, client.Attempt) (client.Effect, error)) func(context.Context, client.Attempt) (client.Effect, error) {
	return func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		c.calls.Add(1)
		return fn(ctx, a)
	}
}

func (c *fnCounter) n() int { return int(c.calls.Load()) }

func mustExecute(t *testing.T, c *client.Client, op client.Op, fn func(context.Context, client.Attempt) (client.Effect, error)) client.Outcome {
	t.Helper()
	out, err := c.Execute(context.Background(), op, fn)
	if err != nil {
		t.Fatalf("Execute(%q): %v", op.Key, err)
	}
	return out
}

func lookup(t *testing.T, c *client.Client, key string) *opjournalv1.Operation {
	t.Helper()
	op, err := c.Lookup(context.Background(), key)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", key, err)
	}
	return op
}

func wantKind(t *testing.T, out client.Outcome, want client.OutcomeKind) {
	t.Helper()
	if out.Kind != want {
		t.Fatalf("outcome = %s (code %q, cause %v), want %s", out.Kind, out.ErrorCode, out.Cause, want)
	}
}

func wantStatus(t *testing.T, op *opjournalv1.Operation, want opjournalv1.Status, code string) {
	t.Helper()
	if op.GetStatus() != want || op.GetErrorCode() != code {
		t.Fatalf("journal: status %s, error_code %q; want %s, %q", op.GetStatus(), op.GetErrorCode(), want, code)
	}
}

func TestSucceededThenReplay(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, client.WithWorkerID("agent-1"))
	p := newProvider("pay", "captured")
	defer p.Close()
	op := payment("payment:order-817:intent-01", 490000)
	var fn fnCounter
	pay := fn.wrap(func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		if a.Key != op.Key || a.Number != 1 {
			t.Errorf("attempt = %+v, want key %q number 1", a, op.Key)
		}
		return call(ctx, http.DefaultClient, p.URL, a, op.Payload)
	})

	first := mustExecute(t, c, op, pay)
	wantKind(t, first, client.Succeeded)
	want := `{"id":"pay_1","status":"captured"}`
	if first.Replayed || first.ExternalID != "pay_1" || string(first.Result) != want || first.NeedsReview || first.Err() != nil {
		t.Fatalf("first = %+v", first)
	}

	second := mustExecute(t, c, op, pay)
	wantKind(t, second, client.Succeeded)
	if !second.Replayed || second.ExternalID != "pay_1" || string(second.Result) != want {
		t.Fatalf("replay = %+v", second)
	}
	if fn.n() != 1 || p.Requests() != 1 || p.Effects() != 1 {
		t.Fatalf("fn calls %d, provider requests %d, effects %d; want 1, 1, 1", fn.n(), p.Requests(), p.Effects())
	}

	rec := lookup(t, c, op.Key)
	wantStatus(t, rec, opjournalv1.Status_STATUS_SUCCEEDED, "")
	if rec.GetAttemptCount() != 1 || rec.GetLeaseOwner() != "agent-1" || rec.GetActionType() != "create_payment" {
		t.Fatalf("record = %v", rec)
	}
	if amt := rec.GetPayload().GetFields()["amount_minor"].GetNumberValue(); amt != 490000 {
		t.Fatalf("stored amount_minor = %v, want 490000", amt)
	}
}

func TestNumbersSurvive(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	raw := json.RawMessage(`{"order_id":"1","amount_minor":9007199254740991,"currency":"EUR","fee_minor":-9007199254740991,"rate":0.1,"items":[{"qty":3}]}`)
	op := client.Op{Key: "payment:numbers", Action: "create_payment", Payload: raw}
	out := mustExecute(t, c, op, func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{ExternalID: "pay_big", Result: raw}, nil
	})
	wantKind(t, out, client.Succeeded)
	want := `{"amount_minor":9007199254740991,"currency":"EUR","fee_minor":-9007199254740991,"items":[{"qty":3}],"order_id":"1","rate":0.1}`
	if string(out.Result) != want {
		t.Fatalf("result = %s, want %s", out.Result, want)
	}
	// The stored payload (Lookup: the outcome's record is the lean answer, without it).
	payload, err := json.Marshal(lookup(t, c, op.Key).GetPayload())
	if err != nil || !strings.Contains(string(payload), "9007199254740991") {
		t.Fatalf("stored payload = %s (%v)", payload, err)
	}
}

func TestRejectedIsFinal(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	op := payment("payment:declined", 100)
	var fn fnCounter
	declined := errors.New("card declined by issuer")
	reject := fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{}, fmt.Errorf("provider: %w", client.Rejected("card_declined", declined))
	})

	out := mustExecute(t, c, op, reject)
	wantKind(t, out, client.FailedFinal)
	var re *client.RejectedError
	if out.Replayed || out.ErrorCode != "card_declined" || !errors.As(out.Cause, &re) || !errors.Is(out.Cause, declined) {
		t.Fatalf("outcome = %+v", out)
	}
	if err := out.Err(); !errors.Is(err, client.ErrFailedFinal) || !errors.Is(err, declined) {
		t.Fatalf("Err() = %v", err)
	}
	wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_FAILED_FINAL, "card_declined")

	again := mustExecute(t, c, op, reject)
	wantKind(t, again, client.FailedFinal)
	if !again.Replayed || again.ErrorCode != "card_declined" || fn.n() != 1 {
		t.Fatalf("retry = %+v, fn calls %d; want a replay and 1 call", again, fn.n())
	}
}

func TestUnknownWinsOverRejected(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	op := payment("payment:ambiguous", 100)
	out := mustExecute(t, c, op, func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{}, &client.UnknownError{Code: "gateway_lost", Err: client.Rejected("http_400", nil)}
	})
	wantKind(t, out, client.VerificationRequired)
	wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "gateway_lost")
}

func TestTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	t.Run("http client timeout", func(t *testing.T) {
		t.Parallel()
		c, _ := newClient(t)
		p := newProvider("pay", "captured")
		defer p.Close()
		p.LoseNextAnswer() // the charge happens, the answer never arrives
		op := payment("payment:timeout", 490000)
		var fn fnCounter
		hc := &http.Client{Timeout: 200 * time.Millisecond}
		pay := fn.wrap(func(ctx context.Context, a client.Attempt) (client.Effect, error) {
			return call(ctx, hc, p.URL, a, op.Payload)
		})

		out := mustExecute(t, c, op, pay)
		wantKind(t, out, client.VerificationRequired)
		var ue *client.UnknownError
		if out.ErrorCode != "timeout" || !errors.As(out.Cause, &ue) || !errors.Is(out.Err(), client.ErrVerificationRequired) {
			t.Fatalf("outcome = %+v", out)
		}
		wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "timeout")

		again := mustExecute(t, c, op, pay)
		wantKind(t, again, client.VerificationRequired)
		if fn.n() != 1 || p.Effects() != 1 || p.Requests() != 1 {
			t.Fatalf("fn calls %d, provider requests %d, effects %d; want 1, 1, 1", fn.n(), p.Requests(), p.Effects())
		}
	})
	t.Run("deadline exceeded", func(t *testing.T) {
		t.Parallel()
		c, _ := newClient(t)
		op := payment("payment:deadline", 100)
		var fn fnCounter
		pay := fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
			return client.Effect{}, fmt.Errorf("charge: %w", context.DeadlineExceeded)
		})
		wantKind(t, mustExecute(t, c, op, pay), client.VerificationRequired)
		wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "timeout")
		wantKind(t, mustExecute(t, c, op, pay), client.VerificationRequired)
		if fn.n() != 1 {
			t.Fatalf("fn calls = %d, want 1", fn.n())
		}
	})
	t.Run("plain error", func(t *testing.T) {
		t.Parallel()
		c, _ := newClient(t)
		op := payment("payment:plain", 100)
		out := mustExecute(t, c, op, func(context.Context, client.Attempt) (client.Effect, error) {
			return client.Effect{}, errors.New("something odd")
		})
		wantKind(t, out, client.VerificationRequired)
		wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "error")
	})
}

func TestHTTPStatuses(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	for _, tc := range []struct {
		status int
		kind   client.OutcomeKind
		js     opjournalv1.Status
	}{
		{500, client.VerificationRequired, opjournalv1.Status_STATUS_UNKNOWN},
		{502, client.VerificationRequired, opjournalv1.Status_STATUS_UNKNOWN},
		{503, client.VerificationRequired, opjournalv1.Status_STATUS_UNKNOWN},
		{409, client.VerificationRequired, opjournalv1.Status_STATUS_UNKNOWN},
		{429, client.VerificationRequired, opjournalv1.Status_STATUS_UNKNOWN},
		{400, client.FailedFinal, opjournalv1.Status_STATUS_FAILED_FINAL},
		{422, client.FailedFinal, opjournalv1.Status_STATUS_FAILED_FINAL},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			op := payment(fmt.Sprintf("payment:http-%d", tc.status), 100)
			var fn fnCounter
			pay := fn.wrap(func(ctx context.Context, a client.Attempt) (client.Effect, error) {
				return call(ctx, http.DefaultClient, srv.URL, a, op.Payload)
			})
			code := fmt.Sprintf("http_%d", tc.status)
			out := mustExecute(t, c, op, pay)
			wantKind(t, out, tc.kind)
			if out.ErrorCode != code {
				t.Fatalf("error code %q, want %q", out.ErrorCode, code)
			}
			wantStatus(t, lookup(t, c, op.Key), tc.js, code)
			wantKind(t, mustExecute(t, c, op, pay), tc.kind)
			if fn.n() != 1 || hits.Load() != 1 {
				t.Fatalf("fn calls %d, provider hits %d; want 1, 1", fn.n(), hits.Load())
			}
		})
	}
}

func TestPanicIsRecordedAndPropagates(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	op := payment("payment:panic", 100)
	var fn fnCounter
	boom := errors.New("boom")
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		c.Execute(context.Background(), op, fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
			panic(boom)
		}))
		t.Error("Execute returned instead of panicking")
	}()
	if recovered != boom {
		t.Fatalf("recovered %v, want the original panic value", recovered)
	}
	wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "panic")
	out := mustExecute(t, c, op, fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{}, nil
	}))
	wantKind(t, out, client.VerificationRequired)
	if out.ErrorCode != "panic" || fn.n() != 1 {
		t.Fatalf("retry = %+v, fn calls %d", out, fn.n())
	}
}

func TestCallerCanceled(t *testing.T) {
	t.Parallel()
	t.Run("fn gives up", func(t *testing.T) {
		t.Parallel()
		c, _ := newClient(t)
		op := payment("payment:canceled", 100)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := make(chan struct{})
		go func() { <-started; cancel() }()
		out, err := c.Execute(ctx, op, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
			close(started)
			<-ctx.Done()
			return client.Effect{}, ctx.Err()
		})
		if err != nil {
			t.Fatalf("Execute: %v", err)
		}
		wantKind(t, out, client.VerificationRequired)
		if out.ErrorCode != "canceled" || !errors.Is(out.Cause, context.Canceled) {
			t.Fatalf("outcome = %+v", out)
		}
		wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "canceled")
	})
	t.Run("provider answered after the caller gave up", func(t *testing.T) {
		t.Parallel()
		c, _ := newClient(t)
		op := payment("payment:late-answer", 100)
		ctx, cancel := context.WithCancel(context.Background())
		out, err := c.Execute(ctx, op, func(context.Context, client.Attempt) (client.Effect, error) {
			cancel() // the caller gives up while the provider is answering
			return client.Effect{ExternalID: "pay_late", Result: map[string]any{"status": "captured"}}, nil
		})
		if err != nil {
			t.Fatalf("Execute: %v", err)
		}
		wantKind(t, out, client.Succeeded)
		rec := lookup(t, c, op.Key)
		wantStatus(t, rec, opjournalv1.Status_STATUS_SUCCEEDED, "")
		if rec.GetExternalId() != "pay_late" {
			t.Fatalf("external_id = %q", rec.GetExternalId())
		}
	})
}

func TestConflict(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	var fn fnCounter
	ok := fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{ExternalID: "pay_1"}, nil
	})
	wantKind(t, mustExecute(t, c, payment("payment:order-817:intent-01", 490000), ok), client.Succeeded)

	out := mustExecute(t, c, payment("payment:order-817:intent-01", 500000), ok)
	wantKind(t, out, client.Conflict)
	if err := out.Err(); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("Err() = %v", err)
	}
	if fn.n() != 1 {
		t.Fatalf("fn calls = %d, want 1", fn.n())
	}
	rec := lookup(t, c, "payment:order-817:intent-01")
	if amt := rec.GetPayload().GetFields()["amount_minor"].GetNumberValue(); amt != 490000 || rec.GetAttemptCount() != 1 {
		t.Fatalf("record changed: %v", rec)
	}
}

func TestInProgressElsewhere(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	op := payment("payment:busy", 100)
	started, release := make(chan struct{}), make(chan struct{})
	type result struct {
		out client.Outcome
		err error
	}
	first := make(chan result, 1)
	go func() {
		out, err := c.Execute(context.Background(), op, func(context.Context, client.Attempt) (client.Effect, error) {
			close(started)
			<-release
			return client.Effect{ExternalID: "pay_1"}, nil
		})
		first <- result{out, err}
	}()
	<-started

	var fn fnCounter
	out := mustExecute(t, c, op, fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{}, nil
	}))
	wantKind(t, out, client.InProgressElsewhere)
	if out.RetryAfter <= 0 || out.RetryAfter > 30*time.Second || fn.n() != 0 {
		t.Fatalf("outcome = %+v, fn calls %d", out, fn.n())
	}
	if !errors.Is(out.Err(), client.ErrInProgressElsewhere) {
		t.Fatalf("Err() = %v", out.Err())
	}
	wantStatus(t, out.Operation, opjournalv1.Status_STATUS_IN_PROGRESS, "")

	close(release)
	r := <-first
	if r.err != nil || r.out.Kind != client.Succeeded || r.out.Replayed {
		t.Fatalf("first = %+v, %v", r.out, r.err)
	}
}

func TestRetrySameKeyClaimsAgain(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	p := newProvider("t", "open")
	defer p.Close()
	p.LoseNextAnswer()
	op := client.Op{Key: "ticket:incident-42", Action: "create_ticket", Payload: map[string]any{"title": "disk full"}}
	var mu sync.Mutex
	var attempts []client.Attempt
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	open := func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		mu.Lock()
		attempts = append(attempts, a)
		mu.Unlock()
		return call(ctx, hc, p.URL, a, op.Payload)
	}

	out := mustExecute(t, c, op, open)
	wantKind(t, out, client.VerificationRequired)
	wantStatus(t, lookup(t, c, op.Key), opjournalv1.Status_STATUS_UNKNOWN, "timeout")

	out = mustExecute(t, c, op, open) // retry_same_key: the provider deduplicates by our key
	wantKind(t, out, client.Succeeded)
	if out.Replayed || out.ExternalID != "t_1" || out.Operation.GetAttemptCount() != 2 {
		t.Fatalf("retry = %+v", out)
	}
	want := []client.Attempt{{Key: op.Key, Number: 1, Lease: 30 * time.Second}, {Key: op.Key, Number: 2, Lease: 30 * time.Second}}
	if fmt.Sprint(attempts) != fmt.Sprint(want) {
		t.Fatalf("attempts = %v, want %v", attempts, want)
	}
	if p.Effects() != 1 || p.Requests() != 2 {
		t.Fatalf("provider requests %d, effects %d; want 2, 1", p.Requests(), p.Effects())
	}
}

func TestConcurrentSameIntent(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	p := newProvider("pay", "captured")
	defer p.Close()
	op := payment("payment:stampede", 490000)
	var fn fnCounter
	const n = 32
	var turnedAway atomic.Int32
	pay := fn.wrap(func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		// Keep the lease until every other caller has been turned away.
		await.Until(t, "the other callers to be turned away", func() bool { return turnedAway.Load() == n-1 })
		return call(ctx, http.DefaultClient, p.URL, a, op.Payload)
	})

	outs := make([]client.Outcome, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			outs[i], errs[i] = c.Execute(context.Background(), op, pay)
			if outs[i].Kind == client.InProgressElsewhere {
				turnedAway.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()

	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Execute %d: %v", i, errs[i])
		}
		switch k := outs[i].Kind; {
		case k == client.Succeeded && !outs[i].Replayed:
			fresh++
		case k == client.Succeeded, k == client.InProgressElsewhere:
		default:
			t.Fatalf("Execute %d: outcome %s", i, k)
		}
	}
	if fn.n() != 1 || fresh != 1 || p.Requests() != 1 || p.Effects() != 1 {
		t.Fatalf("fn calls %d, fresh successes %d, provider requests %d, effects %d; want 1 each", fn.n(), fresh, p.Requests(), p.Effects())
	}
}

func TestJournalUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var fn fnCounter
	_, err = c.Execute(ctx, payment("payment:nowhere", 100), fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{}, nil
	}))
	if err == nil || fn.n() != 0 {
		t.Fatalf("err = %v, fn calls %d; want an error and no call", err, fn.n())
	}
	if !errors.Is(err, opjournal.ErrUnavailable) || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("err = %v, want opjournal.ErrUnavailable", err)
	}
}

func TestOutcomeNotRecorded(t *testing.T) {
	t.Parallel()
	c, stop := newClient(t)
	op := payment("payment:journal-gone", 100)
	_, err := c.Execute(context.Background(), op, func(context.Context, client.Attempt) (client.Effect, error) {
		stop() // the journal goes away while the provider charges
		return client.Effect{ExternalID: "pay_9"}, nil
	})
	var nr *client.NotRecordedError
	if !errors.As(err, &nr) {
		t.Fatalf("err = %v, want *NotRecordedError", err)
	}
	if nr.Observed != client.Succeeded || nr.ExternalID != "pay_9" || nr.Attempt != 1 || !errors.Is(err, opjournal.ErrUnavailable) {
		t.Fatalf("err = %+v", nr)
	}
	for _, s := range []string{"could not be recorded", "unknown once its lease expires", `"pay_9"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// TestDuplicateEffectNeedsReview: an attempt whose call outlived its lease
// (no heartbeats) is given up on and left unknown; a retry with the same key
// claims attempt 2 and succeeds; when the first call still reports its
// effect, the SDK records it, and the journal keeps the first confirmed
// effect, records the other, and hands the operation to a person.
func TestDuplicateEffectNeedsReview(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, client.WithLeaseSeconds(1), client.WithHeartbeat(false))
	op := client.Op{Key: "ticket:dup", Action: "create_ticket", Payload: map[string]any{"title": "x"}}
	release := make(chan struct{})
	first := mustExecute(t, c, op, func(context.Context, client.Attempt) (client.Effect, error) {
		<-release // outlives its 1 s lease, ignoring its canceled ctx
		return client.Effect{ExternalID: "t_A"}, nil
	})
	wantKind(t, first, client.VerificationRequired)
	if first.ErrorCode != "lease_expired" {
		t.Fatalf("first = %+v, want lease_expired", first)
	}
	second := mustExecute(t, c, op, func(_ context.Context, a client.Attempt) (client.Effect, error) {
		if a.Number != 2 {
			t.Errorf("attempt %d, want 2", a.Number)
		}
		return client.Effect{ExternalID: "t_B"}, nil
	})
	wantKind(t, second, client.Succeeded)
	close(release) // attempt 1 reports another effect: a duplicate
	await.Until(t, "the late effect to be recorded as a duplicate", func() bool {
		rec := lookup(t, c, op.Key)
		return rec.GetNeedsReview() && rec.GetExternalId() == "t_B" && rec.GetDuplicateExternalId() == "t_A"
	})
}

func TestResultNotStored(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	op := payment("payment:bad-result", 100)
	out, err := c.Execute(context.Background(), op, func(context.Context, client.Attempt) (client.Effect, error) {
		return client.Effect{ExternalID: "pay_1", Result: []int{1, 2}}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "result was not stored") || !errors.Is(err, opjournal.ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
	wantKind(t, out, client.Succeeded)
	rec := lookup(t, c, op.Key)
	wantStatus(t, rec, opjournalv1.Status_STATUS_SUCCEEDED, "")
	if rec.GetExternalId() != "pay_1" || rec.GetResult() != nil {
		t.Fatalf("record = %v", rec)
	}
}

func TestInvalidRequests(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	for _, tc := range []struct {
		name string
		op   client.Op
		want error
	}{
		{"no key", client.Op{Action: "create_payment", Payload: map[string]any{}}, opjournal.ErrInvalidArgument},
		{"key with a space", client.Op{Key: "pay 1", Action: "create_payment", Payload: map[string]any{}}, opjournal.ErrInvalidArgument},
		{"no action", client.Op{Key: "k1", Payload: map[string]any{}}, opjournal.ErrInvalidArgument},
		{"nil payload", client.Op{Key: "k2", Action: "create_payment"}, opjournal.ErrInvalidArgument},
		{"array payload", client.Op{Key: "k3", Action: "create_payment", Payload: []any{1}}, opjournal.ErrInvalidArgument},
		{"string payload", client.Op{Key: "k4", Action: "create_payment", Payload: "x"}, opjournal.ErrInvalidArgument},
		{"bytes payload", client.Op{Key: "k5", Action: "create_payment", Payload: []byte(`{}`)}, opjournal.ErrInvalidArgument},
		{"broken raw JSON", client.Op{Key: "k6", Action: "create_payment", Payload: json.RawMessage(`{"a":`)}, opjournal.ErrInvalidArgument},
		{"integer beyond 2^53", client.Op{Key: "k7", Action: "create_payment", Payload: map[string]any{"amount_minor": int64(1) << 53}}, opjournal.ErrInvalidArgument},
		{"fractional money (server)", client.Op{Key: "k8", Action: "create_payment", Payload: map[string]any{"amount_minor": 49.5}}, opjournal.ErrInvalidArgument},
		{"unknown action (server)", client.Op{Key: "k9", Action: "launch_rocket", Payload: map[string]any{}}, opjournal.ErrUnknownAction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fn fnCounter
			_, err := c.Execute(context.Background(), tc.op, fn.wrap(func(context.Context, client.Attempt) (client.Effect, error) {
				return client.Effect{}, nil
			}))
			if !errors.Is(err, tc.want) || fn.n() != 0 {
				t.Fatalf("err = %v, fn calls %d; want %v and no call", err, fn.n(), tc.want)
			}
		})
	}
	if _, err := c.Execute(context.Background(), payment("k10", 1), nil); err == nil {
		t.Fatal("nil fn accepted")
	}
}

func TestLookupAndWait(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	if _, err := c.Lookup(context.Background(), "payment:none"); !errors.Is(err, opjournal.ErrNotFound) {
		t.Fatalf("Lookup of a missing key: %v, want opjournal.ErrNotFound", err)
	}
	op := payment("payment:wait", 100)
	started, release := make(chan struct{}), make(chan struct{})
	go c.Execute(context.Background(), op, func(context.Context, client.Attempt) (client.Effect, error) {
		close(started)
		<-release
		return client.Effect{ExternalID: "pay_w"}, nil
	})
	<-started
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.Wait(ctx, op.Key, 20*time.Millisecond)
	if err != nil || rec.GetStatus() != opjournalv1.Status_STATUS_SUCCEEDED || rec.GetExternalId() != "pay_w" {
		t.Fatalf("Wait = %v, %v", rec, err)
	}
}

// TestRejectedWithStoresTheRefusal: a refusal given with RejectedWith is
// stored and comes back on the replay, redacted like a result; the first
// outcome holds it as given (the lean answer leaves the stored one out).
func TestRejectedWithStoresTheRefusal(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	op := client.Op{Key: "payment:refused", Action: "create_payment", Payload: map[string]any{"order_id": "1", "amount_minor": 5, "currency": "EUR"}}
	calls := 0
	fn := func(context.Context, client.Attempt) (client.Effect, error) {
		calls++
		return client.Effect{}, client.RejectedWith("http_402", map[string]any{"status": 402, "body": map[string]any{"error": "card_declined", "card_number": "4111111111111111"}}, errors.New("402"))
	}
	first := mustExecute(t, c, op, fn)
	again := mustExecute(t, c, op, fn)
	wantKind(t, first, client.FailedFinal)
	wantKind(t, again, client.FailedFinal)
	given := `{"body":{"card_number":"4111111111111111","error":"card_declined"},"status":402}`
	want := `{"body":{"card_number":"[redacted]","error":"card_declined"},"status":402}`
	if string(first.Result) != given || string(again.Result) != want || !again.Replayed || calls != 1 {
		t.Fatalf("first %s, replay %s (replayed %v), calls %d; want %s then %s", first.Result, again.Result, again.Replayed, calls, given, want)
	}
}
