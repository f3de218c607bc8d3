package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// The model-based test: random sequences of commands, with random attempts,
// workers, times and policies, run against the protocol's pure model
// (protocol.Apply over a map) and against a real store, on a database
// clock the test moves (store.Clock), so that leases expire and lags pass
// without sleeping. Every answer (the operation, claimed, created, the
// retry-after hint, or the refusal's code, field and words) and every event
// written must be the model's; rapid shrinks a failing sequence to a short
// one. A second property fires several commands on one key at once and
// checks that the store's answers and final state are those of the model
// applying them in some order (linearizability).
//
// `make test` runs the default number of sequences (-rapid.checks=100);
// `make model-check` runs many more.

// RunModel runs the model-based properties against the store opened by
// open, which must implement store.Clock.
func RunModel(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	clk, ok := s.(store.Clock)
	if !ok {
		t.Fatalf("%T does not implement store.Clock: the model test moves the database clock", s)
	}
	var now atomic.Pointer[time.Time]
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(&start)
	clk.SetClock(func() time.Time { return *now.Load() })
	t.Cleanup(func() { clk.SetClock(nil) })
	var run atomic.Int64
	newModel := func(rt *rapid.T) *model {
		// Each sequence gets its own tenant: isolated rows on one database,
		// and its own stretch of the clock.
		n := run.Add(1)
		base := start.Add(time.Duration(n) * 240 * time.Hour)
		now.Store(&base)
		return &model{rt: rt, s: s, tenant: fmt.Sprintf("model-%d", n), now: base,
			setNow: func(at time.Time) { now.Store(&at) },
			ops:    map[string]*opjournal.Operation{}, events: map[string][]opjournal.Event{}}
	}
	t.Run("Sequences", func(t *testing.T) {
		rapid.Check(t, func(rt *rapid.T) {
			m := newModel(rt)
			rt.Repeat(map[string]func(*rapid.T){
				"":        func(*rapid.T) {}, // rapid's invariant hook
				"advance": m.advance,
				"command": func(rt *rapid.T) { m.step(rt, m.command(rt, m.key(rt))) },
			})
		})
	})
	t.Run("Interleavings", func(t *testing.T) {
		rapid.Check(t, func(rt *rapid.T) {
			m := newModel(rt)
			for range rapid.IntRange(0, 8).Draw(rt, "prefix") {
				if rapid.Bool().Draw(rt, "advance first") {
					m.advance(rt)
				}
				m.step(rt, m.command(rt, "a"))
			}
			var cmds []*protocol.Command
			for range rapid.IntRange(2, 4).Draw(rt, "concurrent") {
				cmds = append(cmds, m.command(rt, "a"))
			}
			m.concurrently(rt, "a", cmds)
		})
	})
}

// model is the pure model of one tenant, and the store it is compared with.
type model struct {
	rt     *rapid.T
	s      store.Store
	tenant string
	now    time.Time
	setNow func(time.Time)
	ops    map[string]*opjournal.Operation // as last changed
	events map[string][]opjournal.Event
}

var modelKeys = []string{"a", "b", "c"}

func (m *model) key(rt *rapid.T) string { return rapid.SampledFrom(modelKeys).Draw(rt, "key") }

// advance moves the clock forward by up to 40 s, in whole milliseconds
// (SQLite keeps milliseconds).
func (m *model) advance(rt *rapid.T) {
	m.now = m.now.Add(time.Duration(rapid.IntRange(0, 40_000).Draw(rt, "ms")) * time.Millisecond)
	m.setNow(m.now)
}

// command draws a command on key.
func (m *model) command(rt *rapid.T, key string) *protocol.Command { return DrawCommand(rt, key) }

