package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// Business references, parent keys and the provider's dedup window.

func registerWith(t *testing.T, s store.Store, tenantID, key string, refs map[string]string, parent string) store.Applied {
	t.Helper()
	res, err := s.Apply(ctxT(t), tenantID, &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: action, RequestHash: hashA, Payload: payload, Refs: refs, ParentKey: parent})
	if err != nil {
		t.Fatalf("register %q: %v", key, err)
	}
	return res
}

func listKeys(t *testing.T, s store.Store, p store.ListParams) []string {
	t.Helper()
	var keys []string
	for {
		ops, next, err := s.List(ctxT(t), p)
		if err != nil {
			t.Fatalf("list %+v: %v", p, err)
		}
		for _, op := range ops {
			keys = append(keys, op.Key)
		}
		if next == "" {
			return keys
		}
		p.After = next
	}
}

func wantKeys(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("keys = %q, want %q", got, want)
	}
}

func testRefs(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	refs := map[string]string{"order_id": "817", "customer": "c-93"}
	res := registerWith(t, s, tenant, "k1", refs, "")
	if !res.Created || !maps.Equal(res.Operation.Refs, refs) {
		t.Fatalf("register: created %v, refs %v", res.Created, res.Operation.Refs)
	}
	if got := get(t, s, "k1").Refs; !maps.Equal(got, refs) {
		t.Fatalf("stored refs = %v, want %v", got, refs)
	}
	// The same refs (in any order: a map) are a replay.
	again := registerWith(t, s, tenant, "k1", map[string]string{"customer": "c-93", "order_id": "817"}, "")
	if again.Created {
		t.Fatal("the same refs registered a second operation")
	}
	// Other refs, fewer refs or none under the same key and payload: a
	// conflict that changes nothing.
	before := get(t, s, "k1")
	for _, other := range []map[string]string{{"order_id": "818", "customer": "c-93"}, {"order_id": "817"}, nil} {
		_, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload, Refs: other})
		wantCode(t, err, opjournal.CodePayloadMismatch)
		if e := asError(err); e.Field != "refs" {
			t.Fatalf("conflict names field %q, want refs", e.Field)
		}
		sameRecord(t, before, get(t, s, "k1"))
	}
	if evs := events(t, s, "k1"); len(evs) != 1 {
		t.Fatalf("a refused register wrote history: %s", fmtEvents(evs))
	}

	// List filters by refs: every given ref must match.
	registerWith(t, s, tenant, "k2", map[string]string{"order_id": "817", "customer": "c-7"}, "")
	registerWith(t, s, tenant, "k3", map[string]string{"order_id": "900"}, "")
	registerWith(t, s, tenant, "k4", nil, "")
	registerWith(t, s, "other-tenant", "k5", map[string]string{"order_id": "817"}, "")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "817"}}}), "k1", "k2")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "817", "customer": "c-93"}}}), "k1")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "817", "customer": "nobody"}}}))
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{Refs: map[string]string{"customer": "c-7"}}}), "k2")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant}), "k1", "k2", "k3", "k4")
	// Pages of a filtered list.
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, Limit: 1, ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "817"}}}), "k1", "k2")
	// The BASIC view still shows refs (they are small and what people search by).
	ops, _, err := s.List(ctx, store.ListParams{Tenant: tenant, Basic: true, ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "900"}}})
	if err != nil || len(ops) != 1 || ops[0].Refs["order_id"] != "900" {
		t.Fatalf("basic list: %v, %v", ops, err)
	}
	// Refs and tenants: the other tenant's 817 is not ours.
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: "other-tenant", ListFilter: store.ListFilter{Refs: map[string]string{"order_id": "817"}}}), "k5")
}

func testParentKey(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	registerWith(t, s, tenant, "pay", map[string]string{"order_id": "817"}, "")
	registerWith(t, s, tenant, "pay.receipt", nil, "pay")
	registerWith(t, s, tenant, "pay.webhook", nil, "pay")
	registerWith(t, s, tenant, "other.receipt", nil, "other")
	if got := get(t, s, "pay.receipt").ParentKey; got != "pay" {
		t.Fatalf("parent_key = %q", got)
	}
	if got := get(t, s, "pay").ParentKey; got != "" {
		t.Fatalf("the parent has parent_key %q", got)
	}
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{ParentKey: "pay"}}), "pay.receipt", "pay.webhook")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: "other-tenant", ListFilter: store.ListFilter{ParentKey: "pay"}}))
	// The parent cannot change after registration.
	before := get(t, s, "pay.receipt")
	for _, other := range []string{"other", ""} {
		_, err := s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRegister, Key: "pay.receipt", Action: action, RequestHash: hashA, Payload: payload, ParentKey: other})
		wantCode(t, err, opjournal.CodePayloadMismatch)
		if e := asError(err); e.Field != "parent_key" {
			t.Fatalf("conflict names field %q, want parent_key", e.Field)
		}
		sameRecord(t, before, get(t, s, "pay.receipt"))
	}
	if res := registerWith(t, s, tenant, "pay.receipt", nil, "pay"); res.Created {
		t.Fatal("a replay with the same parent created an operation")
	}
}

