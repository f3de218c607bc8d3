package failover

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// Summary is what one run of one mode found.
type Summary struct {
	// Mode is the replication mode.
	Mode Mode
	// Manager is who failed over.
	Manager Manager
	// Elapsed is the whole run.
	Elapsed time.Duration
	// Failovers are the failovers performed, in order.
	Failovers []FailoverReport
	// Intents were started by the agents; Settled of them ended (terminal
	// or under review) as the agents saw it.
	Intents, Settled int
	// Acknowledged keys are in the ledger at the end; Found of them are in
	// the journal in the acknowledged state or later, Missing are not in
	// the journal, Regressed are in an earlier state.
	Acknowledged, Found, Missing, Regressed int
	// Calls counts the agents' journal calls; Unavailable of them were
	// answered UNAVAILABLE (in failover windows or not).
	Calls, Unavailable int
	// OtherErrors counts answers with another error outside the failover
	// windows, by "Method CODE".
	OtherErrors map[string]int
	// WrongAnswers are answers that contradict an earlier acknowledged one
	// (created twice, NOT_FOUND, an earlier state).
	WrongAnswers []string
	// NotRecorded counts Executes whose provider call ran but whose outcome
	// the journal could not record (the SDK's *NotRecordedError), and
	// ExecuteUnavailable those that failed UNAVAILABLE before any call:
	// both unknown to the agent, which retried the same key.
	NotRecorded, ExecuteUnavailable int
	// Effects is the provider's effect count; Duplicates the keys with
	// more than one (DuplicateKeys); Stray the keys with an effect that
	// are not in the journal.
	Effects, Duplicates int
	DuplicateKeys       []string
	Stray               int
	// Lost are the acknowledged operations a failover lost, and what
	// became of each.
	Lost []LostReport
	// LostByFate counts the lost operations by what was acknowledged, what
	// was found and what became of them.
	LostByFate map[string]int
	// Straddled counts the async intents claimed before a stall and
	// completed after it; StraddledCaught those the reconciler marked
	// succeeded, with exactly one effect.
	Straddled, StraddledCaught int
	// JournalRestarts counts journal replicas that exited or whose PID
	// changed (the harness never restarts them; must be 0).
	JournalRestarts int
	// Unsettled counts acknowledged operations neither terminal nor under
	// review at the end.
	Unsettled int
	// Violations are the failed checks of this mode; none means PASS.
	Violations []string
}

// Passed reports whether every check of the mode held.
func (s Summary) Passed() bool { return len(s.Violations) == 0 }

// FailoverReport is one failover.
type FailoverReport struct {
	// N numbers the failovers of the run from 1; From was the primary
	// killed, To the standby promoted.
	N        int
	From, To string
	// StandbyAtKill is the standby's state/sync_state at the kill
	// (Patroni: "sync NODE", the synchronous standby, or "async").
	StandbyAtKill string
	// Scenario (ManagerPatroni) is the fault; Note what it observed
	// besides the figures (pause-etcd: whether the leader demoted itself).
	Scenario, Note string
	// Promotions (ManagerPatroni) counts the timeline changes the fault
	// caused; LongestGap is the longest time a journal replica's probe
	// went without a successful write from the fault until the cluster
	// was whole again, and GapBound its bound from the manager's settings.
	Promotions           int
	LongestGap, GapBound time.Duration
	// Kill is when the primary was killed; the durations count from it:
	// Promoted (the promotion done), FirstAgentOK (the first agent call
	// answered OK), Recovered (both journal replicas answered a write).
	Kill                              time.Time
	Promoted, FirstAgentOK, Recovered time.Duration
	// Rebuilt is how long the old primary took to stream again as the
	// standby (and be sync, in sync mode).
	Rebuilt time.Duration
	// Unavailable counts agents' calls answered UNAVAILABLE from the kill
	// until Recovered; Other the other errors meanwhile; Wrong the wrong
	// answers.
	Unavailable int
	Other       map[string]int
	Wrong       int
	// The ledger check right after the recovery.
	Acked, Found, Missing, Regressed int
}