// DrawCommand draws a command of any kind on key, with the parameters
// (attempts, workers, external ids, policy flags) drawn from small sets so
// that sequences meet every rule of the table.
func DrawCommand(rt *rapid.T, key string) *protocol.Command {
	kinds := []protocol.CommandKind{protocol.CmdRegister, protocol.CmdRegister, protocol.CmdClaim, protocol.CmdClaim,
		protocol.CmdExtendLease, protocol.CmdMarkSucceeded, protocol.CmdMarkSucceeded, protocol.CmdMarkUnknown,
		protocol.CmdMarkFailedFinal, protocol.CmdReleaseForRetry, protocol.CmdRecordCheck, protocol.CmdEscalate,
		protocol.CmdResolve, protocol.CmdAcknowledge, protocol.CmdSetNote,
		protocol.CmdApprove, protocol.CmdApprove, protocol.CmdReject, protocol.CmdExpireApproval}
	c := &protocol.Command{Kind: rapid.SampledFrom(kinds).Draw(rt, "kind"), Key: key,
		Actor: rapid.SampledFrom([]string{"", "p1"}).Draw(rt, "actor")}
	c.StatedActor = rapid.SampledFrom([]string{"", "said"}).Draw(rt, "stated")
	secs := func(name string, lo, hi int) time.Duration {
		return time.Duration(rapid.IntRange(lo, hi).Draw(rt, name)) * time.Second
	}
	switch c.Kind {
	case protocol.CmdRegister:
		c.Action, c.Payload = "pay", json.RawMessage(`{"n":1}`)
		c.RequestHash = rapid.SampledFrom([]string{"h1", "h1", "h2"}).Draw(rt, "hash")
		c.Refs = rapid.SampledFrom([]map[string]string{nil, nil, {"order_id": "817"}, {"order_id": "818"}}).Draw(rt, "refs")
		c.ParentKey = rapid.SampledFrom([]string{"", "", "p"}).Draw(rt, "parent")
		if rapid.IntRange(0, 2).Draw(rt, "approval?") == 0 {
			c.Approval = &opjournal.Approval{Required: true, Approvers: []string{"operator"}, RequestedBy: "agent",
				TwoPerson: rapid.Bool().Draw(rt, "two person"), Rule: "required",
				OnTimeout: rapid.SampledFrom([]string{opjournal.ApprovalTimeoutReject, opjournal.ApprovalTimeoutEscalate}).Draw(rt, "on timeout")}
			c.ApprovalTimeout = secs("approval timeout", 1, 60)
		}
		if c.Claim = rapid.Bool().Draw(rt, "claim"); c.Claim {
			c.WorkerID = rapid.SampledFrom([]string{"w1", "w2"}).Draw(rt, "worker")
			c.LeaseSeconds = rapid.IntRange(1, 20).Draw(rt, "lease")
			c.Policy.RetryAfterUnknown = rapid.Bool().Draw(rt, "retry same key")
			c.Policy.ProviderWindow = secs("provider window", 0, 60)
		}
	case protocol.CmdClaim:
		c.WorkerID = rapid.SampledFrom([]string{"w1", "w2"}).Draw(rt, "worker")
		c.LeaseSeconds = rapid.IntRange(1, 20).Draw(rt, "lease")
		c.Policy.RetryAfterUnknown = rapid.Bool().Draw(rt, "retry same key")
		c.Policy.ProviderWindow = secs("provider window", 0, 60)
	case protocol.CmdExtendLease:
		c.LeaseSeconds = rapid.IntRange(1, 20).Draw(rt, "lease")
		c.Policy.MaxAttempt = secs("max attempt", 1, 60)
	case protocol.CmdMarkSucceeded:
		c.ExternalID = rapid.SampledFrom([]string{"", "e1", "e2", "e3"}).Draw(rt, "external id")
		if rapid.Bool().Draw(rt, "result") {
			c.Result = json.RawMessage(`{"r":1}`)
		}
	case protocol.CmdMarkUnknown, protocol.CmdMarkFailedFinal:
		c.ErrorCode = rapid.SampledFrom([]string{"", "timeout"}).Draw(rt, "error code")
		if c.Kind == protocol.CmdMarkFailedFinal && rapid.Bool().Draw(rt, "refusal") {
			c.Result = json.RawMessage(`{"status":402}`)
		}
	case protocol.CmdReleaseForRetry:
		c.Reason = "absent"
		c.Policy.DefinitiveAbsence = rapid.Bool().Draw(rt, "definitive")
		c.Policy.ReleaseAfter = secs("release after", 0, 20)
	case protocol.CmdRecordCheck:
		c.Reason, c.NextCheckAfter = "unclear", secs("next check", 1, 60)
	case protocol.CmdEscalate, protocol.CmdAcknowledge:
		c.Reason = "a person looks"
	case protocol.CmdSetNote:
		c.Note = rapid.SampledFrom([]string{"", "asked the provider", "two\nlines"}).Draw(rt, "note")
	case protocol.CmdApprove, protocol.CmdReject:
		c.Actor = rapid.SampledFrom([]string{"p1", "p2", "p3"}).Draw(rt, "approver")
		c.RequestHash = rapid.SampledFrom([]string{"h1", "h1", "h2"}).Draw(rt, "seen hash")
		c.Reason = "looked at it"
		if c.Kind == protocol.CmdReject {
			c.ErrorCode = rapid.SampledFrom([]string{opjournal.ErrorApprovalRejected, "too_much"}).Draw(rt, "error code")
		}
	case protocol.CmdResolve:
		c.Reason = "seen at the provider"
		c.Resolution = rapid.SampledFrom([]opjournal.Status{opjournal.StatusSucceeded, opjournal.StatusFailedFinal}).Draw(rt, "resolution")
		if c.Resolution == opjournal.StatusSucceeded {
			c.ExternalID = "e9"
			if rapid.Bool().Draw(rt, "result") {
				c.Result = json.RawMessage(`{"r":2}`)
			}
		} else {
			c.ErrorCode = rapid.SampledFrom([]string{"", "cancelled"}).Draw(rt, "error code")
		}
	}
	switch c.Kind {
	case protocol.CmdExtendLease, protocol.CmdMarkSucceeded, protocol.CmdMarkUnknown, protocol.CmdMarkFailedFinal,
		protocol.CmdReleaseForRetry, protocol.CmdRecordCheck:
		c.Attempt = rapid.IntRange(1, 4).Draw(rt, "attempt")
	}
	return c
}

