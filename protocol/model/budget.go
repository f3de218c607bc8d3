package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The budget counter: a sequential specification of one budget's counter
// in one scope, over every operation key that charges it, written from
// the budgets' contract (docs/policy.md, "Budgets"), not from
// protocol.DecideBudgets or protocol.HoldCounts:
//
//   - a Register of a new key is admitted if and only if what is used plus
//     its amount is at most the limit, where used is the sum of the
//     amounts of the operations admitted and not given back; otherwise it
//     is refused with BUDGET_EXCEEDED, naming the use, and nothing is
//     written;
//   - a Register of a key that exists (a replay) answers the operation as
//     it stands and reserves nothing; under another amount (another
//     request) it is PAYLOAD_MISMATCH;
//   - MarkFailedFinal of the current attempt of an operation in progress
//     makes it failed_final and gives its amount back;
//   - the window never passes within a history: the checker keeps it far
//     longer than a run, so the clock is not part of the state.
//
// Unlike the per-key model (Model), its state spans keys: the checker
// cannot partition a history by key, since every key meets the others in
// the counter.

// BudgetKind names a call of a budget history.
type BudgetKind string

// The calls a budget history holds.
const (
	// BudgetRegister is Register of an operation that charges the budget.
	BudgetRegister BudgetKind = "Register"
	// BudgetFail is MarkFailedFinal.
	BudgetFail BudgetKind = "MarkFailedFinal"
	// BudgetRead is ListBudgets, read for the counter's scope.
	BudgetRead BudgetKind = "ListBudgets"
)

// BudgetInput is one call on the budget.
type BudgetInput struct {
	Kind BudgetKind
	Key  string
	// Amount is what the Register's payload charges; another amount under
	// an existing key is another request.
	Amount  int64
	Claim   bool   // Register: with a claim
	Worker  string // Register with a claim
	Attempt int    // MarkFailedFinal
	// REST says the call went over REST rather than gRPC (for the report).
	REST bool
}

// BudgetOutput is one answer. Maybe says the outcome is open; Err is a
// refusal's code ("" for success).
type BudgetOutput struct {
	Maybe bool
	Err   string
	// Used is the counter's use: the one a BUDGET_EXCEEDED refusal names,
	// or the one BudgetRead reads.
	Used int64
	// BudgetRead: the part of Used held by operations whose outcome is
	// not known yet, and how many operations count.
	ReservedUnknown int64
	Operations      int64
	// Register.
	Created bool
	Claimed bool
	// Status is the operation's status in a Register's or a
	// MarkFailedFinal's answer.
	Status string
}

// BudgetModel is the counter's specification under a limit.
type BudgetModel struct {
	Limit int64
}

// BudgetOp is one operation registered under the budget.
type BudgetOp struct {
	Amount   int64
	Status   string
	Attempts int
}

// BudgetState is the operations registered under the budget, by key. It
// is never changed in place (Step returns a new one), so that a checker
// may keep the states it has seen.
type BudgetState struct {
	ops map[string]BudgetOp
}

// Op returns the operation under key.
func (s BudgetState) Op(key string) (BudgetOp, bool) {
	op, ok := s.ops[key]
	return op, ok
}

// counts reports whether op's amount is held: admitted and not given
// back (every registered operation was admitted; only failed_final gives
// back, as no late effect is ever reported in a budget history).
func (op BudgetOp) counts() bool { return op.Status != FailedFinal }

// Used is the sum of the amounts held.
func (s BudgetState) Used() int64 {
	var n int64
	for _, op := range s.ops {
		if op.counts() {
			n += op.Amount
		}
	}
	return n
}

// Equal reports whether s and o hold the same operations.
func (s BudgetState) Equal(o BudgetState) bool { return maps.Equal(s.ops, o.ops) }

// Hash is a hash of s that Equal states share.
func (s BudgetState) Hash() uint64 {
	var h uint64
	for k, op := range s.ops {
		var e uint64 = 14695981039346656037 // FNV-1a of the entry; the entries are summed, so their order does not matter
		for _, b := range []byte(k + "\x00" + op.Status) {
			e = (e ^ uint64(b)) * 1099511628211
		}
		h += e ^ uint64(op.Amount)*0x9e3779b97f4a7c15 ^ uint64(op.Attempts)
	}
	return h
}