// LostReport is one acknowledged operation a failover lost.
type LostReport struct {
	// Key is the operation key; Failover the failover after which it was
	// found missing or regressed (0: only at the end).
	Key      string
	Failover int
	// Acked is the state acknowledged before; FoundAfter what the check
	// found; Final the state at the end ("missing" if none).
	Acked, FoundAfter, Final string
	// Effects at the provider for the key.
	Effects int
	// Fate says how the journal got it back: by the agent's retry
	// (registered again), by the reconciler asking the provider by key,
	// or not at all.
	Fate string
	// Straddled: one of the intents the harness claimed before the stall
	// and completed after it (async), so that its succeeded record is lost.
	Straddled bool
}

// summarize runs the final checks.
func (h *harness) summarize(ctx context.Context) Summary {
	s := Summary{Mode: h.cfg.Mode, Manager: h.cfg.Manager, OtherErrors: map[string]int{}}
	final := h.checkLedger(ctx, 0)
	s.Acknowledged, s.Found, s.Missing, s.Regressed = final.acked, final.found, final.missing, final.regressed
	s.Intents, s.Settled = int(h.intents.Load()), int(h.settled.Load())
	s.Calls, s.Unavailable = int(h.calls.Load()), int(h.unavailable.Load())
	s.NotRecorded, s.ExecuteUnavailable = int(h.notRecorded.Load()), int(h.executeUnavailable.Load())

	h.mu.Lock()
	maps.Copy(s.OtherErrors, h.otherCalls)
	s.WrongAnswers = slices.Clone(h.wrongs)
	violations := slices.Clone(h.violations)
	lost := maps.Clone(h.lost)
	for _, f := range h.failovers {
		r := FailoverReport{N: f.n, From: f.from, To: f.to, StandbyAtKill: f.standbyBefore, Kill: f.kill,
			Promoted: f.promoted.Sub(f.kill), Recovered: f.recovered.Sub(f.kill), Rebuilt: f.rebuilt,
			Unavailable: int(f.unavailable.Load()), Other: maps.Clone(f.other), Wrong: f.wrong,
			Acked: f.check.acked, Found: f.check.found, Missing: f.check.missing, Regressed: f.check.regressed,
			Scenario: f.scenario, Note: f.note, Promotions: f.timelines, LongestGap: f.gap, GapBound: f.gapBound}
		if !f.firstAgentOK.IsZero() {
			r.FirstAgentOK = f.firstAgentOK.Sub(f.kill)
		}
		s.Failovers = append(s.Failovers, r)
	}
	h.mu.Unlock()

	effects, err := h.effectsByKey(ctx)
	if err != nil {
		violations = append(violations, err.Error())
	}
	acks := h.ledger.snapshot()
	var effectKeys []string
	for key, n := range effects {
		s.Effects += n
		effectKeys = append(effectKeys, key)
		if n > 1 {
			s.Duplicates++
			s.DuplicateKeys = append(s.DuplicateKeys, fmt.Sprintf("%s (%d effects)", key, n))
		}
	}
	slices.Sort(s.DuplicateKeys)
	for key, f := range h.lookupAll(ctx, effectKeys) {
		if _, ok := acks[key]; !ok || f.missing {
			s.Stray++ // an effect the journal has no record of
		}
	}
	s.Unsettled = final.unsettled
	lostKeys := slices.Sorted(maps.Keys(lost))
	finals := h.lookupAll(ctx, lostKeys)
	s.LostByFate = map[string]int{}
	for _, key := range lostKeys {
		l := lost[key]
		f := finals[key]
		r := LostReport{Key: key, Failover: l.failover, Acked: l.acked.String(), FoundAfter: l.found, Effects: effects[key], Final: "missing"}
		if !f.missing && f.err == nil {
			r.Final = f.st.String()
		}
		r.Fate = h.fate(ctx, key, !f.missing && f.err == nil, f.st)
		r.Straddled = h.straddled(key)
		s.LostByFate[fmt.Sprintf("acknowledged %s, found %s, %d effect(s): %s", l.acked.status.String()[7:], foundKind(l.found), r.Effects, r.Fate)]++
		s.Lost = append(s.Lost, r)
	}
	for _, l := range s.Lost {
		if !l.Straddled {
			continue
		}
		s.Straddled++
		if strings.HasPrefix(l.Final, "succeeded") && l.Effects == 1 && strings.Contains(l.Fate, "reconciler") {
			s.StraddledCaught++
		} else {
			violations = append(violations, fmt.Sprintf("%s: its lost succeeded record was not restored by the reconciler with one effect (at the end %s, %d effect(s): %s)",
				l.Key, l.Final, l.Effects, l.Fate))
		}
	}
	h.mu.Lock()
	straddleEvents := h.straddleEvents
	h.mu.Unlock()
	if h.cfg.Mode == Async && s.Straddled < straddleEvents*straddlesPerFailover {
		violations = append(violations, fmt.Sprintf("%d of %d succeeded records meant to be lost were lost: the proof that the reconciler restores them is short",
			s.Straddled, straddleEvents*straddlesPerFailover))
	}
	for _, f := range s.Failovers {
		if f.GapBound > 0 && f.LongestGap > f.GapBound {
			violations = append(violations, fmt.Sprintf("failover %d (%s): writes stopped for %s, beyond the bound %s (ttl + loop_wait + retry_timeout + the journal's statement and connect timeouts)",
				f.N, f.Scenario, f.LongestGap.Round(time.Millisecond), f.GapBound.Round(time.Millisecond)))
		}
	}
	for i, j := range h.journals {
		if j.Exited() || j.Pid() != h.journalPIDs[i] {
			s.JournalRestarts++
		}
	}

	// The checks.
	if s.Duplicates > 0 {
		violations = append(violations, fmt.Sprintf("%d key(s) with more than one effect at the provider: %s", s.Duplicates, strings.Join(s.DuplicateKeys, ", ")))
	}
	if s.JournalRestarts > 0 {
		violations = append(violations, fmt.Sprintf("%d journal replica(s) exited or were restarted; they must recover on their own", s.JournalRestarts))
	}
	if h.cfg.Mode == Sync {
		lostN := 0
		for _, f := range s.Failovers {
			lostN += f.Missing + f.Regressed
			if n := total(f.Other); n > 0 {
				violations = append(violations, fmt.Sprintf("failover %d: %d call(s) answered with an error other than UNAVAILABLE: %v", f.N, n, f.Other))
			}
		}
		if lostN+s.Missing+s.Regressed > 0 {
			violations = append(violations, fmt.Sprintf("synchronous replication lost acknowledged operations: %d after the failovers, %d missing and %d regressed at the end",
				lostN, s.Missing, s.Regressed))
		}
		if len(s.WrongAnswers) > 0 {
			violations = append(violations, fmt.Sprintf("%d wrong answer(s), e.g. %s", len(s.WrongAnswers), s.WrongAnswers[0]))
		}
		if n := total(s.OtherErrors); n > 0 {
			violations = append(violations, fmt.Sprintf("%d call(s) outside the failovers answered with an error other than UNAVAILABLE: %v", n, s.OtherErrors))
		}
		if s.Stray > 0 {
			violations = append(violations, fmt.Sprintf("%d effect key(s) the journal does not know", s.Stray))
		}
	}
	if s.Unsettled > 0 && h.cfg.Mode == Sync {
		violations = append(violations, fmt.Sprintf("%d acknowledged operation(s) not settled at the end", s.Unsettled))
	}
	if len(s.Failovers) < h.cfg.Failovers {
		violations = append(violations, fmt.Sprintf("%d failover(s) performed, %d planned", len(s.Failovers), h.cfg.Failovers))
	}
	s.Violations = violations
	s.Elapsed = time.Since(h.start)
	return s
}