// testProviderWindow: under retry_same_key a retry reuses the key only
// while the provider still remembers it (retry.provider_dedup_window,
// counted from the FIRST attempt on the database clock); after that the
// operation waits for reconciliation as under reconcile_before_retry.
func testProviderWindow(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	const window = 24 * time.Hour
	cp := ClaimPolicy{WorkerID: "w1", LeaseSeconds: 30, AllowRetryAfterUnknown: true, ProviderWindow: window}
	res, err := s.Apply(ctx, tenant, Claiming(&protocol.Command{Kind: protocol.CmdRegister, Key: "k1", Action: action, RequestHash: hashA, Payload: payload}, &cp))
	if err != nil || !res.Claimed {
		t.Fatalf("register with claim: %+v, %v", res, err)
	}
	first := res.Operation.FirstAttemptAt
	if !first.Equal(res.Operation.AttemptStartedAt) || first.IsZero() {
		t.Fatalf("first_attempt_at = %v, attempt_started_at = %v", first, res.Operation.AttemptStartedAt)
	}
	markUnknown := func(attempt int) {
		t.Helper()
		if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkUnknown, Key: "k1", Attempt: attempt})); err != nil {
			t.Fatal(err)
		}
	}
	markUnknown(1)
	// Within the window: the retry reuses the key, and the window still
	// counts from the first attempt.
	clk.Advance(window - time.Minute)
	cr := claim(t, s, "k1", cp)
	if !cr.Claimed || cr.Operation.AttemptCount != 2 || !cr.Operation.FirstAttemptAt.Equal(first) {
		t.Fatalf("claim within the window: %+v", cr)
	}
	markUnknown(2)
	// At the window's end (to the millisecond) the provider may have
	// forgotten the key: no blind retry, the operation stays unknown.
	clk.Advance(time.Minute)
	cr = claim(t, s, "k1", cp)
	if cr.Claimed || cr.Operation.Status != opjournal.StatusUnknown || cr.Operation.AttemptCount != 2 {
		t.Fatalf("claim after the window: %+v", cr)
	}
	// An expired lease past the window is not claimable either.
	registerWith(t, s, tenant, "k2", nil, "")
	if cr := claim(t, s, "k2", ClaimPolicy{WorkerID: "w1", LeaseSeconds: 1, AllowRetryAfterUnknown: true, ProviderWindow: time.Hour}); !cr.Claimed {
		t.Fatal("k2 not claimed")
	}
	clk.Advance(time.Hour)
	if cr := claim(t, s, "k2", ClaimPolicy{WorkerID: "w2", LeaseSeconds: 1, AllowRetryAfterUnknown: true, ProviderWindow: time.Hour}); cr.Claimed {
		t.Fatalf("an expired lease past the window was claimed: %+v", cr)
	}
	// Without a window (0) the provider never forgets.
	if cr := claim(t, s, "k2", ClaimPolicy{WorkerID: "w2", LeaseSeconds: 1, AllowRetryAfterUnknown: true}); !cr.Claimed {
		t.Fatalf("claim without a window: %+v", cr)
	}
	// The reconciler (or a person) settles k1: once released as proven
	// absent it is pending, and a pending operation is claimed whatever
	// the window says.
	op, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "k1", Attempt: 2, Reason: "not found", Policy: protocol.CommandPolicy{DefinitiveAbsence: true}}))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, op, opjournal.StatusPending)
	if cr := claim(t, s, "k1", cp); !cr.Claimed || cr.Operation.AttemptCount != 3 || !cr.Operation.FirstAttemptAt.Equal(first) {
		t.Fatalf("claim after release: %+v", cr)
	}
	// The rule is the protocol's: the store agrees with WithinProviderWindow.
	if protocol.WithinProviderWindow(first, window, first.Add(window)) {
		t.Fatal("WithinProviderWindow holds at the window's end")
	}
}
