package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// What the console reads: List's key prefix, updated_at range and
// expired-lease filters, Counts and Activity.

const email = "send_email"

// registerAs registers key of action act in tenant tn.
func registerAs(t *testing.T, s store.Store, tn, key, act string) *opjournal.Operation {
	t.Helper()
	res, err := s.Apply(ctxT(t), tn, &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: act, RequestHash: hashA, Payload: payload})
	if err != nil {
		t.Fatalf("register %s/%q: %v", tn, key, err)
	}
	return res.Operation
}

// claimedAs registers key of action act in tenant tn and claims it for
// leaseSeconds.
func claimedAs(t *testing.T, s store.Store, tn, key, act string, leaseSeconds int) *opjournal.Operation {
	t.Helper()
	registerAs(t, s, tn, key, act)
	cr, err := s.Apply(ctxT(t), tn, Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: key}, &ClaimPolicy{WorkerID: "w1", LeaseSeconds: leaseSeconds}))
	if err != nil || !cr.Claimed {
		t.Fatalf("claim %s/%q: %v %+v", tn, key, err, cr)
	}
	return cr.Operation
}

func testListKeyPrefix(t *testing.T, newDB NewDatabase) {
	s, _ := setup(t, newDB)
	// LIKE 'pay_%' would match every pay… key and LIKE 'pay%_%' most of
	// them: the prefix filter must match % and _ as themselves.
	for _, key := range []string{"p", "pay:1", "pay:10", "pay:2", "pay%_x", "pay%ax", "payAx", "pay_1", "payout", "ticket:1", "~x", "}"} {
		register(t, s, key)
	}
	registerAs(t, s, "other", "pay:3", action)
	claim(t, s, "pay:10", noRetry)
	for _, tc := range []struct {
		p    store.ListParams
		want []string
	}{
		{store.ListParams{Limit: 1, ListFilter: store.ListFilter{KeyPrefix: "pay:"}}, []string{"pay:1", "pay:10", "pay:2"}},
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay"}}, []string{"pay%_x", "pay%ax", "pay:1", "pay:10", "pay:2", "payAx", "pay_1", "payout"}},
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay%_"}}, []string{"pay%_x"}},
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay%"}}, []string{"pay%_x", "pay%ax"}},
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay_"}}, []string{"pay_1"}},
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay:9"}}, nil}, // sorts among the keys, matches none
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "zzz"}}, nil},   // after every key
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay:1"}}, []string{"pay:1", "pay:10"}},
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "~"}}, []string{"~x"}}, // the last visible byte: its successor is 0x7f
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "ticket:1"}}, []string{"ticket:1"}},
		// Paging continues inside the prefix, from before, inside and after it.
		{store.ListParams{After: "a", Limit: 2, ListFilter: store.ListFilter{KeyPrefix: "pay:"}}, []string{"pay:1", "pay:10", "pay:2"}},
		{store.ListParams{After: "pay:1", Limit: 1, ListFilter: store.ListFilter{KeyPrefix: "pay:"}}, []string{"pay:10", "pay:2"}},
		{store.ListParams{After: "pay:2", ListFilter: store.ListFilter{KeyPrefix: "pay:"}}, nil},
		// With the other filters.
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay:", Statuses: []opjournal.Status{inProgress}}}, []string{"pay:10"}},
		{store.ListParams{Limit: 1, ListFilter: store.ListFilter{KeyPrefix: "pay:", Statuses: []opjournal.Status{pending}}}, []string{"pay:1", "pay:2"}},
		{store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "pay:", Action: email}}, nil},
	} {
		tc.p.Tenant = tenant
		if got := listKeys(t, s, tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("list %+v = %q, want %q", tc.p, got, tc.want)
		}
	}
	// Tenants are separate.
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: "other", ListFilter: store.ListFilter{KeyPrefix: "pay"}}), "pay:3")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: "nobody", ListFilter: store.ListFilter{KeyPrefix: "pay"}}))
}

