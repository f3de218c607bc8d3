package protocol

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
)

// TestDecideBudgetsProperties: on random counters, a budget fits exactly
// when used + amount <= limit; a reject budget that does not fit refuses
// and holds nothing; otherwise every budget is held, marked over the
// limit exactly where it did not fit, and those are the ones that ask a
// person; and the refusal's hint is the first moment the window's holds
// leave room.
func TestDecideBudgetsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(38, 1))
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for round := range 5000 {
		n := 1 + rng.IntN(3)
		charges := make([]BudgetCharge, n)
		usage := make([]opjournal.BudgetUsage, n)
		for i := range n {
			limit := 1 + rng.Int64N(100)
			window := time.Duration(1+rng.IntN(48)) * time.Hour
			charges[i] = BudgetCharge{Hold: opjournal.BudgetHold{Budget: string(rune('a' + i)), Scope: "{}", Amount: rng.Int64N(60)},
				Action: "pay", Limit: limit, Window: window, Approve: rng.IntN(2) == 0}
			var holds []opjournal.HeldAmount
			var used int64
			at := now.Add(-window)
			for range rng.IntN(5) {
				at = at.Add(time.Duration(1+rng.Int64N(int64(window)/6)) + time.Millisecond)
				if !at.Before(now) {
					break
				}
				h := opjournal.HeldAmount{At: at, Amount: rng.Int64N(40)}
				holds, used = append(holds, h), used+h.Amount
			}
			usage[i] = opjournal.BudgetUsage{Used: used, Holds: holds}
		}
		v := DecideBudgets(charges, usage, now)
		fits := func(i int) bool { return usage[i].Used+charges[i].Hold.Amount <= charges[i].Limit }
		firstReject := slices.IndexFunc(charges, func(c BudgetCharge) bool { return false })
		for i, c := range charges {
			if !fits(i) && !c.Approve {
				firstReject = i
				break
			}
		}
		if firstReject >= 0 {
			ch := charges[firstReject]
			if v.Refused == nil || v.Refused.Code != opjournal.CodeBudgetExceeded || v.Refused.Details["budget"] != ch.Hold.Budget || v.Holds != nil || v.AskApproval != nil {
				t.Fatalf("round %d: a reject budget did not fit: verdict %+v", round, v)
			}
			checkHint(t, round, ch, usage[firstReject], now, v.Refused)
			continue
		}
		if v.Refused != nil || len(v.Holds) != n {
			t.Fatalf("round %d: nothing refuses, verdict %+v", round, v)
		}
		var asked []string
		for i := range n {
			if v.Holds[i].OverLimit != !fits(i) || v.Holds[i].Amount != charges[i].Hold.Amount {
				t.Fatalf("round %d: hold %d %+v, fits %v", round, i, v.Holds[i], fits(i))
			}
			if !fits(i) {
				asked = append(asked, charges[i].Hold.Budget)
			}
		}
		if !slices.Equal(asked, v.AskApproval) {
			t.Fatalf("round %d: asked %v, want %v", round, v.AskApproval, asked)
		}
	}
}

// checkHint checks a refusal's retry hint against the holds: at the hint
// (whole seconds, rounded up) the amount fits, and one second earlier at
// least one hold it counted on had not yet left.
func checkHint(t *testing.T, round int, ch BudgetCharge, u opjournal.BudgetUsage, now time.Time, e *opjournal.Error) {
	t.Helper()
	usedAt := func(at time.Time) int64 {
		var sum int64
		for _, h := range u.Holds {
			if h.At.Add(ch.Window).After(at) {
				sum += h.Amount
			}
		}
		return sum
	}
	if ch.Hold.Amount > ch.Limit {
		if e.RetryAfter != 0 || e.Details["retry_after_seconds"] != "" {
			t.Fatalf("round %d: an amount over the limit got a hint %v", round, e.RetryAfter)
		}
		return
	}
	if e.RetryAfter < time.Second || e.RetryAfter%time.Second != 0 {
		t.Fatalf("round %d: hint %v", round, e.RetryAfter)
	}
	if at := now.Add(e.RetryAfter); usedAt(at)+ch.Hold.Amount > ch.Limit {
		t.Fatalf("round %d: at the hint (%v) %d is used, the amount %d still does not fit %d", round, e.RetryAfter, usedAt(at), ch.Hold.Amount, ch.Limit)
	}
	if e.RetryAfter > 2*time.Second {
		if at := now.Add(e.RetryAfter - 2*time.Second); usedAt(at)+ch.Hold.Amount <= ch.Limit {
			t.Fatalf("round %d: the hint %v is late: it fits 2s before", round, e.RetryAfter)
		}
	}
}

// TestBudgetVerdictPicksTheRule: the table takes the verdict: a refusal
// is BUDGET_EXCEEDED and changes nothing, a person asked creates the
// operation awaiting approval with the approval naming the budget (and
// never claims it), and fitting budgets create it with its holds.
func TestBudgetVerdictPicksTheRule(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ch := []BudgetCharge{{Hold: opjournal.BudgetHold{Budget: "daily", Scope: "{}", Amount: 7}, Action: "pay", Limit: 10, Window: time.Hour, Approve: true}}
	base := Command{Kind: CmdRegister, Key: "k", Action: "pay", RequestHash: "h", Claim: true, WorkerID: "w", LeaseSeconds: 30, Budgets: ch,
		BudgetApproval: &opjournal.Approval{Required: true, Approvers: []string{"operator"}, OnTimeout: opjournal.ApprovalTimeoutReject}, BudgetApprovalTimeout: time.Hour}

	c := base
	c.BudgetVerdict = DecideBudgets(ch, []opjournal.BudgetUsage{{Used: 3}}, now)
	d, err := Apply(nil, &c, now)
	if err != nil || d.Op.Status != opjournal.StatusInProgress || len(d.Op.Budgets) != 1 || d.Op.Budgets[0].OverLimit || d.Op.Approval != nil {
		t.Fatalf("fits: %+v %v", d.Op, err)
	}

	c = base
	c.BudgetVerdict = DecideBudgets(ch, []opjournal.BudgetUsage{{Used: 4}}, now)
	d, err = Apply(nil, &c, now)
	if err != nil || d.Op.Status != opjournal.StatusAwaitingApproval || !d.Op.Budgets[0].OverLimit ||
		d.Op.Approval == nil || d.Op.Approval.Rule != "budget" || !slices.Equal(d.Op.Approval.Budgets, []string{"daily"}) || !d.Op.Approval.Deadline.Equal(now.Add(time.Hour)) {
		t.Fatalf("over, approval: %+v %+v %v", d.Op, d.Op.Approval, err)
	}

	c = base
	c.Budgets[0].Approve = false
	c.BudgetVerdict = DecideBudgets(c.Budgets, []opjournal.BudgetUsage{{Used: 4, Holds: []opjournal.HeldAmount{{At: now.Add(-time.Minute), Amount: 4}}}}, now)
	_, err = Apply(nil, &c, now)
	if e, ok := err.(*opjournal.Error); !ok || e.Code != opjournal.CodeBudgetExceeded || e.RetryAfter != 59*time.Minute+time.Second {
		t.Fatalf("over, reject: %v", err)
	}
	// The key exists: a replay is answered whatever the verdict says.
	op := &opjournal.Operation{Key: "k", Action: "pay", RequestHash: "h", Status: opjournal.StatusSucceeded}
	if d, err := Apply(op, &c, now); err != nil || d.Rule.Outcome != Unchanged {
		t.Fatalf("replay: %+v %v", d, err)
	}
}
