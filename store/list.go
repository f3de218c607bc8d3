package store

import (
	"strings"
	"time"

	"github.com/opjournal/opjournal"
)

// List's request, declared once: BuildList makes the statement from
// ListParams, each store giving only its dialect's terms (ListDialect),
// and ScanPage reads its rows into a page.

// ListDialect is how one store spells List's statement: its placeholders,
// its columns, the protocol's terms rendered in its SQL, and the
// conditions whose SQL differs between databases. A filter whose SQL is
// the same everywhere (up to placeholders) is written by listConditions
// and needs no method here.
type ListDialect interface {
	// Placeholder is the text of the statement's n-th parameter
	// (1-based): "$n" or "?n".
	Placeholder(n int) string
	// Columns is the select list of an operation row (the store's
	// scanOp reads it), with payload and result left out when basic
	// (AIP-157's BASIC view).
	Columns(basic bool) string
	// Bool is a boolean parameter as the store compares it with a
	// boolean column.
	Bool(b bool) any
	// Time is a bound on updated_at as the store compares it: rounded up
	// to the store's precision, so that a row just before the bound
	// never passes it.
	Time(t time.Time) any
	// CheckDue is protocol.CheckDueTerm in the store's SQL.
	CheckDue() string
	// LeaseExpired is protocol.LeaseExpiredTerm in the store's SQL.
	LeaseExpired() string
	// Statuses keeps the operations whose effective status is one of
	// statuses (never empty).
	Statuses(a *Args, statuses []opjournal.Status) string
	// Refs keeps the operations that have every one of refs (never
	// empty); tenant is the placeholder of the tenant.
	Refs(a *Args, tenant string, refs map[string]string) string
	// KeyPrefix keeps the operations whose key begins with prefix (never
	// empty), byte-wise, with no wildcards.
	KeyPrefix(a *Args, prefix string) string
}

// Args are a statement's parameters, in the order of their placeholders
// (BuildList makes them, in its dialect's placeholders).
type Args struct {
	// Values are the parameters bound so far; Values[i] is parameter i+1.
	Values []any
	// placeholder spells parameter n (ListDialect.Placeholder).
	placeholder func(n int) string
}

// Add binds v as the next parameter and returns its placeholder.
func (a *Args) Add(v any) string {
	a.Values = append(a.Values, v)
	return a.placeholder(len(a.Values))
}

// ListStatement is List's statement for one request.
type ListStatement struct {
	// SQL reads at most Limit+1 operations: the extra row tells whether
	// another page follows (Page).
	SQL string
	// Args are its parameters: the clock, the tenant and the after-key
	// are the first three (every term of the protocol reads the clock as
	// parameter 1).
	Args []any
	// Limit is the page's size: p.Limit, or opjournal.DefaultPageSize.
	Limit int
}

// BuildList is the statement of List(p) in dialect d; clock is the
// store's parameter 1 (the test clock, or NULL for the database's).
func BuildList(d ListDialect, p ListParams, clock any) ListStatement {
	limit := p.Limit
	if limit <= 0 {
		limit = opjournal.DefaultPageSize
	}
	a := &Args{placeholder: d.Placeholder}
	a.Add(clock)
	conds := listConditions(d, a, p)
	sql := `SELECT ` + d.Columns(p.Basic) + ` FROM operations
		WHERE ` + strings.Join(conds, "\n\t\t  AND ") + `
		ORDER BY operation_key
		LIMIT ` + a.Add(limit+1)
	return ListStatement{SQL: sql, Args: a.Values, Limit: limit}
}

// listConditions are the conditions of List(p) after the clock (a holds
// it): the tenant and the after-key, then one for each field of
// p.ListFilter that is set, in the order ListFilter declares them. An
// unset field adds nothing, never an "unset OR match" condition with a
// parameter: PostgreSQL keeps one generic plan per prepared statement,
// and in a generic plan of "$9 IS NULL OR refs @> $9" no partial index
// (rows with refs, rows with a parent, open rows) could serve the
// filter.
//
// A new field of ListFilter gets its line here (TestListConditions fails
// until it does) and, only if its SQL differs between the stores, a
// method of ListDialect.
func listConditions(d ListDialect, a *Args, p ListParams) []string {
	tenant := a.Add(p.Tenant)
	conds := []string{`tenant = ` + tenant, `operation_key > ` + a.Add(p.After)}
	f := p.ListFilter
	if len(f.Statuses) > 0 {
		conds = append(conds, d.Statuses(a, f.Statuses))
	}
	if f.NeedsReview != nil {
		conds = append(conds, `needs_review = `+a.Add(d.Bool(*f.NeedsReview)))
	}
	if f.Action != "" {
		conds = append(conds, `action_type = `+a.Add(f.Action))
	}
	if len(f.Refs) > 0 {
		conds = append(conds, d.Refs(a, tenant, f.Refs))
	}
	if f.ParentKey != "" {
		// Implies the predicate of operations_parent_idx (tenant,
		// parent_key, operation_key) WHERE parent_key IS NOT NULL, which
		// serves it in key order.
		conds = append(conds, `parent_key = `+a.Add(f.ParentKey))
	}
	if f.DueForCheck {
		// status IN ('in_progress', 'unknown') repeats the predicate of
		// the partial index operations_open_idx (in both stores) so that
		// the planner can use it.
		conds = append(conds, `status IN ('in_progress', 'unknown') AND `+d.CheckDue())
	}
	if f.KeyPrefix != "" {
		conds = append(conds, d.KeyPrefix(a, f.KeyPrefix))
	}
	if !f.UpdatedAfter.IsZero() {
		conds = append(conds, `updated_at >= `+a.Add(d.Time(f.UpdatedAfter)))
	}
	if !f.UpdatedBefore.IsZero() {
		conds = append(conds, `updated_at < `+a.Add(d.Time(f.UpdatedBefore)))
	}
	if f.LeaseExpired {
		// The term's status = 'in_progress' implies operations_open_idx's
		// predicate, so the planner may read the expired leases from that
		// index.
		conds = append(conds, d.LeaseExpired())
	}
	return conds
}

// Rows are the rows of a query as ScanPage reads them: pgx.Rows and
// *sql.Rows both have these methods. Close is left to the caller (a
// deferred call), because the two spell it differently (pgx's returns
// nothing, database/sql's an error).
type Rows interface {
	// Next advances to the next row; false when there is none or on an
	// error (Err).
	Next() bool
	// Err is the error that ended the rows, if any.
	Err() error
}

// ScanPage reads the rows of a ListStatement, each with scan, and cuts
// them to a page of limit (Page): the operations and the key to continue
// after. The error is scan's or the rows', unclassified: the store wraps
// it in its own terms.
func ScanPage(rows Rows, limit int, scan func() (*opjournal.Operation, error)) ([]*opjournal.Operation, string, error) {
	var ops []*opjournal.Operation
	for rows.Next() {
		op, err := scan()
		if err != nil {
			return nil, "", err
		}
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	ops, next := Page(ops, limit)
	return ops, next, nil
}
