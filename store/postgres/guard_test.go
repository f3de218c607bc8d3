package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/storetest"
)

// TestGuardIsFirstMatch proves the rendered guards on real rows: for
// every row a random history of commands reaches, and every command drawn
// on it, the rendered guard of a rule holds exactly when Apply, reading
// the same row at the same database time, chooses that rule. So no
// concurrent commit can make an UPDATE apply a rule that Apply would not
// choose on the row as the UPDATE sees it (first match wins in SQL too).
func TestGuardIsFirstMatch(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.NewSchema(t)+"&opjournal_batch_workers=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var now atomic.Pointer[time.Time]
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(&base)
	s.SetClock(func() time.Time { return *now.Load() })
	probes := map[*protocol.Rule]*statement{}
	for r := range updates {
		probes[r] = renderProbe(r)
	}
	var run atomic.Int64
	checked := map[*protocol.Rule]int{}
	covered := func() bool {
		for r := range updates {
			if checked[r] == 0 {
				return false
			}
		}
		return true
	}
	// Rounds of rapid's 100 sequences until every rule was chosen at least
	// once (the rarest, a third distinct external id, takes a few rounds).
	for round := 0; round < 20 && !covered(); round++ {
		checkGuards(t, s, base, &now, &run, probes, checked)
	}
	for r := range updates {
		if checked[r] == 0 {
			t.Errorf("no drawn state chose %s %q: the test does not cover it", r.Command, r.Case)
		}
	}
}

func checkGuards(t *testing.T, s *Store, base time.Time, now *atomic.Pointer[time.Time], run *atomic.Int64,
	probes map[*protocol.Rule]*statement, checked map[*protocol.Rule]int) {
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		n := run.Add(1)
		tenant := fmt.Sprintf("guard-%d", n)
		at := base.Add(time.Duration(n) * 240 * time.Hour)
		now.Store(&at)
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			if rapid.IntRange(0, 3).Draw(rt, "advance?") == 0 {
				at = at.Add(time.Duration(rapid.IntRange(0, 40_000).Draw(rt, "ms")) * time.Millisecond)
				now.Store(&at)
			}
			_ = storetest.Call(s, tenant, storetest.DrawCommand(rt, "a"))
			sc, err := s.get(ctx, tenant, "a")
			if err != nil {
				continue // not registered yet
			}
			c := storetest.DrawCommand(rt, "a")
			if c.Kind == protocol.CmdRegister {
				continue
			}
			cmd := c
			var chosen *protocol.Rule
			if d, err := protocol.Apply(sc.op, cmd, sc.dbNow); err == nil {
				chosen = d.Rule
			}
			for _, r := range protocol.Rules(cmd.Kind) {
				st := probes[r]
				if st == nil {
					continue // a rule that changes nothing has no statement
				}
				var holds bool
				if err := s.pool.QueryRow(ctx, st.sql, st.args(s.clockArg(), tenant, cmd, sc.op)...).Scan(&holds); err != nil {
					rt.Fatalf("probe %s %q: %v", r.Command, r.Case, err)
				}
				if holds != (chosen == r) {
					rt.Fatalf("%s on %s (attempt %d, review %v): the guard of %q says %v, Apply chose %v",
						cmd.Kind, sc.op.Status, sc.op.AttemptCount, sc.op.NeedsReview, r.Case, holds, ruleCase(chosen))
				}
				if holds {
					checked[r]++
				}
			}
		}
	})
}

func ruleCase(r *protocol.Rule) string {
	if r == nil {
		return "a refusal"
	}
	return fmt.Sprintf("%q", r.Case)
}

// renderProbe renders the guard of rule's UPDATE as a SELECT of whether
// it holds on the row, with the UPDATE's parameters. The clock $1 is
// typed in the WHERE: a guard without conditions (SetNote's "true") does
// not name it, and PostgreSQL refuses a parameter whose type it cannot
// infer, which the UPDATE itself (it sets updated_at from $1) never meets.
func renderProbe(rule *protocol.Rule) *statement {
	r := newRenderer(false)
	g := r.guard(rule)
	return &statement{rule: rule, sql: `SELECT ` + g + ` FROM operations WHERE tenant = $2 AND operation_key = $3 AND ` + clock + ` IS NOT NULL`, params: r.params}
}

// TestDuplicateDuringAcknowledgeReachesAPerson is the history a
// linearizability check found: a third external id reported while an
// operator acknowledges the review of the second. MarkSucceeded read the
// row under review (so "another duplicate" applied, which sets no review),
// the acknowledge committed, then the UPDATE ran: the duplicate payment
// was recorded but never reached a person again. The stale read is
// replayed here exactly (execute with the row read before the
// acknowledge); the UPDATE's guard must send it back to read again.
func TestDuplicateDuringAcknowledgeReachesAPerson(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.NewSchema(t)+"&opjournal_batch_workers=0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const tenant = "race"
	steps := []*protocol.Command{
		{Kind: protocol.CmdRegister, Key: "k", Action: "pay", RequestHash: "p1", Payload: []byte(`{}`), Claim: true, WorkerID: "w5", LeaseSeconds: 30},
		{Kind: protocol.CmdMarkSucceeded, Key: "k", Attempt: 1, ExternalID: "x7"},
		{Kind: protocol.CmdMarkSucceeded, Key: "k", Attempt: 1, ExternalID: "x5"},
	}
	for _, c := range steps {
		if err := storetest.Call(s, tenant, c); err != nil {
			t.Fatalf("%s: %v", c.Kind, err)
		}
	}
	stale, err := s.get(ctx, tenant, "k")
	if err != nil || !stale.op.NeedsReview {
		t.Fatalf("after x5: %+v %v, want under review", stale.op, err)
	}
	if err := storetest.Call(s, tenant, &protocol.Command{Kind: protocol.CmdAcknowledge, Key: "k", Reason: "x5 refunded"}); err != nil {
		t.Fatal(err)
	}
	x12 := &protocol.Command{Kind: protocol.CmdMarkSucceeded, Key: "k", Attempt: 1, ExternalID: "x12"}
	ex, err := s.execute(ctx, tenant, x12, &stale)
	if err != nil {
		t.Fatal(err)
	}
	op := ex.sc.op
	if !op.NeedsReview || len(op.DuplicateExternalIDs) != 2 || op.DuplicateReports != 2 || ex.rule.Case != "duplicate effect" {
		t.Fatalf("after x12: needs_review %v, duplicates %v, reports %d, rule %q; want under review again with [x5 x12] by \"duplicate effect\"",
			op.NeedsReview, op.DuplicateExternalIDs, op.DuplicateReports, ex.rule.Case)
	}
}
