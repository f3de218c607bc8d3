package protocol

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/opjournal/opjournal"
)

// Budgets: a registration reserves its amount in every budget of its
// action, the way a bank holds an authorisation. The rules live here and
// in the table (Register's "new, over budget" and "new, awaiting
// approval"); the stores only read the window's use under a lock per
// counter and call DecideBudgets on it.

// BudgetCharge is one budget a new operation would hold, as the journal
// evaluates it on the request: the hold (name, scope, amount) and the
// policy's limit, window and on_exceed.
type BudgetCharge struct {
	// Hold is what the operation would hold (OverLimit unset).
	Hold opjournal.BudgetHold
	// Action is the action whose policy defines the budget (for the
	// metrics and the messages).
	Action string
	Limit  int64
	Window time.Duration
	// Approve: on_exceed is approval (a person may admit the operation
	// over the limit); otherwise it is reject.
	Approve bool
}

// BudgetVerdict is a store's decision on a new operation's budgets.
type BudgetVerdict struct {
	// Refused, if not nil, is the BUDGET_EXCEEDED refusal: a budget whose
	// on_exceed is reject would be passed.
	Refused *opjournal.Error
	// AskApproval names the budgets whose on_exceed is approval that would
	// be passed: the operation waits for a person.
	AskApproval []string
	// Holds are what the operation holds if it is registered (OverLimit
	// set on the budgets in AskApproval).
	Holds []opjournal.BudgetHold
}

// DecideBudgets decides a new operation's budgets on their use, read at
// now under the budgets' locks (usage[i] is charges[i]'s counter, with its
// Holds). A budget fits when Used + amount <= Limit. A budget that does
// not fit refuses the operation under on_exceed reject (the first such
// budget names the refusal, and nothing is held), and under approval asks
// a person and marks its hold OverLimit. It is pure.
func DecideBudgets(charges []BudgetCharge, usage []opjournal.BudgetUsage, now time.Time) BudgetVerdict {
	var v BudgetVerdict
	for i, ch := range charges {
		h := ch.Hold
		if usage[i].Used+h.Amount > ch.Limit {
			if !ch.Approve {
				return BudgetVerdict{Refused: budgetRefusal(ch, usage[i], now)}
			}
			h.OverLimit = true
			v.AskApproval = append(v.AskApproval, h.Budget)
		}
		v.Holds = append(v.Holds, h)
	}
	return v
}

// budgetRefusal is the BUDGET_EXCEEDED refusal of one budget: its name,
// limit, use and when enough frees up; never a payload value (the scope
// and the amount asked for stay out of it).
func budgetRefusal(ch BudgetCharge, u opjournal.BudgetUsage, now time.Time) *opjournal.Error {
	details := map[string]string{
		"budget": ch.Hold.Budget, "action": ch.Action,
		"limit": strconv.FormatInt(ch.Limit, 10), "used": strconv.FormatInt(u.Used, 10),
		"window_seconds": strconv.FormatInt(int64(ch.Window/time.Second), 10),
	}
	u.Limit, u.Window = ch.Limit, ch.Window
	at, fits := u.FreeAt(ch.Hold.Amount)
	msg := fmt.Sprintf("budget %q of %s: %d of its limit %d is used in the last %s, and this operation does not fit; it was not registered and nothing was called",
		ch.Hold.Budget, ch.Action, u.Used, ch.Limit, opjournal.WindowWords(ch.Window))
	var retry time.Duration
	switch {
	case !fits:
		msg = fmt.Sprintf("budget %q of %s: this operation alone is over its limit of %d per %s; it was not registered and nothing was called, and it never will be under this budget",
			ch.Hold.Budget, ch.Action, ch.Limit, opjournal.WindowWords(ch.Window))
	case !at.IsZero():
		retry = at.Sub(now)
		if retry < time.Second {
			retry = time.Second
		}
		retry = retry.Truncate(time.Second) + time.Second
		details["retry_after_seconds"] = strconv.FormatInt(int64(retry/time.Second), 10)
		msg += fmt.Sprintf("; enough frees up by %s (database clock, in %s) unless earlier operations fail", at.UTC().Format(time.RFC3339), retry)
	}
	return &opjournal.Error{Code: opjournal.CodeBudgetExceeded, Field: "", Message: msg, Details: details, RetryAfter: retry}
}