// String describes s: the use and every operation, by key.
func (s BudgetState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "used %d:", s.Used())
	for _, k := range slices.Sorted(maps.Keys(s.ops)) {
		op := s.ops[k]
		fmt.Fprintf(&b, " %s=%d/%s", k, op.Amount, op.Status)
	}
	return b.String()
}

// with is s with key's operation op.
func (s BudgetState) with(key string, op BudgetOp) BudgetState {
	n := make(map[string]BudgetOp, len(s.ops)+1)
	maps.Copy(n, s.ops)
	n[key] = op
	return BudgetState{ops: n}
}

// Step applies in to s: the answer the contract gives and the next state.
func (m *BudgetModel) Step(s BudgetState, in BudgetInput) (BudgetOutput, BudgetState) {
	refuse := func(code string) (BudgetOutput, BudgetState) { return BudgetOutput{Err: code}, s }
	op, exists := s.ops[in.Key]
	switch in.Kind {
	case BudgetRegister:
		if !exists {
			if used := s.Used(); used+in.Amount > m.Limit {
				return BudgetOutput{Err: "BUDGET_EXCEEDED", Used: used}, s
			}
			n := BudgetOp{Amount: in.Amount, Status: Pending}
			if in.Claim {
				n.Status, n.Attempts = InProgress, 1
			}
			return BudgetOutput{Created: true, Claimed: in.Claim, Status: n.Status}, s.with(in.Key, n)
		}
		if op.Amount != in.Amount {
			return refuse("PAYLOAD_MISMATCH")
		}
		if in.Claim && op.Status == Pending { // a replay with a claim claims what waits for one
			op.Status, op.Attempts = InProgress, op.Attempts+1
			return BudgetOutput{Claimed: true, Status: op.Status}, s.with(in.Key, op)
		}
		return BudgetOutput{Status: op.Status}, s
	case BudgetFail:
		switch {
		case in.Attempt < 1:
			return refuse("INVALID_ARGUMENT")
		case !exists:
			return refuse("NOT_FOUND")
		case in.Attempt > op.Attempts:
			return refuse("INVALID_ARGUMENT")
		case in.Attempt != op.Attempts, op.Status != InProgress:
			return refuse("STALE_ATTEMPT")
		}
		op.Status = FailedFinal
		return BudgetOutput{Status: op.Status}, s.with(in.Key, op)
	case BudgetRead:
		out := BudgetOutput{}
		for _, op := range s.ops {
			if op.counts() {
				out.Used += op.Amount
				out.Operations++
				if op.Status == Pending || op.Status == InProgress {
					out.ReservedUnknown += op.Amount
				}
			}
		}
		return out, s
	}
	panic("model: unknown budget call " + string(in.Kind))
}

// DescribeBudget is one budget call and its answer in words, for a failed
// check.
func DescribeBudget(in BudgetInput, out BudgetOutput) string {
	var b strings.Builder
	via := "grpc"
	if in.REST {
		via = "rest"
	}
	switch in.Kind {
	case BudgetRegister:
		fmt.Fprintf(&b, "Register %s amount=%d claim=%v", in.Key, in.Amount, in.Claim)
	case BudgetFail:
		fmt.Fprintf(&b, "MarkFailedFinal %s attempt=%d", in.Key, in.Attempt)
	default:
		b.WriteString(string(in.Kind))
	}
	fmt.Fprintf(&b, " (%s) → ", via)
	switch {
	case out.Maybe:
		b.WriteString("maybe (outcome open)")
	case out.Err == "BUDGET_EXCEEDED":
		fmt.Fprintf(&b, "BUDGET_EXCEEDED used=%d", out.Used)
	case out.Err != "":
		b.WriteString(out.Err)
	case in.Kind == BudgetRead:
		fmt.Fprintf(&b, "used=%d reserved_unknown=%d operations=%d", out.Used, out.ReservedUnknown, out.Operations)
	case in.Kind == BudgetRegister:
		fmt.Fprintf(&b, "%s created=%v claimed=%v", out.Status, out.Created, out.Claimed)
	default:
		b.WriteString(out.Status)
	}
	return b.String()
}
