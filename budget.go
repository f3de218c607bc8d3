package opjournal

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// BudgetHold is what one operation holds of one budget: the amount it
// reserved at registration in the budget's scope. It is recorded once,
// with the operation, and never changes; whether it still counts follows
// from the operation's state (protocol.HoldCounts): a definitive failure
// gives it back, and it stops counting once the budget's window has
// passed its registration.
type BudgetHold struct {
	// Budget is the budget's name in the action's policy.
	Budget string `json:"budget"`
	// Scope is the canonical JSON of the scope's values beyond the tenant
	// ({"currency":"EUR","principal":"agent-1"}); "{}" for the tenant as a
	// whole. Registrations with equal scopes share one counter.
	Scope string `json:"scope"`
	// Amount is what the operation adds: the summed member, or 1 for a
	// count.
	Amount int64 `json:"amount"`
	// OverLimit: the registration did not fit and the budget's on_exceed
	// asked a person (the operation was created awaiting approval). Such a
	// hold counts only once approved: a rejection gives back nothing it
	// never took.
	OverLimit bool `json:"over_limit,omitempty"`
}

// BudgetUsage is the state of one budget in one scope, as of the database
// clock.
type BudgetUsage struct {
	// Action, Budget and Scope name the counter (Action is the action
	// whose policy defines the budget; budgets of one name on several
	// actions share the counter).
	Action string
	Budget string
	Scope  string
	// Limit and Window are the policy's.
	Limit  int64
	Window time.Duration
	// Used is the sum of the holds that count within the window.
	Used int64
	// ReservedUnknown is the part of Used held by operations whose
	// outcome is not yet known (pending, in progress, unknown, awaiting
	// approval): it is given back if they fail finally.
	ReservedUnknown int64
	// Operations is how many operations hold the Used amount.
	Operations int64
	// Holds are the counted holds' registration times and amounts, oldest
	// first, when the reader asked for them (to compute when enough frees
	// up); nil otherwise.
	Holds []HeldAmount
}

// HeldAmount is one counted hold: when it was registered and how much.
type HeldAmount struct {
	At     time.Time
	Amount int64
}

// FreeAt is when a further amount fits the budget if nothing else changes:
// the earliest time at which the holds that have left the window leave
// Used + amount <= Limit. ok is false when the amount alone is over the
// limit (it never fits). Holds must be set, oldest first.
func (u *BudgetUsage) FreeAt(amount int64) (at time.Time, ok bool) {
	if amount > u.Limit {
		return time.Time{}, false
	}
	used := u.Used
	if used+amount <= u.Limit {
		return time.Time{}, true
	}
	for _, h := range u.Holds {
		used -= h.Amount
		if used+amount <= u.Limit {
			return h.At.Add(u.Window), true
		}
	}
	return time.Time{}, true // a hold of an unfinished read: nothing to wait for
}

// BudgetsJSON encodes an operation's holds as the stores keep them (nil
// for none).
func BudgetsJSON(holds []BudgetHold) json.RawMessage {
	if len(holds) == 0 {
		return nil
	}
	b, err := json.Marshal(holds)
	if err != nil {
		panic("opjournal: budgets: " + err.Error()) // strings, ints and bools: cannot fail
	}
	return b
}

// ParseBudgets reads holds as BudgetsJSON wrote them; empty input is nil.
func ParseBudgets(b []byte) ([]BudgetHold, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var holds []BudgetHold
	if err := json.Unmarshal(b, &holds); err != nil {
		return nil, err
	}
	return holds, nil
}

// cloneHolds copies holds (nil stays nil).
func cloneHolds(holds []BudgetHold) []BudgetHold { return slices.Clone(holds) }

// WindowWords words a budget's window as the policy writes it and every
// door says it ("24h", "7d", "30m"; "1m30s" when it is none of these),
// not as Go prints durations ("24h0m0s"); "window" for none. The
// journal's refusal, the model's text and the console use the same words.
func WindowWords(d time.Duration) string {
	switch {
	case d <= 0:
		return "window"
	case d%(24*time.Hour) == 0 && d > 48*time.Hour:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// UsePercent words used of limit as a whole percentage for people: "<1%"
// for a little (never "0%" then), ">99%" short of full, "-" without a
// limit.
func UsePercent(used, limit int64) string {
	if limit <= 0 {
		return "-"
	}
	f := float64(used) / float64(limit) * 100 // used*100 could overflow
	switch {
	case used > 0 && f < 1:
		return "<1%"
	case used < limit && f >= 99.5:
		return ">99%"
	}
	return strconv.FormatFloat(f, 'f', 0, 64) + "%"
}