func testListUpdatedRange(t *testing.T, newDB NewDatabase) {
	s, _ := setup(t, newDB)
	clk := clockOf(t, s)
	t0 := clk.Now()
	register(t, s, "a")
	clk.Advance(time.Second)
	t1 := clk.Now()
	register(t, s, "b")
	registerAs(t, s, "other", "b-other", action)
	clk.Advance(time.Second)
	t2 := clk.Now()
	register(t, s, "c")
	clk.Advance(time.Second)
	t3 := clk.Now()
	claim(t, s, "a", noRetry) // a changes last
	for key, at := range map[string]time.Time{"a": t3, "b": t1, "c": t2} {
		if got := get(t, s, key).UpdatedAt; !got.Equal(at) {
			t.Fatalf("%s updated at %v, want the store clock's %v", key, got, at)
		}
	}
	half := 500 * time.Microsecond // below the SQLite store's millisecond
	for _, tc := range []struct {
		after, before time.Time
		want          []string
	}{
		{t0, time.Time{}, []string{"a", "b", "c"}},
		{t1, time.Time{}, []string{"a", "b", "c"}}, // >= : b at t1 included
		{t1.Add(time.Millisecond), time.Time{}, []string{"a", "c"}},
		{t1.Add(half), time.Time{}, []string{"a", "c"}},            // b is before t1+0.5 ms
		{t1.Add(time.Nanosecond), time.Time{}, []string{"a", "c"}}, // below PostgreSQL's microsecond too
		{t3.Add(time.Millisecond), time.Time{}, nil},
		{time.Time{}, t2, []string{"b"}}, // < : c at t2 excluded
		{time.Time{}, t1.Add(half), []string{"b"}},
		{time.Time{}, t1.Add(time.Nanosecond), []string{"b"}},
		{time.Time{}, t1, nil},
		{time.Time{}, t3.Add(time.Millisecond), []string{"a", "b", "c"}},
		{t1, t2, []string{"b"}},
		{t1, t3, []string{"b", "c"}},
		{t1, t1, nil},
	} {
		for _, limit := range []int{1, 0} {
			p := store.ListParams{Tenant: tenant, Limit: limit, ListFilter: store.ListFilter{UpdatedAfter: tc.after, UpdatedBefore: tc.before}}
			if got := listKeys(t, s, p); !slices.Equal(got, tc.want) {
				t.Errorf("updated in [%v, %v) (limit %d) = %q, want %q", tc.after, tc.before, limit, got, tc.want)
			}
		}
	}
	// With the other filters, and in the other tenant.
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{UpdatedAfter: t1, Statuses: []opjournal.Status{pending}}}), "b", "c")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{UpdatedAfter: t1, KeyPrefix: "c"}}), "c")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: "other", ListFilter: store.ListFilter{UpdatedAfter: t1, UpdatedBefore: t2}}), "b-other")
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: "other", ListFilter: store.ListFilter{UpdatedAfter: t2}}))
}

func testListLeaseExpired(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	register(t, s, "pending")
	claimedAs(t, s, tenant, "live", action, 30)
	claimedAs(t, s, tenant, "short1", action, 1)
	claimedAs(t, s, tenant, "short2", action, 1)
	makeUnknown(t, s, "unknown") // unknown already: not an expired lease
	claimedAs(t, s, "other", "short-other", action, 1)
	expired := func(p store.ListParams) []string {
		t.Helper()
		p.LeaseExpired = true
		if p.Tenant == "" {
			p.Tenant = tenant
		}
		return listKeys(t, s, p)
	}
	wantKeys(t, expired(store.ListParams{}))
	clk.Advance(time.Second - time.Millisecond)
	wantKeys(t, expired(store.ListParams{}))
	clk.Advance(time.Millisecond) // the 1 s leases end now, on the store's clock
	wantKeys(t, expired(store.ListParams{}), "short1", "short2")
	wantKeys(t, expired(store.ListParams{Limit: 1}), "short1", "short2")
	wantKeys(t, expired(store.ListParams{After: "short1"}), "short2")
	wantKeys(t, expired(store.ListParams{ListFilter: store.ListFilter{KeyPrefix: "short2"}}), "short2")
	wantKeys(t, expired(store.ListParams{ListFilter: store.ListFilter{Statuses: []opjournal.Status{unknown}}}), "short1", "short2")
	wantKeys(t, expired(store.ListParams{ListFilter: store.ListFilter{Statuses: []opjournal.Status{inProgress}}}))
	wantKeys(t, expired(store.ListParams{Tenant: "other"}), "short-other")
	// Their effective status is unknown, like a written-down unknown.
	wantKeys(t, listKeys(t, s, store.ListParams{Tenant: tenant, ListFilter: store.ListFilter{Statuses: []opjournal.Status{unknown}}}), "short1", "short2", "unknown")
	// A check writes the expiry down: no longer an expired lease.
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: "short1", Attempt: 1, Actor: "r", Reason: "n", NextCheckAfter: time.Second})); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, expired(store.ListParams{}), "short2")
	clk.Advance(29 * time.Second)
	wantKeys(t, expired(store.ListParams{}), "live", "short2")
}