// answer is what one call answered, normalized for comparison.
type answer struct {
	op         *opjournal.Operation
	created    bool
	claimed    bool
	retryAfter time.Duration
	err        error
}

// step applies c to the model and to the store and compares.
func (m *model) step(rt *rapid.T, c *protocol.Command) {
	want, ops, events := m.apply(m.ops, m.events, c)
	got := call(m.s, m.tenant, c)
	if d := diffAnswers(want, got); d != "" {
		rt.Fatalf("%s at %s: %s", describe(c), m.now.Format(time.RFC3339Nano), d)
	}
	m.ops, m.events = ops, events
	m.check(rt, c.Key)
}

// check compares the stored operation and history of key with the model's.
func (m *model) check(rt *rapid.T, key string) {
	ctx := context.Background()
	got, err := m.s.Get(ctx, m.tenant, key)
	want := m.read(m.ops, key)
	switch {
	case want == nil && opjournal.ErrorCode(err) != opjournal.CodeNotFound:
		rt.Fatalf("get %q: the model has no operation; the store answers %v, %v", key, got, err)
	case want == nil:
		return
	case err != nil:
		rt.Fatalf("get %q: %v", key, err)
	}
	if d := diffOps(want, got); d != "" {
		rt.Fatalf("stored %q differs from the model: %s", key, d)
	}
	evs, _, err := m.s.Events(ctx, store.EventsParams{Tenant: m.tenant, Key: key, Limit: opjournal.MaxPageSize})
	if err != nil {
		rt.Fatalf("events %q: %v", key, err)
	}
	if d := diffEvents(m.events[key], evs); d != "" {
		rt.Fatalf("history of %q differs from the model: %s", key, d)
	}
}

// read returns the model's operation as a store reads it now: with its
// effective status.
func (m *model) read(ops map[string]*opjournal.Operation, key string) *opjournal.Operation {
	op := ops[key]
	if op == nil {
		return nil
	}
	r := op.Clone()
	r.Status, r.UnknownSince = protocol.EffectiveStatus(op, m.now), protocol.EffectiveUnknownSince(op, m.now)
	r.Tenant = m.tenant
	return r
}

