package soak

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The invariants, as Violation.Invariant names them.
const (
	// InvDuplicate (1): an intent has more than one effect at the provider.
	InvDuplicate = "1 duplicate effect"
	// InvLost (2): an operation an agent got a journal answer for is not
	// in the journal.
	InvLost = "2 lost operation"
	// InvUnsettled (3): an operation (or an intent) is neither terminal
	// nor in the review queue after the settle phase.
	InvUnsettled = "3 not settled"
	// InvSucceededNoEffect (4): succeeded without an effect (or with an
	// external_id the provider does not have for the key).
	InvSucceededNoEffect = "4 succeeded without effect"
	// InvFailedWithEffect (5): failed_final although the effect exists.
	InvFailedWithEffect = "5 failed_final with effect"
	// InvStrayEffect: an effect whose key is not in the journal: the
	// provider was called for an unregistered operation.
	InvStrayEffect = "stray effect"
	// InvContradiction: an agent was told an outcome the journal does not
	// keep.
	InvContradiction = "contradiction"
	// InvHistory: an operation's history leaves a terminal state or skips
	// a step.
	InvHistory = "history"
	// InvConflict: the same intent was answered as a conflict.
	InvConflict = "conflict"
	// InvRefused: the journal refused a valid request.
	InvRefused = "refused"
	// InvHarness: the harness itself could not do its part (a restart
	// failed); the run proves less than it should.
	InvHarness = "harness"
	// InvPayload: the journal does not keep a large payload as the agent
	// sent it.
	InvPayload = "payload"
)

// Violation is one broken invariant.
type Violation struct {
	// Invariant names it (the Inv* constants).
	Invariant string
	// Key is the operation key, if one is concerned.
	Key string
	// Detail says what was seen.
	Detail string
}

// String formats v on one line.
func (v Violation) String() string {
	if v.Key == "" {
		return fmt.Sprintf("[%s] %s", v.Invariant, v.Detail)
	}
	return fmt.Sprintf("[%s] %s: %s", v.Invariant, v.Key, v.Detail)
}

// Summary is the outcome of a soak run.
type Summary struct {
	// Seed and Command replay the run.
	Seed    int64
	Command string
	// Elapsed is the whole run, settle and checks included.
	Elapsed time.Duration
	// ShippedPolicy: the run used the shipped policy as it is.
	ShippedPolicy bool
	// Settle is the settle deadline used: Config.Settle, or longer when the
	// policy's releases need it.
	Settle time.Duration
	// Agents and NoHeartbeatAgents: the agents, and those of them whose
	// SDK client ran without heartbeats.
	Agents, NoHeartbeatAgents int
	// Intents were handed out to agents; Settled of them were seen
	// settled by an agent.
	Intents, Settled int
	// Operations are in the journal at the end, by final state.
	Operations, Succeeded, FailedFinal, NeedsReview int
	// Calls counts the agents' Execute calls; ProviderCalls the calls
	// that reached the tool function (the provider).
	Calls, ProviderCalls int
	// Attempts counts the claims (the sum of attempt_count).
	Attempts int
	// Effects is the provider's effect count.
	Effects int
	// Faults counts the faults fired, by "METHOD kind" (the slow-lease
	// faults as FaultSlowLease15 and FaultSlowLease3).
	Faults map[string]int
	// SlowLease15 and SlowLease3 are the slow-lease faults that fired.
	SlowLease15, SlowLease3 int
	// HeartbeatKept counts provider calls that confirmed an effect after
	// more than their lease, the lease kept by the SDK's heartbeats.
	HeartbeatKept int
	// GaveUp counts the Execute calls the SDK gave up at the end of the
	// lease (VerificationRequired, "lease_expired"), GaveUpNoHeartbeat
	// those of agents without heartbeats, GaveUpOps their operations;
	// of these, GaveUpReconciled were marked succeeded by a reconciler (a
	// late effect found) and GaveUpReleased released for retry.
	GaveUp, GaveUpNoHeartbeat, GaveUpOps, GaveUpReconciled, GaveUpReleased int
	// RetriesAfterRelease counts provider calls of a second or later
	// attempt, which only a release grants.
	RetriesAfterRelease int
	// LargeIntents carry a payload member of LargeMemberBytes; LargeUnknown
	// of them passed through unknown, LargeReconciled were marked
	// succeeded by a reconciler and LargeReleased released for retry.
	LargeIntents, LargeUnknown, LargeReconciled, LargeReleased int
	// JournalKills and ReconcilerKills count kill -9s (each followed by a
	// restart); PoolDrops the pool drops and Terminated the connections
	// they ended; AgentRestarts the agents that crashed mid-call.
	JournalKills, ReconcilerKills, PoolDrops, Terminated, AgentRestarts int
	// UnknownOutcomes counts the Execute calls that ended unknown
	// (VerificationRequired after calling the provider); UnknownOps the
	// operations whose history passed through unknown (expired leases
	// included).
	UnknownOutcomes, UnknownOps int
	// Reconciled counts operations a reconciler marked succeeded;
	// Released, Rechecked, Escalated and Resolved count those events of
	// the histories (Resolved: by an operator).
	Reconciled, Released, Rechecked, Escalated, Resolved int
	// JournalErrors counts the agents' failed journal calls by code.
	JournalErrors map[string]int
	// Duplicates and Lost are the counts behind invariants 1 and 2.
	Duplicates, Lost int
	// PgBouncer is set when the replicas went through PgBouncer
	// (Config.PgBouncer); PgBouncerXacts is the transactions it carried
	// for them (SHOW STATS).
	PgBouncer      bool
	PgBouncerXacts int64
	// Review lists the operations still in the review queue with their
	// reason (not violations).
	Review []string
	// Violations are the broken invariants; empty means PASS.
	Violations []Violation
}

