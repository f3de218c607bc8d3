package journal

import (
	"context"
	"fmt"
	"slices"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store"
)

// budgetCharges evaluates the action's budgets on a registration: what a
// new operation would hold of each (its amount and scope), with the
// policy's limit, window and on_exceed, and the approval to ask when an
// on_exceed: approval budget does not fit. The store decides on them
// (protocol.DecideBudgets) under the counters' locks; a replay or a
// conflict never gets that far. An amount the payload does not carry is
// INVALID_ARGUMENT (naming the member, never a value).
func budgetCharges(c *protocol.Command, act *policy.Action, canonical []byte, caller Caller, stated string) error {
	if len(act.Budgets) == 0 {
		return nil
	}
	principal, _ := caller.who(stated)
	asks := false
	for _, b := range act.Budgets {
		amount, err := b.Amount(canonical)
		if err != nil {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "payload", "%s", budgetProblem(err))
		}
		scope, err := b.Scope(principal, act.Name, canonical, c.Refs)
		if err != nil {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "payload", "%s", budgetProblem(err))
		}
		approve := b.OnExceed == policy.BudgetExceedApproval
		asks = asks || approve
		c.Budgets = append(c.Budgets, protocol.BudgetCharge{
			Hold:   opjournal.BudgetHold{Budget: b.Name, Scope: scope, Amount: amount},
			Action: act.Name, Limit: b.Limit, Window: b.Window, Approve: approve,
		})
	}
	if asks {
		ap := act.BudgetApproval()
		label := ""
		if caller.Principal != "" {
			label = caller.Label
		}
		c.BudgetApproval = &opjournal.Approval{
			Required: true, Approvers: slices.Clone(ap.Approvers), DistinctFromRequester: ap.DistinctFor(caller.Principal != ""),
			TwoPerson: ap.TwoPerson, RequestedBy: principal, RequestedByLabel: label, OnTimeout: ap.OnTimeout,
		}
		c.BudgetApprovalTimeout = ap.Timeout
	}
	return nil
}

// budgetProblem words an amount or scope error for the caller: the
// policy's words (the member and the budget), without the class prefix.
func budgetProblem(err error) string {
	msg := err.Error()
	if p := policy.ErrBudgetAmount.Error() + ": "; len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

// maxBudgetName bounds a budget filter (policy names are far shorter).
const maxBudgetName = 200

// BudgetFilter selects budgets (ListBudgets): "" matches any.
type BudgetFilter struct {
	Action, Budget string
}

// Budget is one budget counter with the policy that defines it.
type Budget struct {
	opjournal.BudgetUsage
	Policy *policy.BudgetPolicy
}

// ListBudgets returns the tenant's budget counters: for each budget of
// the policy (in action, then budget order) that the filter keeps, one
// entry per scope in which something counts, or the budget alone (no
// scope, nothing used) when nothing does. A budget shared by several
// actions is listed under each.
func (s *Service) ListBudgets(ctx context.Context, tenant string, f BudgetFilter) ([]Budget, error) {
	if err := checkText("budget", f.Budget, maxBudgetName); err != nil {
		return nil, err
	}
	if f.Action != "" {
		if _, err := s.action(f.Action); err != nil {
			return nil, err
		}
	}
	var pols []*policy.BudgetPolicy
	var actions []string
	var qs []store.BudgetQuery
	for _, name := range s.policy.Names() {
		act, _ := s.policy.Action(name)
		if f.Action != "" && act.Name != f.Action {
			continue
		}
		for _, b := range act.Budgets {
			if f.Budget != "" && b.Name != f.Budget {
				continue
			}
			pols, actions = append(pols, b), append(actions, act.Name)
			qs = append(qs, store.BudgetQuery{Budget: b.Name, AnyScope: true, Window: b.Window})
		}
	}
	if len(qs) == 0 {
		if f.Budget != "" {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "budget", "no budget %q in the policy%s", f.Budget, forAction(f.Action))
		}
		return nil, nil
	}
	rows, err := s.store.Budgets(ctx, store.BudgetParams{Tenant: tenant, Queries: qs})
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	var out []Budget
	for i, b := range pols {
		n := 0
		for _, u := range rows {
			if u.Budget == b.Name {
				u.Action, u.Limit, u.Window = actions[i], b.Limit, b.Window
				out = append(out, Budget{BudgetUsage: u, Policy: b})
				n++
			}
		}
		if n == 0 {
			out = append(out, Budget{BudgetUsage: opjournal.BudgetUsage{Action: actions[i], Budget: b.Name, Limit: b.Limit, Window: b.Window}, Policy: b})
		}
	}
	return out, nil
}

// forAction words an action filter in a message ("" for none).
func forAction(action string) string {
	if action == "" {
		return ""
	}
	return " for action " + action
}

// HeldBudgets returns the counters of the budgets op holds, now (in the
// order of op.Budgets; a budget the policy no longer has is left out).
func (s *Service) HeldBudgets(ctx context.Context, tenant string, op *opjournal.Operation) ([]Budget, error) {
	if len(op.Budgets) == 0 {
		return nil, nil
	}
	act, ok := s.actionPolicy(op.Action)
	if !ok {
		return nil, nil
	}
	var pols []*policy.BudgetPolicy
	var qs []store.BudgetQuery
	for _, h := range op.Budgets {
		if b := act.Budget(h.Budget); b != nil {
			pols = append(pols, b)
			qs = append(qs, store.BudgetQuery{Budget: b.Name, Scope: h.Scope, Window: b.Window})
		}
	}
	rows, err := s.store.Budgets(ctx, store.BudgetParams{Tenant: tenant, Queries: qs})
	if err != nil {
		return nil, fmt.Errorf("budgets of %q: %w", op.Key, err)
	}
	out := make([]Budget, len(rows))
	for i, u := range rows {
		u.Action, u.Limit, u.Window = act.Name, pols[i].Limit, pols[i].Window
		out[i] = Budget{BudgetUsage: u, Policy: pols[i]}
	}
	return out, nil
}

// BudgetTotals returns, for the metrics, each action's budgets' use summed
// over every tenant and scope.
func (s *Service) BudgetTotals(ctx context.Context) ([]Budget, error) {
	var pols []*policy.BudgetPolicy
	var actions []string
	var qs []store.BudgetQuery
	for _, name := range s.policy.Names() {
		act, _ := s.policy.Action(name)
		for _, b := range act.Budgets {
			pols, actions = append(pols, b), append(actions, act.Name)
			qs = append(qs, store.BudgetQuery{Budget: b.Name, Window: b.Window})
		}
	}
	if len(qs) == 0 {
		return nil, nil
	}
	rows, err := s.store.Budgets(ctx, store.BudgetParams{AllTenants: true, Queries: qs})
	if err != nil {
		return nil, fmt.Errorf("budget totals: %w", err)
	}
	out := make([]Budget, len(rows))
	for i, u := range rows {
		u.Action, u.Limit, u.Window = actions[i], pols[i].Limit, pols[i].Window
		out[i] = Budget{BudgetUsage: u, Policy: pols[i]}
	}
	return out, nil
}
