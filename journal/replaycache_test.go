package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/testclock"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/hashkey"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// replayFixture is one SQLite store seen by two services, as by two
// replicas: cached, with the replay cache on (its age measured on the
// test's clock, which is also the database's), and plain, with it off,
// which answers as the store does.
type replayFixture struct {
	st             *sqlite.Store
	clk            *testclock.Clock
	keys           *hashkey.Ring
	cached, plain  *journal.Service
	ctx            context.Context
	paymentPayload json.RawMessage
}

func setupReplay(t *testing.T) *replayFixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := testclock.New()
	st.SetClock(clk.Now)
	// The replicas share the keys of the keyed request hash (create_payment
	// redacts its card), as replicas do.
	keys, err := hashkey.New(hashkey.Random("test"))
	if err != nil {
		t.Fatal(err)
	}
	return &replayFixture{
		st: st, clk: clk, ctx: context.Background(), keys: keys,
		cached: journal.New(st, policy.Default(), journal.Limits{}, journal.WithHashKeys(keys),
			journal.WithReplayCache(journal.ReplayCacheConfig{Size: 100, Now: clk.Now})),
		plain:          journal.New(st, policy.Default(), journal.Limits{}, journal.WithHashKeys(keys), journal.WithReplayCache(journal.ReplayCacheConfig{Size: 0})),
		paymentPayload: json.RawMessage(`{"order_id":"817","amount_minor":490000,"currency":"RUB"}`),
	}
}

func (f *replayFixture) request(tenant, key string) journal.RegisterRequest {
	return journal.RegisterRequest{Caller: journal.Caller{Tenant: tenant}, Key: key, Action: "create_payment", Payload: f.paymentPayload,
		Refs: map[string]string{"order_id": "817"}}
}

// succeed registers key with a claim through svc and confirms it.
func (f *replayFixture) succeed(t *testing.T, svc *journal.Service, req journal.RegisterRequest) *opjournal.Operation {
	t.Helper()
	req.Claim = &journal.ClaimOptions{WorkerID: "w"}
	res, err := svc.Register(f.ctx, req)
	if err != nil || !res.Claim.Claimed {
		t.Fatalf("register %s: %+v %v", req.Key, res, err)
	}
	op, err := svc.MarkSucceeded(f.ctx, journal.MarkSucceededRequest{Caller: req.Caller, Key: req.Key, Attempt: 1, ExternalID: "pay_1",
		Result: json.RawMessage(`{"id":"pay_1"}`)})
	if err != nil || op.Status != opjournal.StatusSucceeded {
		t.Fatalf("mark succeeded %s: %+v %v", req.Key, op, err)
	}
	return op
}

func (f *replayFixture) register(t *testing.T, svc *journal.Service, req journal.RegisterRequest) journal.RegisterResult {
	t.Helper()
	res, err := svc.Register(f.ctx, req)
	if err != nil {
		t.Fatalf("register %s: %v", req.Key, err)
	}
	return res
}

// sameAnswer fails unless the cached service's answer to req is the one
// the store gives (the plain service's), with and without a claim.
func (f *replayFixture) sameAnswer(t *testing.T, req journal.RegisterRequest) journal.RegisterResult {
	t.Helper()
	got, want := f.register(t, f.cached, req), f.register(t, f.plain, req)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("cached answer differs from the store's:\n got %+v\n     %+v\nwant %+v\n     %+v", got, got.Operation, want, want.Operation)
	}
	return got
}