// Passed reports whether no invariant was violated.
func (s Summary) Passed() bool { return len(s.Violations) == 0 }

// Write prints the summary table, the escalations, the violations and
// PASS or FAIL with the replay command.
func (s Summary) Write(w io.Writer) {
	row := func(name string, v any) { fmt.Fprintf(w, "  %-34s %v\n", name, v) }
	fmt.Fprintf(w, "\n== soak summary (seed %d, %s)\n", s.Seed, s.Elapsed.Round(time.Second))
	pol := "the soak's own"
	if s.ShippedPolicy {
		pol = "shipped (protocol/policy/default.yaml)"
	}
	row("policy (settle deadline)", fmt.Sprintf("%s (%s)", pol, s.Settle))
	row("agents (without heartbeats)", fmt.Sprintf("%d (%d)", s.Agents, s.NoHeartbeatAgents))
	row("intents (settled as seen by agents)", fmt.Sprintf("%d (%d)", s.Intents, s.Settled))
	row("large-payload intents", fmt.Sprintf("%d: unknown %d, reconciled %d, released %d", s.LargeIntents, s.LargeUnknown, s.LargeReconciled, s.LargeReleased))
	row("operations in the journal", fmt.Sprintf("%d: succeeded %d, failed_final %d, needs_review %d", s.Operations, s.Succeeded, s.FailedFinal, s.NeedsReview))
	row("agent calls (Execute)", s.Calls)
	row("provider calls", s.ProviderCalls)
	row("attempts (claims)", s.Attempts)
	row("provider effects", s.Effects)
	faults := make([]string, 0, len(s.Faults))
	for _, k := range sortedKeys(s.Faults) {
		faults = append(faults, fmt.Sprintf("%s=%d", k, s.Faults[k]))
	}
	row("faults injected", total(s.Faults))
	for _, f := range faults {
		fmt.Fprintf(w, "  %-34s %s\n", "", f)
	}
	row("slow calls (1.5x lease, 3x lease)", fmt.Sprintf("%d, %d", s.SlowLease15, s.SlowLease3))
	row("long calls kept by heartbeats", s.HeartbeatKept)
	row("given up at the lease (lease_expired)", fmt.Sprintf("%d calls (%d without heartbeat), %d ops: reconciled %d, released %d",
		s.GaveUp, s.GaveUpNoHeartbeat, s.GaveUpOps, s.GaveUpReconciled, s.GaveUpReleased))
	row("kills (journal, reconciler)", fmt.Sprintf("%d, %d", s.JournalKills, s.ReconcilerKills))
	row("pool drops (connections ended)", fmt.Sprintf("%d (%d)", s.PoolDrops, s.Terminated))
	if s.PgBouncer {
		row("pgbouncer transactions", s.PgBouncerXacts)
	}
	row("agent crashes mid-call", s.AgentRestarts)
	row("unknowns observed (calls, ops)", fmt.Sprintf("%d, %d", s.UnknownOutcomes, s.UnknownOps))
	row("reconciled (succeeded by reconciler)", s.Reconciled)
	row("released for retry (retry calls)", fmt.Sprintf("%d (%d)", s.Released, s.RetriesAfterRelease))
	row("inconclusive checks", s.Rechecked)
	row("escalated", s.Escalated)
	row("resolved by operator", s.Resolved)
	errs := make([]string, 0, len(s.JournalErrors))
	for _, k := range sortedKeys(s.JournalErrors) {
		errs = append(errs, fmt.Sprintf("%s=%d", k, s.JournalErrors[k]))
	}
	row("journal errors seen by agents", strings.Join(append([]string{fmt.Sprint(total(s.JournalErrors))}, errs...), " "))
	row("duplicates", s.Duplicates)
	row("lost", s.Lost)
	row("violations", len(s.Violations))
	if len(s.Review) > 0 {
		fmt.Fprintf(w, "\nstill in the review queue (%d; not violations):\n", len(s.Review))
		for i, r := range s.Review {
			if i == 10 {
				fmt.Fprintf(w, "  … and %d more\n", len(s.Review)-10)
				break
			}
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
	if len(s.Violations) > 0 {
		by := map[string]int{}
		for _, v := range s.Violations {
			by[v.Invariant]++
		}
		fmt.Fprintf(w, "\nviolations by invariant:")
		for _, k := range sortedKeys(by) {
			fmt.Fprintf(w, " %s=%d", k, by[k])
		}
		fmt.Fprintln(w)
		for i, v := range s.Violations {
			if i == 30 {
				fmt.Fprintf(w, "  … and %d more\n", len(s.Violations)-30)
				break
			}
			fmt.Fprintf(w, "  %s\n", v)
		}
	}
	verdict := "PASS"
	if !s.Passed() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n%s seed=%d\nreplay: %s\n", verdict, s.Seed, s.Command)
}

// rpc connects to a live journal replica for the harness's own calls.
func (h *harness) rpc() (pb.JournalServiceClient, func(), error) {
	conn, err := h.cluster.dial(0)
	if err != nil {
		return nil, nil, err
	}
	return pb.NewJournalServiceClient(conn), func() { _ = conn.Close() }, nil
}

// listAll pages through ListOperations with req's filters.
func listAll(ctx context.Context, rpc pb.JournalServiceClient, req *pb.ListOperationsRequest) ([]*pb.Operation, error) {
	var all []*pb.Operation
	req.PageSize, req.PageToken = 1000, ""
	for {
		var resp *pb.ListOperationsResponse
		err := retry(ctx, func(ctx context.Context) (err error) {
			resp, err = rpc.ListOperations(ctx, req)
			return err
		})
		if err != nil {
			return all, err
		}
		all = append(all, resp.GetOperations()...)
		if resp.GetNextPageToken() == "" {
			return all, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// retry calls f (with a 30 s timeout each) up to 5 times while it fails:
// the harness's own reads must not fail because a replica just restarted.
func retry(ctx context.Context, f func(context.Context) error) error {
	var err error
	for i := range 5 {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		sleep(ctx, time.Duration(i+1)*500*time.Millisecond)
	}
	return err
}

// opFacts is what the checks learn about one operation.
type opFacts struct {
	op      *pb.Operation
	events  []*pb.Event
	records []fakeprovider.Record // the provider's, for a succeeded operation
	err     error
}

// check reads the journal and the provider and checks every invariant.
func (h *harness) check(ctx context.Context) (Summary, error) {
	s := Summary{
		JournalKills: int(h.cluster.journalKills.Load()), ReconcilerKills: int(h.cluster.reconcilerKills.Load()),
		PoolDrops: int(h.poolDrops.Load()), Terminated: int(h.terminated.Load()), AgentRestarts: int(h.restarts.Load()),
		Calls: int(h.executes.Load()), ProviderCalls: int(h.providerCalls.Load()),
		UnknownOutcomes: int(h.unknownCalls.Load()), Settled: int(h.settledCount.Load()),
		ShippedPolicy: h.cfg.ShippedPolicy, Settle: h.settle, Agents: h.cfg.Agents, NoHeartbeatAgents: h.noHeartbeat,
		HeartbeatKept: int(h.heartbeatKept.Load()), GaveUp: int(h.gaveUpCalls.Load()), GaveUpNoHeartbeat: int(h.gaveUpNoHeartbeat.Load()),
		RetriesAfterRelease: int(h.afterRelease.Load()),
	}
	var err error
	if s.Faults, err = h.faults.counts(ctx); err != nil {
		return s, fmt.Errorf("soak: read the provider's faults: %w", err)
	}
	s.SlowLease15, s.SlowLease3 = s.Faults[FaultSlowLease15], s.Faults[FaultSlowLease3]
	rpc, done, err := h.rpc()
	if err != nil {
		return s, err
	}
	defer done()
	ops, err := listAll(ctx, rpc, &pb.ListOperationsRequest{})
	if err != nil {
		return s, fmt.Errorf("soak: list the journal's operations: %w", err)
	}
	var eff fakeprovider.EffectCounts
	if err := retry(ctx, func(ctx context.Context) (err error) { eff, err = h.control.Effects(ctx); return err }); err != nil {
		return s, fmt.Errorf("soak: read the provider's effects: %w", err)
	}
	s.Effects = eff.Total
	effects := map[string]int{} // effect key -> count, whatever the kind
	for k, n := range eff.Effects {
		_, key, _ := strings.Cut(k, ":")
		effects[key] += n
	}

	// Each operation's history, and the provider's records of each
	// succeeded one, fetched concurrently.
	facts := make([]opFacts, len(ops))
	idx := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range idx {
				f := &facts[i]
				f.op = ops[i]
				f.err = retry(ctx, func(ctx context.Context) error {
					r, err := rpc.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: f.op.GetOperationKey()})
					f.events = r.GetEvents()
					return err
				})
				if f.err == nil && f.op.GetStatus() == pb.Status_STATUS_SUCCEEDED {
					f.err = retry(ctx, func(ctx context.Context) error {
						k, err := h.control.Lookup(ctx, f.op.GetOperationKey())
						f.records = k.Records
						return err
					})
				}
			}
		})
	}
	for i := range ops {
		idx <- i
	}
	close(idx)
	wg.Wait()

	h.mu.Lock()
	violations := slices.Clone(h.violations)
	regKeys := h.regKeys
	gaveUpKeys := maps.Clone(h.gaveUpKeys)
	intents := h.intents
	s.JournalErrors = h.journalErrs
	h.mu.Unlock()
	violate := func(inv, key, format string, args ...any) {
		violations = append(violations, Violation{Invariant: inv, Key: key, Detail: fmt.Sprintf(format, args...)})
	}

	byKey := make(map[string]*pb.Operation, len(ops))
	hist := make(map[string]opHistory, len(ops))
	for _, f := range facts {
		op, key := f.op, f.op.GetOperationKey()
		byKey[key] = op
		if f.err != nil {
			return s, fmt.Errorf("soak: read %s: %w", key, f.err)
		}
		s.Operations++
		s.Attempts += int(op.GetAttemptCount())
		n := effects[key]
		if n > 1 {
			s.Duplicates++
			violate(InvDuplicate, key, "%d effects at the provider (journal: %s, external_id %q)", n, short(op.GetStatus()), op.GetExternalId())
		} else if op.GetDuplicateExternalId() != "" {
			s.Duplicates++
			violate(InvDuplicate, key, "the journal recorded a second effect %q after %q", op.GetDuplicateExternalId(), op.GetExternalId())
		}
		switch op.GetStatus() {
		case pb.Status_STATUS_SUCCEEDED:
			s.Succeeded++
			if n == 0 {
				violate(InvSucceededNoEffect, key, "succeeded with external_id %q, but the provider has no effect", op.GetExternalId())
			} else if !slices.ContainsFunc(f.records, func(r fakeprovider.Record) bool { return r.ID == op.GetExternalId() }) {
				violate(InvSucceededNoEffect, key, "succeeded with external_id %q, which is not the provider's effect for the key", op.GetExternalId())
			}
		case pb.Status_STATUS_FAILED_FINAL:
			s.FailedFinal++
			if n > 0 {
				violate(InvFailedWithEffect, key, "failed_final (%s), but the provider has %d effect(s)", op.GetErrorCode(), n)
			}
		default:
			if !op.GetNeedsReview() {
				violate(InvUnsettled, key, "%s after the settle phase (attempt %d, checks %d, error %q)",
					short(op.GetStatus()), op.GetAttemptCount(), op.GetCheckCount(), op.GetErrorCode())
			}
		}
		if op.GetNeedsReview() {
			s.NeedsReview++
			s.Review = append(s.Review, fmt.Sprintf("%s (%s, %d effect(s)): %s", key, short(op.GetStatus()), n, op.GetReviewReason()))
		}
		hist[key] = h.history(&s, key, f.events, violate)
	}
	for key := range gaveUpKeys {
		s.GaveUpOps++
		if hist[key].reconciled {
			s.GaveUpReconciled++
		}
		if hist[key].released {
			s.GaveUpReleased++
		}
	}

	// 2: every key an agent got a journal answer for is in the journal.
	for key := range regKeys {
		if byKey[key] != nil {
			continue
		}
		s.Lost++
		detail := "an agent got a journal answer for it, and it is not in the journal"
		if _, err := rpc.Lookup(ctx, &pb.LookupRequest{OperationKey: key}); err == nil {
			detail = "missing from ListOperations, though Lookup finds it"
		}
		violate(InvLost, key, "%s", detail)
	}
	// Effects for keys the journal does not know: a call without a journal entry.
	for _, key := range sortedKeys(effects) {
		if byKey[key] == nil {
			violate(InvStrayEffect, key, "%d effect(s) at the provider, no operation in the journal", effects[key])
		}
	}
	// Every intent settled, and no agent was told something the journal
	// does not keep.
	s.Intents = len(intents)
	for _, st := range intents {
		op := byKey[st.key]
		if st.large {
			s.LargeIntents++
			if op != nil {
				hs := hist[st.key]
				s.LargeUnknown += b2i(hs.unknown)
				s.LargeReconciled += b2i(hs.reconciled)
				s.LargeReleased += b2i(hs.released)
				if err := h.checkLargePayload(ctx, rpc, st); err != "" {
					violate(InvPayload, st.key, "%s", err)
				}
			}
		}
		st.mu.Lock()
		settled, observed := st.settled, slices.Clone(st.observed)
		st.mu.Unlock()
		if op == nil {
			if !settled {
				violate(InvUnsettled, st.key, "the intent never reached the journal before the settle deadline")
			}
			continue
		}
		for _, o := range observed {
			switch o.kind {
			case client.Succeeded:
				if op.GetStatus() != pb.Status_STATUS_SUCCEEDED || op.GetExternalId() != o.externalID {
					violate(InvContradiction, st.key, "%s was told succeeded (%q); the journal has %s (%q)", o.agent, o.externalID, short(op.GetStatus()), op.GetExternalId())
				}
			case client.FailedFinal:
				if op.GetStatus() != pb.Status_STATUS_FAILED_FINAL {
					violate(InvContradiction, st.key, "%s was told failed_final; the journal has %s", o.agent, short(op.GetStatus()))
				}
			}
		}
	}
	slices.SortStableFunc(violations, func(a, b Violation) int { return strings.Compare(a.Invariant, b.Invariant) })
	s.Violations = violations
	slices.Sort(s.Review)
	s.Elapsed = time.Since(h.start)
	return s, nil
}