// apply runs c on a copy of the model's state and returns the answer and
// the new state. It is the protocol (protocol.Apply) plus what the store
// interface composes from it: Register with a claim of an existing key
// claims it, and a claim that lost reports how long the other lease runs.
func (m *model) apply(ops map[string]*opjournal.Operation, events map[string][]opjournal.Event, c *protocol.Command) (answer, map[string]*opjournal.Operation, map[string][]opjournal.Event) {
	ops, events = cloneOps(ops), cloneEvents(events)
	one := func(c *protocol.Command) (protocol.Decision, error) {
		d, err := protocol.Apply(m.read(ops, c.Key), c, m.now)
		if err == nil && d.Rule.Outcome == protocol.Changed {
			d.Op.Tenant = m.tenant
			ops[c.Key] = d.Op
			if d.Event != nil {
				events[c.Key] = append(events[c.Key], *d.Event)
			}
		}
		return d, err
	}
	d, err := one(c)
	if err != nil {
		return answer{err: err}, ops, events
	}
	a := answer{op: m.read(ops, c.Key)}
	switch c.Kind {
	case protocol.CmdRegister:
		a.created = d.Rule.Outcome == protocol.Changed
		a.claimed = a.created && c.Claim && d.Op.Raw() == opjournal.StatusInProgress
		if !a.created && c.Claim {
			cc := *c
			cc.Kind = protocol.CmdClaim
			cd, _ := one(&cc)
			a.claimed, a.op = cd.Rule.Outcome == protocol.Changed, m.read(ops, c.Key)
			if !a.claimed {
				a.retryAfter = store.RetryAfter(a.op, m.now)
			}
		}
	case protocol.CmdClaim:
		a.claimed = d.Rule.Outcome == protocol.Changed
		if !a.claimed {
			a.retryAfter = store.RetryAfter(a.op, m.now)
		}
	}
	if c.Kind == protocol.CmdRegister && a.op.Status == opjournal.StatusAwaitingApproval {
		a.retryAfter = store.AwaitRetryAfter(a.op, m.now)
	}
	return a, ops, events
}

// call runs c against the store.
func call(s store.Store, tenant string, c *protocol.Command) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.Apply(ctx, tenant, c)
	if err != nil {
		return answer{err: err}
	}
	return answer{op: res.Operation, created: res.Created, claimed: res.Claimed, retryAfter: res.RetryAfter}
}

// Call runs c on s in tenant and returns the store's error.
func Call(s store.Store, tenant string, c *protocol.Command) error { return call(s, tenant, c).err }

// ClaimPolicy is the claim part of a Claim command, or of a Register
// that claims: what the journal takes from the action's policy.
type ClaimPolicy struct {
	WorkerID               string
	LeaseSeconds           int
	AllowRetryAfterUnknown bool
	ProviderWindow         time.Duration
}

// Claiming sets the claim of c from cp and returns c; a nil cp leaves c
// as it is. On a Register it asks for the claim (Command.Claim).
func Claiming(c *protocol.Command, cp *ClaimPolicy) *protocol.Command {
	if cp == nil {
		return c
	}
	c.Claim = c.Kind == protocol.CmdRegister
	c.WorkerID, c.LeaseSeconds = cp.WorkerID, cp.LeaseSeconds
	c.Policy.RetryAfterUnknown, c.Policy.ProviderWindow = cp.AllowRetryAfterUnknown, cp.ProviderWindow
	return c
}

// Op is the operation of what Apply returned, for the commands that
// answer with it: Op(s.Apply(ctx, tenant, c)).
func Op(a store.Applied, err error) (*opjournal.Operation, error) {
	if err != nil {
		return nil, err
	}
	return a.Operation, nil
}

