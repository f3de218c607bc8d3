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
// actions is listed under each (its counters once per action).
func (s *Service) ListBudgets(ctx context.Context, tenant string, f BudgetFilter) ([]Budget, error) {
	if err := checkText("budget", f.Budget, maxBudgetName); err != nil {
		return nil, err
	}
	if f.Action != "" {
		if _, err := s.action(f.Action); err != nil {
			return nil, err
		}
	}
	pbs := s.policyBudgets(f)
	if len(pbs) == 0 {
		if f.Budget != "" {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "budget", "no budget %q in the policy%s", f.Budget, forAction(f.Action))
		}
		return nil, nil
	}
	// One query per name: budgets of one name share their counters (and
	// agree on their window).
	var qs []store.BudgetQuery
	for _, pb := range pbs {
		if !slices.ContainsFunc(qs, func(q store.BudgetQuery) bool { return q.Budget == pb.Name }) {
			qs = append(qs, store.BudgetQuery{Budget: pb.Name, AnyScope: true, Window: pb.Window})
		}
	}
	rows, err := s.store.Budgets(ctx, store.BudgetParams{Tenant: tenant, Queries: qs})
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", err)
	}
	var out []Budget
	for _, pb := range pbs {
		n := len(out)
		for _, u := range rows {
			if u.Budget == pb.Name {
				out = append(out, pb.with(u))
			}
		}
		if len(out) == n {
			out = append(out, pb.with(opjournal.BudgetUsage{Budget: pb.Name}))
		}
	}
	return out, nil
}

// policyBudget is a budget of the policy and the action that declares it.
type policyBudget struct {
	action string
	*policy.BudgetPolicy
}

// with is u, a counter of this budget, with the policy's action, limit
// and window.
func (pb policyBudget) with(u opjournal.BudgetUsage) Budget {
	u.Action, u.Limit, u.Window = pb.action, pb.Limit, pb.Window
	return Budget{BudgetUsage: u, Policy: pb.BudgetPolicy}
}

// policyBudgets returns the policy's budgets that f keeps, in action,
// then budget order.
func (s *Service) policyBudgets(f BudgetFilter) []policyBudget {
	var out []policyBudget
	for _, name := range s.policy.Names() {
		act, _ := s.policy.Action(name)
		if f.Action != "" && act.Name != f.Action {
			continue
		}
		for _, b := range act.Budgets {
			if f.Budget == "" || b.Name == f.Budget {
				out = append(out, policyBudget{act.Name, b})
			}
		}
	}
	return out
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
	var pbs []policyBudget
	var qs []store.BudgetQuery
	for _, h := range op.Budgets {
		if b := act.Budget(h.Budget); b != nil {
			pbs = append(pbs, policyBudget{act.Name, b})
			qs = append(qs, store.BudgetQuery{Budget: b.Name, Scope: h.Scope, Window: b.Window})
		}
	}
	rows, err := s.store.Budgets(ctx, store.BudgetParams{Tenant: tenant, Queries: qs})
	if err != nil {
		return nil, fmt.Errorf("budgets of %q: %w", op.Key, err)
	}
	out := make([]Budget, len(rows))
	for i, u := range rows {
		out[i] = pbs[i].with(u)
	}
	return out, nil
}

// BudgetTotals returns, for the metrics, each action's budgets' use summed
// over every tenant and scope.
func (s *Service) BudgetTotals(ctx context.Context) ([]Budget, error) {
	pbs := s.policyBudgets(BudgetFilter{})
	if len(pbs) == 0 {
		return nil, nil
	}
	qs := make([]store.BudgetQuery, len(pbs))
	for i, pb := range pbs {
		qs[i] = store.BudgetQuery{Budget: pb.Name, Window: pb.Window}
	}
	rows, err := s.store.Budgets(ctx, store.BudgetParams{AllTenants: true, Queries: qs})
	if err != nil {
		return nil, fmt.Errorf("budget totals: %w", err)
	}
	out := make([]Budget, len(rows))
	for i, u := range rows {
		out[i] = pbs[i].with(u)
	}
	return out, nil
}