// fmtCounts renders rows in a fixed order, to compare them as text.
func fmtCounts(rows []store.CountRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s %s review=%v expired=%v due=%v n=%d oldest=%s",
			r.Action, r.Status, r.NeedsReview, r.LeaseExpired, r.CheckDue, r.Count, r.OldestUpdate.UTC().Format(time.RFC3339Nano)))
	}
	slices.Sort(out)
	return out
}

func wantCounts(t *testing.T, s store.Store, tn string, want ...string) {
	t.Helper()
	rows, err := s.Counts(ctxT(t), tn)
	if err != nil {
		t.Fatalf("counts %q: %v", tn, err)
	}
	slices.Sort(want)
	if got := fmtCounts(rows); !slices.Equal(got, want) {
		t.Fatalf("counts of %q:\n  %s\nwant\n  %s", tn, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func testCounts(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	// at(i) is t_i (one second apart, from the first registration), read at t6.
	at := func(i int) string {
		return clk.Now().Add(time.Duration(i-6) * time.Second).UTC().Format(time.RFC3339Nano)
	}

	registerAs(t, s, tenant, "p1", action) // t0
	clk.Advance(time.Second)
	registerAs(t, s, tenant, "p2", action) // t1
	registerAs(t, s, tenant, "e1", email)
	clk.Advance(time.Second)
	claimedAs(t, s, tenant, "live", action, 30) // t2, lease to t32
	clk.Advance(time.Second)
	claimedAs(t, s, tenant, "expired", action, 1) // t3, lease to t4
	clk.Advance(time.Second)
	makeUnknown(t, s, "u-due") // t4
	makeUnknown(t, s, "u-later")
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: "u-later", Attempt: 1, Actor: "r", Reason: "n", NextCheckAfter: time.Hour})); err != nil {
		t.Fatal(err)
	}
	makeUnknown(t, s, "u-review")
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "u-review", Actor: "r", Reason: "stuck"})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // t5
	op := claimedAs(t, s, tenant, "s1", email, 30)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "s1", Attempt: op.AttemptCount, ExternalID: "e_1"})); err != nil {
		t.Fatal(err)
	}
	op = claimedAs(t, s, tenant, "f1", action, 30)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "f1", Attempt: op.AttemptCount, ErrorCode: "declined"})); err != nil {
		t.Fatal(err)
	}
	op = claimedAs(t, s, tenant, "s-dup", action, 30)
	for _, ext := range []string{"pay_1", "pay_2"} { // the second puts it under review
		if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "s-dup", Attempt: op.AttemptCount, ExternalID: ext})); err != nil {
			t.Fatal(err)
		}
	}
	registerAs(t, s, "other", "o1", action)
	claimedAs(t, s, "other", "o2", action, 1)
	clk.Advance(time.Second) // t6

	wantCounts(t, s, tenant,
		"create_payment pending review=false expired=false due=false n=2 oldest="+at(0),
		"send_email pending review=false expired=false due=false n=1 oldest="+at(1),
		"create_payment in_progress review=false expired=false due=false n=1 oldest="+at(2),
		"create_payment unknown review=false expired=true due=true n=1 oldest="+at(3),
		"create_payment unknown review=false expired=false due=true n=1 oldest="+at(4),
		"create_payment unknown review=false expired=false due=false n=1 oldest="+at(4),
		"create_payment unknown review=true expired=false due=false n=1 oldest="+at(4),
		"send_email succeeded review=false expired=false due=false n=1 oldest="+at(5),
		"create_payment failed_final review=false expired=false due=false n=1 oldest="+at(5),
		"create_payment succeeded review=true expired=false due=false n=1 oldest="+at(5),
	)
	wantCounts(t, s, "other",
		"create_payment pending review=false expired=false due=false n=1 oldest="+at(5),
		"create_payment unknown review=false expired=true due=true n=1 oldest="+at(5),
	)
	wantCounts(t, s, "nobody")

	// An hour later, on the store's clock: the live lease has expired too,
	// and u-later's next check is due.
	clk.Advance(time.Hour)
	at = func(i int) string {
		return clk.Now().Add(-time.Hour).Add(time.Duration(i-6) * time.Second).UTC().Format(time.RFC3339Nano)
	}
	wantCounts(t, s, tenant,
		"create_payment pending review=false expired=false due=false n=2 oldest="+at(0),
		"send_email pending review=false expired=false due=false n=1 oldest="+at(1),
		"create_payment unknown review=false expired=true due=true n=2 oldest="+at(2),
		"create_payment unknown review=false expired=false due=true n=2 oldest="+at(4),
		"create_payment unknown review=true expired=false due=false n=1 oldest="+at(4),
		"send_email succeeded review=false expired=false due=false n=1 oldest="+at(5),
		"create_payment failed_final review=false expired=false due=false n=1 oldest="+at(5),
		"create_payment succeeded review=true expired=false due=false n=1 oldest="+at(5),
	)
}