// concurrently fires cmds on key at once, with the clock standing still,
// and checks that the answers and the final state are those of the model
// applying them one after the other in some order.
func (m *model) concurrently(rt *rapid.T, key string, cmds []*protocol.Command) {
	got := make([]answer, len(cmds))
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, c := range cmds {
		wg.Go(func() {
			<-gate
			got[i] = call(m.s, m.tenant, c)
		})
	}
	close(gate)
	wg.Wait()
	for _, c := range got {
		if opjournal.ErrorCode(c.err) == opjournal.CodeUnavailable || opjournal.ErrorCode(c.err) == opjournal.CodeInternal {
			rt.Fatalf("a concurrent call failed: %v", c.err)
		}
	}
	storedOp, err := m.s.Get(context.Background(), m.tenant, key)
	if err != nil && opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		rt.Fatal(err)
	}
	storedEvs, _, err := m.s.Events(context.Background(), store.EventsParams{Tenant: m.tenant, Key: key, Limit: opjournal.MaxPageSize})
	if err != nil && opjournal.ErrorCode(err) != opjournal.CodeNotFound {
		rt.Fatal(err)
	}
	var tried []string
	for _, order := range permutations(len(cmds)) {
		ops, events := m.ops, m.events
		ok := true
		var why string
		for _, i := range order {
			var want answer
			want, ops, events = m.apply(ops, events, cmds[i])
			if d := diffAnswers(want, got[i]); d != "" {
				ok, why = false, fmt.Sprintf("%s: %s", describe(cmds[i]), d)
				break
			}
		}
		if ok {
			if d := diffOps(m.read(ops, key), storedOp); d != "" {
				ok, why = false, "final state: "+d
			} else if d := diffEvents(events[key], storedEvs); d != "" {
				ok, why = false, "history: "+d
			}
		}
		if ok {
			m.ops, m.events = ops, events
			return
		}
		tried = append(tried, fmt.Sprintf("order %v: %s", order, why))
	}
	var desc []string
	for _, c := range cmds {
		desc = append(desc, describe(c))
	}
	rt.Fatalf("no order of the concurrent commands %s explains what the store did:\n%s", strings.Join(desc, "; "), strings.Join(tried, "\n"))
}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(slices.Clone(p[:i]), n-1)
			out = append(out, append(q, p[i:]...))
		}
	}
	return out
}

func cloneOps(ops map[string]*opjournal.Operation) map[string]*opjournal.Operation {
	out := make(map[string]*opjournal.Operation, len(ops))
	for k, op := range ops {
		out[k] = op.Clone()
	}
	return out
}

func cloneEvents(evs map[string][]opjournal.Event) map[string][]opjournal.Event {
	out := make(map[string][]opjournal.Event, len(evs))
	for k, e := range evs {
		out[k] = slices.Clone(e)
	}
	return out
}

func describe(c *protocol.Command) string {
	d := *c
	d.HashFor = nil
	return fmt.Sprintf("%s {attempt:%d worker:%q lease:%d ext:%q result:%s code:%q actor:%q stated:%q hash:%q refs:%v parent:%q claim:%v resolution:%q next:%s policy:%+v}",
		c.Kind, d.Attempt, d.WorkerID, d.LeaseSeconds, d.ExternalID, d.Result, d.ErrorCode, d.Actor, d.StatedActor, d.RequestHash,
		d.Refs, d.ParentKey, d.Claim, d.Resolution, d.NextCheckAfter, d.Policy)
}

// diffAnswers says how a store's answer differs from the model's ("" if not).
func diffAnswers(want, got answer) string {
	switch {
	case (want.err == nil) != (got.err == nil):
		return fmt.Sprintf("model answers %v, store %v", errOrOp(want), errOrOp(got))
	case want.err != nil:
		we, ge := asError(want.err), asError(got.err)
		if we.Code != ge.Code || we.Field != ge.Field || we.Message != ge.Message {
			return fmt.Sprintf("refusal differs:\n  model %s %s %q\n  store %s %s %q", we.Code, we.Field, we.Message, ge.Code, ge.Field, ge.Message)
		}
		return ""
	case want.created != got.created || want.claimed != got.claimed || want.retryAfter != got.retryAfter:
		return fmt.Sprintf("model created=%v claimed=%v retry=%s, store created=%v claimed=%v retry=%s",
			want.created, want.claimed, want.retryAfter, got.created, got.claimed, got.retryAfter)
	}
	return diffOps(want.op, got.op)
}

func errOrOp(a answer) string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%+v", *a.op)
}

func asError(err error) *opjournal.Error {
	var e *opjournal.Error
	for x := err; x != nil; {
		if ee, ok := x.(*opjournal.Error); ok {
			e = ee
			break
		}
		u, ok := x.(interface{ Unwrap() error })
		if !ok {
			break
		}
		x = u.Unwrap()
	}
	if e == nil {
		return &opjournal.Error{Code: opjournal.CodeInternal, Message: err.Error()}
	}
	return e
}

// approvalText is an approval in words that compare (times in UTC
// milliseconds), "" for none.
func approvalText(a *opjournal.Approval) string {
	if a == nil {
		return ""
	}
	s := fmt.Sprintf("%v %v %v %v %q %q %q deadline %s", a.Required, a.Approvers, a.DistinctFromRequester, a.TwoPerson, a.RequestedBy,
		a.OnTimeout, a.Rule, fmtTime(a.Deadline))
	for _, d := range a.Approvals {
		s += fmt.Sprintf("; %q at %s: %q", d.Principal, fmtTime(d.At), d.Reason)
	}
	return s
}

