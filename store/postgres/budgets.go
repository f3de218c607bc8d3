package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
)

// budgetFrom is the join every budget read makes: a hold counts through
// its operation, the one registered with it (key and created_at), while
// protocol.HoldCounts holds ($1: the budget, $2: the window's start).
var budgetFrom = ` FROM budget_holds h JOIN operations o
	ON o.tenant = h.tenant AND o.operation_key = h.operation_key AND o.created_at = h.created_at
	WHERE h.budget = $1 AND h.created_at > $2 AND ` + protocol.HoldCountsSQL(dialect.On("o"), "h.over_limit")

// budgetSums is what a counter's row adds up: used, reserved by
// operations whose outcome is not known yet, and how many operations.
var budgetSums = `coalesce(sum(h.amount), 0)::bigint, coalesce(sum(CASE WHEN ` + protocol.UnresolvedTerm.SQL(dialect.On("o")) +
	` THEN h.amount ELSE 0 END), 0)::bigint, count(*)`

// registerBudgeted registers a new operation with budgets in one
// transaction: it takes each counter's transaction-scoped advisory lock
// (in one order, so two registrations never wait on each other in a
// cycle), reads the key (a replay or a conflict reserves nothing), reads
// each counter's window, decides (protocol.DecideBudgets) and inserts
// the row with its holds. Registrations of one counter on any number of
// servers are so serialized by the database, and each sees the holds the
// previous one committed (READ COMMITTED takes a new snapshot per
// statement, after the lock): never more than the limit is admitted.
// The locks are transaction-scoped, so they work through PgBouncer's
// transaction pooling too.
func (s *Store) registerBudgeted(ctx context.Context, tenant string, c *protocol.Command) (store.Applied, error) {
	locks := make([]string, 0, len(c.Budgets))
	for _, ch := range c.Budgets {
		b, _ := json.Marshal([]string{tenant, ch.Hold.Budget, ch.Hold.Scope})
		locks = append(locks, string(b))
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	clockArg := s.clockArg() // one instant for every statement
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Applied{}, classify("register", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, l := range locks {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, l); err != nil {
			return store.Applied{}, classify("register", err)
		}
	}
	var now time.Time
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT `+clock+`, EXISTS (SELECT 1 FROM operations WHERE tenant = $2 AND operation_key = $3)`,
		clockArg, tenant, c.Key).Scan(&now, &exists); err != nil {
		return store.Applied{}, classify("register", err)
	}
	if exists {
		_ = tx.Rollback(ctx)
		return s.registerOne(ctx, tenant, withoutBudgets(c))
	}
	usage := make([]opjournal.BudgetUsage, len(c.Budgets))
	for i, ch := range c.Budgets {
		q := store.BudgetQuery{Budget: ch.Hold.Budget, Scope: ch.Hold.Scope, Window: ch.Window, WithHolds: true}
		if usage[i], err = scopeUsage(ctx, tx, tenant, q, now); err != nil {
			return store.Applied{}, err
		}
	}
	cc := *c
	cc.BudgetVerdict = protocol.DecideBudgets(c.Budgets, usage, now)
	if _, err := protocol.Apply(nil, &cc, now); err != nil {
		return store.Applied{}, err // refused: nothing was written
	}
	st := inserts[insertRule(&cc)]
	sc, err := scanOp(tx.QueryRow(ctx, st.sql, st.args(clockArg, tenant, &cc, nil)...))
	if errors.Is(err, pgx.ErrNoRows) {
		// Inserted meanwhile by a registration without the counters'
		// locks (another server's older policy): the key decides.
		_ = tx.Rollback(ctx)
		return s.registerOne(ctx, tenant, withoutBudgets(c))
	}
	if err != nil {
		return store.Applied{}, classify("register", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return store.Applied{}, classify("register", err)
	}
	return registered(&cc, sc), nil
}

// withoutBudgets is c for a key that exists: a replay or a conflict,
// which reserves nothing.
func withoutBudgets(c *protocol.Command) *protocol.Command {
	cc := *c
	cc.Budgets = nil
	return &cc
}

// rowQuerier is a transaction or the pool.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// scopeUsage is one scope's counter at now.
func scopeUsage(ctx context.Context, q rowQuerier, tenant string, bq store.BudgetQuery, now time.Time) (opjournal.BudgetUsage, error) {
	u := store.BudgetUsage(bq, bq.Scope)
	start := now.Add(-bq.Window)
	err := q.QueryRow(ctx, `SELECT `+budgetSums+budgetFrom+` AND h.tenant = $3 AND h.scope = $4`, bq.Budget, start, tenant, bq.Scope).
		Scan(&u.Used, &u.ReservedUnknown, &u.Operations)
	if err != nil {
		return u, budgetErr(err)
	}
	if !bq.WithHolds || u.Used == 0 {
		return u, nil
	}
	rows, err := q.Query(ctx, `SELECT h.created_at, h.amount`+budgetFrom+` AND h.tenant = $3 AND h.scope = $4 ORDER BY h.created_at`,
		bq.Budget, start, tenant, bq.Scope)
	if err != nil {
		return u, budgetErr(err)
	}
	u.Holds, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (opjournal.HeldAmount, error) {
		var h opjournal.HeldAmount
		err := r.Scan(&h.At, &h.Amount)
		h.At = h.At.UTC()
		return h, err
	})
	return u, budgetErr(err)
}

// Budgets returns the use of budget counters at the database clock.
func (s *Store) Budgets(ctx context.Context, p store.BudgetParams) ([]opjournal.BudgetUsage, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT `+clock, s.clockArg()).Scan(&now); err != nil {
		return nil, classify("clock", err)
	}
	var out []opjournal.BudgetUsage
	for _, q := range p.Queries {
		start := now.Add(-q.Window)
		switch {
		case p.AllTenants:
			u := store.BudgetUsage(q, "")
			if err := s.pool.QueryRow(ctx, `SELECT `+budgetSums+budgetFrom, q.Budget, start).Scan(&u.Used, &u.ReservedUnknown, &u.Operations); err != nil {
				return nil, classify("budget", err)
			}
			out = append(out, u)
		case !q.AnyScope:
			u, err := scopeUsage(ctx, s.pool, p.Tenant, q, now)
			if err != nil {
				return nil, err
			}
			out = append(out, u)
		default:
			rows, err := s.pool.Query(ctx, `SELECT h.scope, `+budgetSums+budgetFrom+` AND h.tenant = $3 GROUP BY h.scope ORDER BY h.scope`,
				q.Budget, start, p.Tenant)
			if err != nil {
				return nil, classify("budget", err)
			}
			us, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (opjournal.BudgetUsage, error) {
				u := store.BudgetUsage(q, "")
				err := r.Scan(&u.Scope, &u.Used, &u.ReservedUnknown, &u.Operations)
				return u, err
			})
			if err != nil {
				return nil, classify("budget", err)
			}
			out = append(out, us...)
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
