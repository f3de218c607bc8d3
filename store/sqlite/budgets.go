package sqlite

import (
	"context"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// budgetFrom is the join every budget read makes: a hold counts through
// its operation, the one registered with it (key and created_at).
const budgetFrom = ` FROM budget_holds h JOIN operations o
	ON o.tenant = h.tenant AND o.operation_key = h.operation_key AND o.created_at = h.created_at
	WHERE h.budget = ?1 AND h.created_at > ?2 AND ` + holdCounts

// budgetSums is what a counter's row adds up: used, reserved by
// operations whose outcome is not known yet, and how many operations.
const budgetSums = `coalesce(sum(h.amount), 0), coalesce(sum(CASE WHEN ` + unresolved + ` THEN h.amount ELSE 0 END), 0), count(*)`

// decideBudgets reads the window's use of each of c's budgets in tx and
// returns a copy of c with the verdict (the store does not modify the
// caller's command).
func (s *Store) decideBudgets(ctx context.Context, tx *wtx, tenant string, c *protocol.Command, now time.Time) (*protocol.Command, error) {
	usage := make([]opjournal.BudgetUsage, len(c.Budgets))
	for i, ch := range c.Budgets {
		q := store.BudgetQuery{Budget: ch.Hold.Budget, Scope: ch.Hold.Scope, Window: ch.Window, WithHolds: true}
		u, err := s.scopeUsage(ctx, inTx(tx), tenant, q, now)
		if err != nil {
			return nil, err
		}
		usage[i] = u
	}
	cc := *c
	cc.BudgetVerdict = protocol.DecideBudgets(c.Budgets, usage, now)
	return &cc, nil
}

// eachRow runs a query and hands each row to each (which returns false
// to stop): a write transaction's rows or the pool's.
type eachRow func(ctx context.Context, query string, args []any, each func(r rowScanner) (bool, error)) error

// inTx reads through the write transaction tx.
func inTx(tx *wtx) eachRow {
	return func(_ context.Context, query string, args []any, each func(r rowScanner) (bool, error)) error {
		return tx.QueryContext(query, args, each)
	}
}

// onPool reads through the store's pool.
func (s *Store) onPool(ctx context.Context, query string, args []any, each func(r rowScanner) (bool, error)) error {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		more, err := each(rows)
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// scopeUsage is one scope's counter at now.
func (s *Store) scopeUsage(ctx context.Context, run eachRow, tenant string, bq store.BudgetQuery, now time.Time) (opjournal.BudgetUsage, error) {
	u := store.BudgetUsage(bq, bq.Scope)
	cutoff := now.Add(-bq.Window).UnixMilli()
	err := run(ctx, `SELECT `+budgetSums+budgetFrom+` AND h.tenant = ?3 AND h.scope = ?4`, []any{bq.Budget, cutoff, tenant, bq.Scope},
		func(r rowScanner) (bool, error) { return false, r.Scan(&u.Used, &u.ReservedUnknown, &u.Operations) })
	if err != nil || !bq.WithHolds || u.Used == 0 {
		return u, budgetErr(err)
	}
	err = run(ctx, `SELECT h.created_at, h.amount`+budgetFrom+` AND h.tenant = ?3 AND h.scope = ?4 ORDER BY h.created_at`,
		[]any{bq.Budget, cutoff, tenant, bq.Scope}, func(r rowScanner) (bool, error) {
			var at, amount int64
			if err := r.Scan(&at, &amount); err != nil {
				return false, err
			}
			u.Holds = append(u.Holds, opjournal.HeldAmount{At: ms(at), Amount: amount})
			return true, nil
		})
	return u, budgetErr(err)
}

// Budgets returns the use of budget counters at the database clock.
func (s *Store) Budgets(ctx context.Context, p store.BudgetParams) ([]opjournal.BudgetUsage, error) {
	var nowMs int64
	if err := s.db.QueryRowContext(ctx, clockSQL, s.clockArg()).Scan(&nowMs); err != nil {
		return nil, classify("clock", err)
	}
	now := ms(nowMs)
	var out []opjournal.BudgetUsage
	for _, q := range p.Queries {
		switch {
		case p.AllTenants:
			u := store.BudgetUsage(q, "")
			err := s.onPool(ctx, `SELECT `+budgetSums+budgetFrom, []any{q.Budget, now.Add(-q.Window).UnixMilli()},
				func(r rowScanner) (bool, error) { return false, r.Scan(&u.Used, &u.ReservedUnknown, &u.Operations) })
			if err != nil {
				return nil, classify("budget", err)
			}
			out = append(out, u)
		case !q.AnyScope:
			u, err := s.scopeUsage(ctx, s.onPool, p.Tenant, q, now)
			if err != nil {
				return nil, err
			}
			out = append(out, u)
		default:
			err := s.onPool(ctx, `SELECT h.scope, `+budgetSums+budgetFrom+` AND h.tenant = ?3 GROUP BY h.scope ORDER BY h.scope`,
				[]any{q.Budget, now.Add(-q.Window).UnixMilli(), p.Tenant}, func(r rowScanner) (bool, error) {
					u := store.BudgetUsage(q, "")
					if err := r.Scan(&u.Scope, &u.Used, &u.ReservedUnknown, &u.Operations); err != nil {
						return false, err
					}
					out = append(out, u)
					return true, nil
				})
			if err != nil {
				return nil, classify("budget", err)
			}
		}
	}
	return out, nil
}

// budgetErr classifies a budget read's error (nil stays nil).
func budgetErr(err error) error {
	if err == nil {
		return nil
	}
	return classify("budget", err)
}