func fmtActivity(rows []store.ActivityRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s %s %d", r.Start.UTC().Format(time.RFC3339Nano), r.Kind, r.Count))
	}
	return out
}

func testActivity(t *testing.T, newDB NewDatabase) {
	s, ctx := setup(t, newDB)
	clk := clockOf(t, s)
	const bucket = time.Minute
	b0 := time.UnixMilli((clk.Now().UnixMilli()/bucket.Milliseconds() + 1) * bucket.Milliseconds()).UTC()
	b1 := b0.Add(bucket)
	clk.AdvanceTo(b0.Add(5 * time.Second))
	register(t, s, "early") // in b0, but before since
	clk.AdvanceTo(b0.Add(10 * time.Second))
	since := clk.Now()

	// Bucket b0, from since on (inclusive).
	cr := claimed(t, s, "a", noRetry)
	for _, ext := range []string{"pay_1", "pay_2"} { // confirmed, then a duplicate
		if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "a", Attempt: cr.Operation.AttemptCount, ExternalID: ext})); err != nil {
			t.Fatal(err)
		}
	}
	makeUnknown(t, s, "u") // "outcome unknown: timeout": a prefix row of the table
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdRecordCheck, Key: "u", Attempt: 1, Actor: "r", Reason: "5xx", NextCheckAfter: time.Second})); err != nil {
		t.Fatal(err)
	}
	registerAs(t, s, "other", "x", action)

	// Bucket b1.
	clk.AdvanceTo(b1.Add(30 * time.Second))
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdEscalate, Key: "u", Actor: "r", Reason: "stuck"})); err != nil {
		t.Fatal(err)
	}
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdResolve, Key: "u", Resolution: succeeded, ExternalID: "pay_9", Actor: "alice", Reason: "found"})); err != nil {
		t.Fatal(err)
	}
	makeUnknown(t, s, "r")
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdReleaseForRetry, Key: "r", Attempt: 1, Actor: "r", Reason: "absent", Policy: protocol.CommandPolicy{DefinitiveAbsence: true}})); err != nil {
		t.Fatal(err)
	}
	claimed(t, s, "f", noRetry)
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdExtendLease, Key: "f", Attempt: 1, LeaseSeconds: 30, Policy: protocol.CommandPolicy{MaxAttempt: time.Hour}})); err != nil {
		t.Fatal(err)
	}
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdMarkFailedFinal, Key: "f", Attempt: 1, ErrorCode: "declined"})); err != nil {
		t.Fatal(err)
	}
	if _, err := Op(s.Apply(ctx, tenant, &protocol.Command{Kind: protocol.CmdAcknowledge, Key: "a", Actor: "alice", Reason: "refunded"})); err != nil {
		t.Fatal(err)
	}
	claimedAs(t, s, "other", "y", action, 30)

	activity := func(p store.ActivityParams) []string {
		t.Helper()
		rows, err := s.Activity(ctx, p)
		if err != nil {
			t.Fatalf("activity %+v: %v", p, err)
		}
		return fmtActivity(rows)
	}
	row := func(start time.Time, k opjournal.EventKind, n int) string {
		return fmtActivity([]store.ActivityRow{{Start: start, Kind: k, Count: n}})[0]
	}
	want := []string{
		row(b0, opjournal.KindChecked, 1),
		row(b0, opjournal.KindClaimed, 2),
		row(b0, opjournal.KindConfirmed, 1),
		row(b0, opjournal.KindDuplicate, 1),
		row(b0, opjournal.KindRegistered, 2),
		row(b0, opjournal.KindUnknown, 1),
		row(b1, opjournal.KindAcknowledged, 1),
		row(b1, opjournal.KindClaimed, 2),
		row(b1, opjournal.KindEscalated, 1),
		row(b1, opjournal.KindLeaseExtended, 1),
		row(b1, opjournal.KindRegistered, 2),
		row(b1, opjournal.KindRejected, 1),
		row(b1, opjournal.KindReleased, 1),
		row(b1, opjournal.KindResolved, 1),
		row(b1, opjournal.KindUnknown, 1),
	}
	wantRows := func(what string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("activity %s:\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
	wantRows("since", activity(store.ActivityParams{Tenant: tenant, Since: since, Bucket: bucket}), want)

	// The SQL classifies and buckets as opjournal.KindOf and the bucket's
	// definition do, event by event, for any Since and width.
	var hist []opjournal.Event
	for _, key := range []string{"early", "a", "u", "r", "f"} {
		hist = append(hist, events(t, s, key)...)
	}
	recount := func(since time.Time, width time.Duration) []string {
		var rows []store.ActivityRow
		for _, e := range hist {
			if e.At.Before(since) {
				continue
			}
			start := time.UnixMilli(e.At.UnixMilli() / width.Milliseconds() * width.Milliseconds()).UTC()
			k := opjournal.KindOf(e.Reason)
			if i := slices.IndexFunc(rows, func(r store.ActivityRow) bool { return r.Start.Equal(start) && r.Kind == k }); i >= 0 {
				rows[i].Count++
			} else {
				rows = append(rows, store.ActivityRow{Start: start, Kind: k, Count: 1})
			}
		}
		slices.SortFunc(rows, func(a, b store.ActivityRow) int {
			return cmp.Or(a.Start.Compare(b.Start), strings.Compare(string(a.Kind), string(b.Kind)))
		})
		return fmtActivity(rows)
	}
	wantRows("by KindOf", recount(since, bucket), want)
	for _, tc := range []struct {
		since time.Time
		width time.Duration
	}{
		{b0.Add(5 * time.Second), bucket}, // the early event counts too
		{b1, bucket},                      // b0 is gone
		{since, 2 * bucket},               // b0 and b1 merged, or split at a 2 min start
		{since, 7 * time.Second},
		{since, 1500 * time.Millisecond},
		{time.Time{}, time.Hour},
	} {
		p := store.ActivityParams{Tenant: tenant, Since: tc.since, Bucket: tc.width}
		wantRows(fmt.Sprintf("%+v", p), activity(p), recount(tc.since, tc.width))
	}
	got := activity(store.ActivityParams{Tenant: tenant, Since: b0.Add(5 * time.Second), Bucket: bucket})
	if w := row(b0, opjournal.KindRegistered, 3); !slices.Contains(got, w) {
		t.Fatalf("activity since the early event: %q lacks %q", got, w)
	}
	wantRows("since b1", activity(store.ActivityParams{Tenant: tenant, Since: b1, Bucket: bucket}), want[6:])
	wantRows("after every event", activity(store.ActivityParams{Tenant: tenant, Since: clk.Now().Add(time.Millisecond), Bucket: bucket}), nil)

	// The other tenant's events are its own; a tenant without any has none.
	wantRows("of other", activity(store.ActivityParams{Tenant: "other", Since: since, Bucket: bucket}),
		[]string{row(b0, opjournal.KindRegistered, 1), row(b1, opjournal.KindClaimed, 1), row(b1, opjournal.KindRegistered, 1)})
	wantRows("of nobody", activity(store.ActivityParams{Tenant: "nobody", Bucket: bucket}), nil)
	for _, b := range []time.Duration{0, time.Second - time.Millisecond, time.Second + time.Microsecond, -time.Minute} {
		_, err := s.Activity(ctx, store.ActivityParams{Tenant: tenant, Bucket: b})
		wantCode(t, err, opjournal.CodeInvalidArgument)
	}
}