// fate says how a lost operation came back, from its history: who
// recorded its terminal state, and whether it was registered anew.
func (h *harness) fate(ctx context.Context, key string, found bool, st state) string {
	if !found {
		return "not in the journal at the end: the agent had its answer and did not retry, and no reconciler knows the key"
	}
	var parts []string
	if h.ledger.createdCount(key) > 1 {
		parts = append(parts, "registered anew by the agent's retry")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := h.checker.ListEvents(cctx, &pb.ListEventsRequest{OperationKey: key, PageSize: 1000})
	if err == nil {
		for _, e := range resp.GetEvents() {
			if to := e.GetToStatus(); to == pb.Status_STATUS_SUCCEEDED || to == pb.Status_STATUS_FAILED_FINAL {
				who := "the agent"
				if e.GetActor() == reconcilerID {
					who = "the reconciler (it asked the provider by key)"
				}
				parts = append(parts, fmt.Sprintf("%s by %s", strings.ToLower(strings.TrimPrefix(to.String(), "STATUS_")), who))
			}
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "still "+st.status.String()[7:])
	}
	return strings.Join(parts, "; ")
}

// Write prints the report.
func (s Summary) Write(w io.Writer) {
	if s.Manager == ManagerPatroni {
		fmt.Fprintf(w, "\n=== failover report: %s replication, Patroni %s with etcd (v2 API) (%s) ===\n", s.Mode, patroniVersion(), s.Elapsed.Round(time.Second))
		s.writePatroni(w)
	} else {
		fmt.Fprintf(w, "\n=== failover report: %s replication (%s) ===\n", s.Mode, s.Elapsed.Round(time.Second))
		s.writeHarness(w)
	}
	s.writeTotals(w)
}

// writeHarness prints the harness's failovers, one line each.
func (s Summary) writeHarness(w io.Writer) {
	fmt.Fprintf(w, "%-3s %-15s %-13s %-9s %-10s %-10s %-9s %-6s %-6s %-7s %-7s %-7s %-9s %s\n",
		"#", "primary→new", "standby@kill", "promoted", "1st agent", "recovered", "rebuilt", "unavl", "other", "wrong", "acked", "found", "missing", "regressed")
	for _, f := range s.Failovers {
		fmt.Fprintf(w, "%-3d %-15s %-13s %-9s %-10s %-10s %-9s %-6d %-6d %-7d %-7d %-7d %-9d %d\n",
			f.N, strings.TrimPrefix(f.From, "node-")+"→"+strings.TrimPrefix(f.To, "node-"), f.StandbyAtKill,
			ms(f.Promoted), ms(f.FirstAgentOK), ms(f.Recovered), ms(f.Rebuilt), f.Unavailable, total(f.Other), f.Wrong,
			f.Acked, f.Found, f.Missing, f.Regressed)
		if len(f.Other) > 0 {
			fmt.Fprintf(w, "    other errors: %v\n", f.Other)
		}
	}
}

// writeTotals prints the run's totals and the verdict.
func (s Summary) writeTotals(w io.Writer) {
	fmt.Fprintf(w, "intents %d (settled as the agents saw it: %d)\n", s.Intents, s.Settled)
	fmt.Fprintf(w, "acknowledged operations %d: found %d, missing %d, regressed %d (at the end; lost after a failover: %d)\n",
		s.Acknowledged, s.Found, s.Missing, s.Regressed, len(s.Lost))
	wrongName := "wrong answers"
	if s.Mode == Async {
		wrongName = "answers contradicting an acknowledged state (the lost writes' consequence)"
	}
	fmt.Fprintf(w, "journal calls %d: UNAVAILABLE %d; other errors outside failovers %v; %s %d\n",
		s.Calls, s.Unavailable, s.OtherErrors, wrongName, len(s.WrongAnswers))
	fmt.Fprintf(w, "SDK: %d Executes ended UNAVAILABLE before any provider call, %d with the outcome not recorded (NotRecordedError); each treated as unknown and retried with the same key\n",
		s.ExecuteUnavailable, s.NotRecorded)
	fmt.Fprintf(w, "provider effects %d; duplicates %d; effect keys the journal does not know %d\n", s.Effects, s.Duplicates, s.Stray)
	fmt.Fprintf(w, "journal replicas restarted: %d; unsettled at the end: %d\n", s.JournalRestarts, s.Unsettled)
	for i, wa := range s.WrongAnswers {
		if i == 10 {
			fmt.Fprintf(w, "  … %d more\n", len(s.WrongAnswers)-10)
			break
		}
		fmt.Fprintf(w, "  %s\n", wa)
	}
	if len(s.Lost) > 0 {
		fmt.Fprintf(w, "lost acknowledged operations: %d, by fate:\n", len(s.Lost))
		for _, k := range slices.Sorted(maps.Keys(s.LostByFate)) {
			fmt.Fprintf(w, "  %5d  %s\n", s.LostByFate[k], k)
		}
		shown := 0
		for _, l := range s.Lost {
			if !l.Straddled && shown >= 5 {
				continue
			}
			if !l.Straddled {
				shown++
			}
			tag := ""
			if l.Straddled {
				tag = " [claimed before the stall, marked after it]"
			}
			fmt.Fprintf(w, "  e.g. %s%s: failover %d, acknowledged %s, found %s; at the end %s, %d effect(s): %s\n",
				l.Key, tag, l.Failover, l.Acked, l.FoundAfter, l.Final, l.Effects, l.Fate)
		}
	}
	if s.Straddled > 0 {
		fmt.Fprintf(w, "succeeded records lost on purpose (claim replicated, MarkSucceeded not): %d; settled succeeded by the reconciler with one effect: %d\n",
			s.Straddled, s.StraddledCaught)
	}
	if s.Passed() {
		fmt.Fprintf(w, "PASS (%s)\n", s.Mode)
		return
	}
	for _, v := range s.Violations {
		fmt.Fprintf(w, "VIOLATION: %s\n", v)
	}
	fmt.Fprintf(w, "FAIL (%s)\n", s.Mode)
}

// writePatroni prints the Patroni scenarios, one line each.
func (s Summary) writePatroni(w io.Writer) {
	fmt.Fprintf(w, "%-3s %-16s %-13s %-17s %-10s %-10s %-10s %-10s %-10s %-6s %-6s %-6s %-7s %-7s %s\n",
		"#", "scenario", "leader→new", "standby@fault", "promotions", "promoted", "recovered", "gap", "bound", "unavl", "other", "wrong", "acked", "lost", "whole")
	for _, f := range s.Failovers {
		fmt.Fprintf(w, "%-3d %-16s %-13s %-17s %-10d %-10s %-10s %-10s %-10s %-6d %-6d %-6d %-7d %-7d %s\n",
			f.N, f.Scenario, strings.TrimPrefix(f.From, "node-")+"→"+strings.TrimPrefix(f.To, "node-"), f.StandbyAtKill, f.Promotions,
			ms(f.Promoted), ms(f.Recovered), ms(f.LongestGap), ms(f.GapBound), f.Unavailable, total(f.Other), f.Wrong, f.Acked, f.Missing+f.Regressed, ms(f.Rebuilt))
		if f.Note != "" {
			fmt.Fprintf(w, "    %s\n", f.Note)
		}
		if len(f.Other) > 0 {
			fmt.Fprintf(w, "    other errors: %v\n", f.Other)
		}
	}
}

// foundKind names what a check found, without the attempt.
func foundKind(f string) string {
	kind, _, _ := strings.Cut(f, "/")
	return kind
}

func ms(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