// TestReplayCacheAnswersATerminalReplayWithoutTheStore: once an operation
// is terminal, a replay is answered as the store would answer it, with
// and without a claim, and without the store: it still answers with the
// database closed.
func TestReplayCacheAnswersATerminalReplayWithoutTheStore(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	req := f.request("", "pay-1")
	f.succeed(t, f.cached, req) // filled on the way out of the mark
	if s := f.cached.ReplayCacheStats(); s.Len != 1 || s.Size != 100 {
		t.Fatalf("after the mark: %+v", s)
	}
	res := f.sameAnswer(t, req)
	if res.Created || res.Operation.Status != opjournal.StatusSucceeded || string(res.Operation.Result) != `{"id":"pay_1"}` {
		t.Fatalf("replay: %+v", res.Operation)
	}
	withClaim := req
	withClaim.Claim = &journal.ClaimOptions{WorkerID: "w2"}
	res = f.sameAnswer(t, withClaim)
	if res.Claim == nil || res.Claim.Claimed || res.Claim.RetryAfter != 0 || opjournal.NextStepOf(res.Operation, true, false) != opjournal.NextReplay {
		t.Fatalf("replay with a claim: %+v", res.Claim)
	}
	if s := f.cached.ReplayCacheStats(); s.Hits != 2 || s.Misses != 1 { // the first Register went to the store
		t.Fatalf("two replays: %+v", s)
	}
	// A bad claim is refused as without the cache, before any look-up.
	bad := req
	bad.Claim = &journal.ClaimOptions{WorkerID: "w", LeaseSeconds: 31}
	if _, err := f.cached.Register(f.ctx, bad); opjournal.ErrorCode(err) != opjournal.CodeInvalidArgument {
		t.Fatalf("bad claim: %v", err)
	}

	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cached.Lookup(f.ctx, "", "pay-1"); err == nil {
		t.Fatal("the store still answers after Close: the test proves nothing")
	}
	res, err := f.cached.Register(f.ctx, req)
	if err != nil || res.Operation.Status != opjournal.StatusSucceeded {
		t.Fatalf("a replay with the store closed: %+v %v", res, err)
	}
}

// TestReplayCacheMissesGiveTheStoresRefusal: another payload, other refs
// or another parent on a cached key go to the store, which refuses them
// exactly as without the cache; a failed_final operation is cached, a
// non-terminal one is not.
func TestReplayCacheMissesGiveTheStoresRefusal(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	req := f.request("", "pay-2")
	f.succeed(t, f.cached, req)
	other := func(edit func(*journal.RegisterRequest)) journal.RegisterRequest {
		r := req
		edit(&r)
		return r
	}
	for name, r := range map[string]journal.RegisterRequest{
		"other payload": other(func(r *journal.RegisterRequest) {
			r.Payload = json.RawMessage(`{"order_id":"817","amount_minor":500000,"currency":"RUB"}`)
		}),
		"other refs":   other(func(r *journal.RegisterRequest) { r.Refs = map[string]string{"order_id": "818"} }),
		"no refs":      other(func(r *journal.RegisterRequest) { r.Refs = nil }),
		"other parent": other(func(r *journal.RegisterRequest) { r.ParentKey = "order:817" }),
	} {
		_, got := f.cached.Register(f.ctx, r)
		_, want := f.plain.Register(f.ctx, r)
		if got == nil || opjournal.ErrorCode(got) != opjournal.CodePayloadMismatch || got.Error() != want.Error() {
			t.Errorf("%s: cached %v, store %v", name, got, want)
		}
	}
	if s := f.cached.ReplayCacheStats(); s.Misses != 1+4 || s.Hits != 0 { // the first Register's, then the mismatches
		t.Fatalf("four mismatches: %+v", s)
	}

	// failed_final is terminal: cached too.
	ff := f.request("", "pay-ff")
	ff.Claim = &journal.ClaimOptions{WorkerID: "w"}
	f.register(t, f.cached, ff)
	if _, err := f.cached.MarkFailedFinal(f.ctx, journal.MarkRequest{Key: "pay-ff", Attempt: 1, ErrorCode: "card_declined"}); err != nil {
		t.Fatal(err)
	}
	ff.Claim = nil
	if res := f.sameAnswer(t, ff); res.Operation.Status != opjournal.StatusFailedFinal {
		t.Fatalf("failed_final replay: %+v", res.Operation)
	}
	// A pending and an in_progress operation are not.
	before := f.cached.ReplayCacheStats().Len
	f.register(t, f.cached, f.request("", "pay-pending"))
	f.register(t, f.cached, f.request("", "pay-pending"))
	running := f.request("", "pay-running")
	running.Claim = &journal.ClaimOptions{WorkerID: "w"}
	f.register(t, f.cached, running)
	f.register(t, f.cached, running)
	if s := f.cached.ReplayCacheStats(); s.Len != before {
		t.Fatalf("a non-terminal operation was cached: %+v", s)
	}
	// Nor is a large one: the cache's memory stays bounded by its size.
	big := f.request("", "pay-big")
	big.Payload = json.RawMessage(`{"order_id":"817","amount_minor":1,"currency":"RUB","memo":"` + strings.Repeat("m", 4<<10) + `"}`)
	f.succeed(t, f.cached, big)
	big.Claim = nil
	f.sameAnswer(t, big)
	if s := f.cached.ReplayCacheStats(); s.Len != before {
		t.Fatalf("a 4 KiB payload was cached: %+v", s)
	}
}