// opHistory is what an operation's history went through.
type opHistory struct {
	unknown, reconciled, released bool
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkLargePayload reads a large-payload intent's operation in full and
// compares its attachment with the one the seed gives: "" if it matches.
func (h *harness) checkLargePayload(ctx context.Context, rpc pb.JournalServiceClient, st *intentState) string {
	var op *pb.Operation
	err := retry(ctx, func(ctx context.Context) error {
		r, err := rpc.Lookup(ctx, &pb.LookupRequest{OperationKey: st.key, View: pb.OperationView_OPERATION_VIEW_FULL})
		op = r.GetOperation()
		return err
	})
	if err != nil {
		return "lookup: " + err.Error()
	}
	got := op.GetPayload().GetFields()["attachment"].GetStringValue()
	if want := largeMember(h.cfg.Seed, st.n); got != want {
		return fmt.Sprintf("the journal's payload has an attachment of %d bytes that is not the one sent (%d bytes)", len(got), len(want))
	}
	return ""
}

// history counts an operation's events and checks that it never leaves a
// terminal state and never skips a step.
func (h *harness) history(s *Summary, key string, evs []*pb.Event, violate func(inv, key, format string, args ...any)) opHistory {
	var oh opHistory
	unknown := false
	for i, e := range evs {
		from, to := e.GetFromStatus(), e.GetToStatus()
		unknown = unknown || from == pb.Status_STATUS_UNKNOWN || to == pb.Status_STATUS_UNKNOWN
		reason := e.GetReason()
		switch {
		case strings.HasPrefix(reason, "released for retry"):
			s.Released++
			oh.released = true
		case strings.HasPrefix(reason, "checked:"):
			s.Rechecked++
		case strings.HasPrefix(reason, "escalated:"):
			s.Escalated++
		case strings.HasPrefix(reason, "resolved by operator"):
			s.Resolved++
		}
		if to == pb.Status_STATUS_SUCCEEDED && from != pb.Status_STATUS_SUCCEEDED && strings.HasPrefix(e.GetActor(), "soak-reconciler-") {
			s.Reconciled++
			oh.reconciled = true
		}
		if i == 0 {
			continue
		}
		prev := evs[i-1].GetToStatus()
		if (prev == pb.Status_STATUS_SUCCEEDED || prev == pb.Status_STATUS_FAILED_FINAL) && to != prev {
			violate(InvHistory, key, "event %d moves from terminal %s to %s (%s by %s)", e.GetId(), short(prev), short(to), reason, e.GetActor())
		}
		// An expired lease reads as unknown without an event of its own.
		if from != prev && !(prev == pb.Status_STATUS_IN_PROGRESS && from == pb.Status_STATUS_UNKNOWN) {
			violate(InvHistory, key, "event %d starts from %s, the previous one ended in %s (%s by %s)", e.GetId(), short(from), short(prev), reason, e.GetActor())
		}
	}
	if unknown {
		s.UnknownOps++
	}
	oh.unknown = unknown
	return oh
}

// short is a status without its prefix, in lower case.
func short(st pb.Status) string { return strings.ToLower(strings.TrimPrefix(st.String(), "STATUS_")) }