// refuseBudgetExceeded is the refusal of Register's "new, over budget":
// the verdict's.
var refuseBudgetExceeded = &RefusalSpec{Code: opjournal.CodeBudgetExceeded,
	Why: func(_ *opjournal.Operation, c *Command, _ time.Time) string {
		if c.BudgetVerdict.Refused == nil {
			return "a budget of the action would be passed"
		}
		return c.BudgetVerdict.Refused.Message
	},
	Details: func(c *Command) (map[string]string, time.Duration) {
		if r := c.BudgetVerdict.Refused; r != nil {
			return r.Details, r.RetryAfter
		}
		return nil, 0
	},
}

// approval is the approval a new operation records: the policy's, or the
// budgets' when only they ask, naming the budgets that asked.
func (c *Command) approval() *opjournal.Approval {
	asked := c.BudgetVerdict.AskApproval
	if len(asked) == 0 || (c.Approval == nil && c.BudgetApproval == nil) {
		return c.Approval
	}
	a := c.Approval.Clone()
	if a == nil {
		a = c.BudgetApproval.Clone()
		a.Rule = "budget"
	}
	a.Budgets = slices.Clone(asked)
	return a
}

// approvalTimeout is how long approval() stays open.
func (c *Command) approvalTimeout() time.Duration {
	if c.Approval == nil && len(c.BudgetVerdict.AskApproval) > 0 {
		return c.BudgetApprovalTimeout
	}
	return c.ApprovalTimeout
}

// The terms of a hold: whether an operation's reservation still stands.
var (
	// ReservationReleasedTerm holds for an operation whose holds are
	// given back: failed_final with no effect ever reported (a late
	// effect, MarkSucceeded after failed_final, counts it again: the
	// money may have moved).
	ReservationReleasedTerm = tAnd(tEq(statusColumn, tText(string(opjournal.StatusFailedFinal))), tEq(tColumn("duplicate_reports"), tInt(0)))
	// AwaitingApprovalTerm holds for an operation awaiting approval: its
	// OverLimit holds do not count yet.
	AwaitingApprovalTerm = tEq(statusColumn, tText(string(opjournal.StatusAwaitingApproval)))
)

// HoldCounts reports whether a hold of op counts in its budget's use
// (within the window, which the stores bound by the registration time):
// op's reservation is not released, and an OverLimit hold only once a
// person admitted it (op no longer awaits approval).
func HoldCounts(op *opjournal.Operation, h opjournal.BudgetHold) bool {
	if ReservationReleasedTerm.Holds(op, time.Time{}, nil) {
		return false
	}
	return !h.OverLimit || !AwaitingApprovalTerm.Holds(op, time.Time{}, nil)
}

// HoldCountsSQL renders HoldCounts in dialect d for a join of the
// operations (d's Table) with a store's holds, whose over-limit flag is
// the boolean column overLimit.
func HoldCountsSQL(d Dialect, overLimit string) string {
	return "NOT " + ReservationReleasedTerm.SQL(d) + " AND (" + d.IsFalse(overLimit) + " OR NOT (" + AwaitingApprovalTerm.SQL(d) + "))"
}

// UnresolvedTerm holds for an operation whose outcome is not yet known:
// its holds are "reserved by unknown" (they may still be given back).
var UnresolvedTerm = tIn(statusColumn, statusText(opjournal.StatusPending, opjournal.StatusInProgress,
	opjournal.StatusUnknown, opjournal.StatusAwaitingApproval)...)