// TestReplayAnswersTheFinalRecord: a terminal row's duplicate reports,
// review and note still change, so a Register's answer, from the store as
// from the cache, leaves them out (any replica's entry stays right
// however those change); Lookup shows them. Each such command through the
// caching service also refreshes its entry.
func TestReplayAnswersTheFinalRecord(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	req := f.request("", "pay-3")
	f.succeed(t, f.cached, req)
	first := f.sameAnswer(t, req)

	if _, err := f.cached.MarkSucceeded(f.ctx, journal.MarkSucceededRequest{Key: "pay-3", Attempt: 1, ExternalID: "pay_dup"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.plain.SetNote(f.ctx, journal.SetNoteRequest{Key: "pay-3", Actor: "ops", Note: "refund 4711"}); err != nil {
		t.Fatal(err)
	}
	op, err := f.plain.Lookup(f.ctx, "", "pay-3")
	if err != nil || !op.NeedsReview || op.DuplicateReports != 1 || op.Note != "refund 4711" {
		t.Fatalf("Lookup after a duplicate report and a note: %+v %v", op, err)
	}
	res := f.sameAnswer(t, req)
	if !reflect.DeepEqual(res, first) {
		t.Fatalf("the replay's answer changed with the bookkeeping:\n got %+v\nwant %+v", res.Operation, first.Operation)
	}
	o := res.Operation
	if o.NeedsReview || o.ReviewReason != "" || o.DuplicateReports != 0 || o.DuplicateExternalIDs != nil || o.Note != "" || !o.UpdatedAt.IsZero() ||
		o.ExternalID != "pay_1" || string(o.Result) != `{"id":"pay_1"}` {
		t.Fatalf("the replay's answer: %+v", o)
	}
	if _, err := f.cached.Acknowledge(f.ctx, journal.AcknowledgeRequest{Key: "pay-3", Actor: "ops", Reason: "refunded"}); err != nil {
		t.Fatal(err)
	}
	f.sameAnswer(t, req)
	if s := f.cached.ReplayCacheStats(); s.Hits != 3 {
		t.Fatalf("every replay after a change should hit: %+v", s)
	}
}

// TestReplayCacheIsPerTenant: tenant A's entry never answers tenant B,
// whose Register of the same key and request makes B's own operation.
func TestReplayCacheIsPerTenant(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	f.succeed(t, f.cached, f.request("a", "pay-4"))
	res := f.register(t, f.cached, f.request("b", "pay-4"))
	if !res.Created || res.Operation.Tenant != "b" || res.Operation.Status != opjournal.StatusPending {
		t.Fatalf("tenant b got %+v (created %v)", res.Operation, res.Created)
	}
	if res := f.register(t, f.cached, f.request("a", "pay-4")); res.Operation.Tenant != "a" || res.Operation.Status != opjournal.StatusSucceeded {
		t.Fatalf("tenant a got %+v", res.Operation)
	}
}

// stillCache is a caching service on f's store whose process clock stands
// still while the database's moves: its entries never age, so what drops
// them is the purge itself.
func (f *replayFixture) stillCache() *journal.Service {
	still := f.clk.Now()
	return journal.New(f.st, policy.Default(), journal.Limits{}, journal.WithHashKeys(f.keys),
		journal.WithReplayCache(journal.ReplayCacheConfig{Size: 10, Now: func() time.Time { return still }}))
}

// TestReplayCacheEvictsOnPurge: after this service purges the row, the
// key is unknown and a Register makes a new operation, however young the
// service's clock says its entry is.
func TestReplayCacheEvictsOnPurge(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	svc := f.stillCache()
	req := f.request("", "pay-5")
	old := f.succeed(t, svc, req)
	f.clk.Advance(720*time.Hour + time.Second) // create_payment's retention
	if res := f.register(t, svc, req); res.Created || svc.ReplayCacheStats().Hits != 1 {
		t.Fatalf("before the purge: %+v %+v", res, svc.ReplayCacheStats())
	}
	reports, err := svc.Purge(f.ctx, journal.PurgeOptions{Action: "create_payment"})
	if err != nil || reports[0].Operations != 1 {
		t.Fatalf("purge: %+v %v", reports, err)
	}
	if s := svc.ReplayCacheStats(); s.Len != 0 {
		t.Fatalf("after the purge: %+v", s)
	}
	res := f.register(t, svc, req)
	if !res.Created || res.Operation.Status != opjournal.StatusPending || !res.Operation.CreatedAt.After(old.CreatedAt) {
		t.Fatalf("after the purge: %+v created %v", res.Operation, res.Created)
	}
}

// TestReplayCacheAgeBound: an entry lives at most MaxAge, and never into
// the last MaxAge of its row's retention, so a purge by another replica
// (here the plain service, which caches nothing) cannot leave it behind.
func TestReplayCacheAgeBound(t *testing.T) {
	t.Parallel()
	f := setupReplay(t)
	req := f.request("", "pay-7")
	f.succeed(t, f.cached, req)
	f.clk.Advance(journal.ReplayCacheMaxAge - time.Second)
	f.register(t, f.cached, req)
	if s := f.cached.ReplayCacheStats(); s.Hits != 1 {
		t.Fatalf("within the age bound: %+v", s)
	}
	f.clk.Advance(time.Second)
	f.register(t, f.cached, req)                                                      // expired: read from the store, and filled again
	if s := f.cached.ReplayCacheStats(); s.Hits != 1 || s.Misses != 2 || s.Len != 1 { // the new key's, then the expired entry's
		t.Fatalf("at the age bound: %+v", s)
	}

	// Near the end of the retention nothing is filled: the row may go
	// any moment, through any replica.
	f.clk.Advance(720*time.Hour - 2*journal.ReplayCacheMaxAge)
	f.register(t, f.cached, req)
	f.clk.Advance(journal.ReplayCacheMaxAge / 2)
	f.register(t, f.cached, req)
	if s := f.cached.ReplayCacheStats(); s.Len != 0 || s.Hits != 1 {
		t.Fatalf("in the last MaxAge of the retention: %+v", s)
	}
	f.clk.Advance(journal.ReplayCacheMaxAge)
	if _, err := f.plain.Purge(f.ctx, journal.PurgeOptions{Action: "create_payment"}); err != nil {
		t.Fatal(err)
	}
	if res := f.register(t, f.cached, req); !res.Created {
		t.Fatalf("purged by another replica, answered from the cache: %+v", res.Operation)
	}
}

// TestReplayCachePurgeRacingReplays: replays run while the row is purged;
// once the purge has returned, no Register is answered with the purged
// operation: the first makes a new one, and every answer after it is the
// new one.
func TestReplayCachePurgeRacingReplays(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		f := setupReplay(t)
		svc := f.stillCache()
		req := f.request("", "pay-race")
		f.succeed(t, svc, req)
		f.clk.Advance(721 * time.Hour)
		done := make(chan struct{})
		errs := make(chan error, 8)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				after := false
				for {
					select {
					case <-done:
						return
					default:
					}
					res, err := svc.Register(f.ctx, req)
					if err != nil {
						errs <- err
						return
					}
					if after && res.Operation.Status == opjournal.StatusSucceeded {
						errs <- fmt.Errorf("round %d: the purged operation answered after the purge", round)
						return
					}
					if res.Operation.Status == opjournal.StatusPending {
						after = true // the new operation: the old one is gone for good
					}
				}
			}()
		}
		if _, err := svc.Purge(f.ctx, journal.PurgeOptions{}); err != nil {
			t.Fatal(err)
		}
		res := f.register(t, svc, req)
		if res.Operation.Status != opjournal.StatusPending {
			t.Fatalf("round %d: after the purge: %+v", round, res.Operation)
		}
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}