// diffOps compares two operations field by field ("" if equal).
func diffOps(want, got *opjournal.Operation) string {
	if want == nil || got == nil {
		if want == got {
			return ""
		}
		return fmt.Sprintf("model %v, store %v", want, got)
	}
	var d []string
	cmp := func(name string, w, g any) {
		if fmt.Sprint(w) != fmt.Sprint(g) {
			d = append(d, fmt.Sprintf("%s: model %v, store %v", name, w, g))
		}
	}
	times := func(name string, w, g time.Time) {
		if !w.Equal(g) {
			d = append(d, fmt.Sprintf("%s: model %s, store %s", name, fmtTime(w), fmtTime(g)))
		}
	}
	cmp("tenant", want.Tenant, got.Tenant)
	cmp("key", want.Key, got.Key)
	cmp("action", want.Action, got.Action)
	cmp("request_hash", want.RequestHash, got.RequestHash)
	cmp("hash_key_id", want.HashKeyID, got.HashKeyID)
	cmp("payload", string(want.Payload), string(got.Payload))
	cmp("status", want.Status, got.Status)
	cmp("attempt_count", want.AttemptCount, got.AttemptCount)
	cmp("lease_owner", want.LeaseOwner, got.LeaseOwner)
	times("lease_until", want.LeaseUntil, got.LeaseUntil)
	cmp("external_id", want.ExternalID, got.ExternalID)
	cmp("duplicate_external_ids", want.DuplicateExternalIDs, got.DuplicateExternalIDs)
	cmp("duplicate_external_id", want.DuplicateExternalID, got.DuplicateExternalID)
	cmp("duplicate_reports", want.DuplicateReports, got.DuplicateReports)
	cmp("result", string(want.Result), string(got.Result))
	cmp("error_code", want.ErrorCode, got.ErrorCode)
	cmp("needs_review", want.NeedsReview, got.NeedsReview)
	cmp("review_reason", want.ReviewReason, got.ReviewReason)
	times("created_at", want.CreatedAt, got.CreatedAt)
	times("updated_at", want.UpdatedAt, got.UpdatedAt)
	times("unknown_since", want.UnknownSince, got.UnknownSince)
	cmp("check_count", want.CheckCount, got.CheckCount)
	times("last_checked_at", want.LastCheckedAt, got.LastCheckedAt)
	times("next_check_at", want.NextCheckAt, got.NextCheckAt)
	times("attempt_started_at", want.AttemptStartedAt, got.AttemptStartedAt)
	times("first_attempt_at", want.FirstAttemptAt, got.FirstAttemptAt)
	cmp("refs", want.Refs, got.Refs)
	cmp("parent_key", want.ParentKey, got.ParentKey)
	cmp("note", want.Note, got.Note)
	cmp("approval", approvalText(want.Approval), approvalText(got.Approval))
	return strings.Join(d, "; ")
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000000")
}

// diffEvents compares histories, ids aside ("" if equal).
func diffEvents(want, got []opjournal.Event) string {
	if len(want) != len(got) {
		return fmt.Sprintf("model has %d events, store %d:\n  model %s\n  store %s", len(want), len(got), fmtEvs(want), fmtEvs(got))
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.From != g.From || w.To != g.To || w.Attempt != g.Attempt || w.Actor != g.Actor || w.StatedActor != g.StatedActor ||
			w.Reason != g.Reason || w.ExternalID != g.ExternalID || !w.At.Equal(g.At) {
			return fmt.Sprintf("event %d:\n  model %s\n  store %s", i, fmtEv(w), fmtEv(g))
		}
	}
	return ""
}

func fmtEv(e opjournal.Event) string {
	return fmt.Sprintf("%s→%s attempt=%d actor=%q stated=%q reason=%q ext=%q at=%s", e.From, e.To, e.Attempt, e.Actor, e.StatedActor, e.Reason, e.ExternalID, fmtTime(e.At))
}

func fmtEvs(evs []opjournal.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, fmtEv(e))
	}
	return "[" + strings.Join(s, ", ") + "]"
}
