// Package store defines the journal's storage interface. Each database has
// its own package (store/postgres, store/sqlite) and every one of them runs
// the same conformance suite (store/storetest).
//
// Atomicity comes from the database, never from Go locks: a unique key guards
// Register, and every transition is one conditional UPDATE whose row count
// decides who won. Every lease time comes from the database's clock. No
// transaction stays open across a network call: a store method is a few
// statements and returns.
package store

import (
	"context"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
)

// Store is the journal's durable storage. Apply, its one method that
// changes an operation, applies one command of the protocol table
// (protocol.Apply, protocol/table.go) atomically: SQLite by applying the pure function inside its
// write transaction, PostgreSQL by running the table's rows as conditional
// statements rendered from them. Methods return *opjournal.Error with the
// refusal the table gives (and then change nothing), CodeNotFound for an
// unknown key, CodeUnavailable when the database cannot be reached, and
// CodeInternal otherwise.
type Store interface {
	// Apply applies one command of the protocol table to the tenant's
	// operation c.Key, atomically: Register inserts a new operation
	// (pending, or in_progress with attempt 1 when c.Claim is set) or
	// answers with the existing one of the same request (and claims it
	// when c.Claim is set); every other command is one conditional
	// transition of an existing operation. A claim that loses is not an
	// error (Applied.Claimed is false). The caller has validated and
	// canonicalised the command; the store does not modify it.
	Apply(ctx context.Context, tenant string, c *protocol.Command) (Applied, error)
	// Get returns the operation with its effective status.
	Get(ctx context.Context, tenant, key string) (*opjournal.Operation, error)
	// List returns one page of operations in key order and the key to
	// continue after ("" on the last page).
	List(ctx context.Context, p ListParams) (ops []*opjournal.Operation, next string, err error)
	// Events returns one page of the operation's history, oldest first,
	// and the id to continue after (0 on the last page); CodeNotFound if
	// the operation does not exist.
	Events(ctx context.Context, p EventsParams) (evs []opjournal.Event, next int64, err error)
	// Purge deletes one batch of purgeable operations of one action
	// (protocol.Purgeable: terminal, not under review, unchanged for the
	// retention) with their history and refs, oldest first, without waiting
	// for rows another transaction holds; with DryRun it deletes nothing and
	// counts every purgeable operation instead.
	Purge(ctx context.Context, p PurgeParams) (PurgeResult, error)
	// Counts returns how many of the tenant's operations there are per
	// group of (action, effective status, needs_review, lease expired,
	// check due), with the oldest updated_at of each group. Groups with no
	// operations are absent.
	Counts(ctx context.Context, tenant string) ([]CountRow, error)
	// Activity counts the tenant's history events at or after Since, per
	// time bucket and kind; rows are ordered by Start, then Kind.
	Activity(ctx context.Context, p ActivityParams) ([]ActivityRow, error)
	// OldestTerminal returns when the least recently changed terminal
	// operation of action last changed (zero if it has none) and the
	// database's clock.
	OldestTerminal(ctx context.Context, action string) (oldest, now time.Time, err error)
	// DueApprovals returns up to limit operations, of every tenant, that
	// await approval past their deadline (database clock) and are not yet
	// under review: the ones ExpireApproval applies to. Oldest deadline
	// first.
	DueApprovals(ctx context.Context, limit int) ([]DueApproval, error)
	// AwaitingApprovals counts the operations awaiting approval per
	// action, in every tenant, with the oldest one's registration time,
	// and returns the database's clock.
	AwaitingApprovals(ctx context.Context) ([]ApprovalCount, time.Time, error)
	// Budgets returns the use of budget counters at the database clock:
	// for each query, the holds of its budget registered within its
	// window before the clock that count (protocol.HoldCounts), summed per
	// scope. See BudgetParams.
	Budgets(ctx context.Context, p BudgetParams) ([]opjournal.BudgetUsage, error)
	// TryLock takes the named lock that keeps housekeeping (purge) to one
	// process at a time among all that share the database; ok is false
	// when another holds it. unlock releases it.
	TryLock(ctx context.Context, name string) (unlock func(), ok bool, err error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the connections.
	Close() error
}

// Clock is a test hook: stores whose clock is set read "now" from it
// instead of the database's clock, so that tests move time (lease expiry,
// visibility lags) without sleeping. Production never sets it.
type Clock interface {
	// SetClock makes every statement use now() instead of the database
	// clock; nil restores the database clock.
	SetClock(now func() time.Time)
}

// Applied is what Apply did.
type Applied struct {
	// Operation is the operation after the command, with its effective
	// status (as it is when the command changed nothing).
	Operation *opjournal.Operation
	// Created (Register) is true when this call inserted the operation.
	Created bool
	// Claimed (Claim, Register with c.Claim) is true when the caller now
	// holds the lease; the attempt is Operation.AttemptCount and the lease
	// ends at Operation.LeaseUntil.
	Claimed bool
	// RetryAfter (Claim, Register with c.Claim) is how long another
	// worker's live lease still runs (by the database clock), when that is
	// why the claim was lost; for an operation awaiting approval (Claim,
	// and Register with or without a claim) it is AwaitRetryAfter.
	RetryAfter time.Duration
}

// ClaimOf is the Claim that a Register with c.Claim applies to an
// operation that already exists: the same worker, lease, policy and
// actors.
func ClaimOf(c *protocol.Command) *protocol.Command {
	return &protocol.Command{Kind: protocol.CmdClaim, Key: c.Key, Actor: c.Actor, StatedActor: c.StatedActor,
		WorkerID: c.WorkerID, LeaseSeconds: c.LeaseSeconds,
		Policy: protocol.CommandPolicy{RetryAfterUnknown: c.Policy.RetryAfterUnknown, ProviderWindow: c.Policy.ProviderWindow}}
}

// Verb names a command in errors and logs ("mark succeeded"), as every
// layer words it.
func Verb(k protocol.CommandKind) string {
	if v, ok := verbs[k]; ok {
		return v
	}
	return strings.ToLower(string(k))
}

var verbs = map[protocol.CommandKind]string{
	protocol.CmdRegister: "register", protocol.CmdClaim: "claim", protocol.CmdExtendLease: "extend lease",
	protocol.CmdMarkSucceeded: "mark succeeded", protocol.CmdMarkUnknown: "mark unknown",
	protocol.CmdMarkFailedFinal: "mark failed_final", protocol.CmdReleaseForRetry: "release",
	protocol.CmdRecordCheck: "record check", protocol.CmdEscalate: "escalate", protocol.CmdResolve: "resolve",
	protocol.CmdAcknowledge: "acknowledge", protocol.CmdSetNote: "set note",
	protocol.CmdApprove: "approve", protocol.CmdReject: "reject", protocol.CmdExpireApproval: "expire approval",
}

// BudgetParams selects budget counters (Store.Budgets).
type BudgetParams struct {
	// Tenant is whose counters; with AllTenants every tenant's are summed
	// (one row per query, Scope ""), for the metrics.
	Tenant     string
	AllTenants bool
	Queries    []BudgetQuery
}

// BudgetQuery is one budget's counters: one scope (Scope set: exactly one
// row, zero when nothing counts), or every scope with a counted hold (one
// row each, in scope order).
type BudgetQuery struct {
	Budget string
	Scope  string
	// AnyScope lists every scope instead of Scope's.
	AnyScope bool
	Window   time.Duration
	// WithHolds fills BudgetUsage.Holds (to tell when enough frees up).
	WithHolds bool
}

// BudgetUsage is the Budgets row of a query in this store: the usage
// with Budget, Scope and Window set and Action and Limit left to the
// caller.
func BudgetUsage(q BudgetQuery, scope string) opjournal.BudgetUsage {
	return opjournal.BudgetUsage{Budget: q.Budget, Scope: scope, Window: q.Window}
}

// DueApproval names one operation whose approval has timed out.
type DueApproval struct {
	Tenant, Key string
}

// ApprovalCount is one action's row of AwaitingApprovals.
type ApprovalCount struct {
	Action        string
	Count         int
	OldestCreated time.Time
}

// ListFilter is what a list of operations keeps, declared once: the
// journal's ListRequest and the stores' ListParams both embed it. Zero
// values do not filter. Each field's condition is written once, in
// listConditions (list.go); TestListConditions fails for a field without
// one.
type ListFilter struct {
	Statuses    []opjournal.Status // effective statuses
	NeedsReview *bool
	Action      string
	// Refs keeps only operations that have every one of these refs.
	Refs map[string]string
	// ParentKey keeps only the children of this operation.
	ParentKey string
	// DueForCheck keeps only unknown operations (expired leases included)
	// that are not under review and whose next check is due.
	DueForCheck bool
	// KeyPrefix keeps only operations whose key starts with it (exactly,
	// byte-wise; no wildcards: % and _ are literal).
	KeyPrefix string
	// UpdatedAfter and UpdatedBefore keep only operations whose updated_at
	// is >= UpdatedAfter and < UpdatedBefore; zero means unbounded.
	UpdatedAfter, UpdatedBefore time.Time
	// LeaseExpired keeps only in_progress rows whose lease has expired on
	// the database clock (their effective status is unknown).
	LeaseExpired bool
}

// ListParams filter and page List. Zero values do not filter.
type ListParams struct {
	Tenant string
	ListFilter
	After string // exclusive: continue after this key
	Limit int
	// Basic leaves out payload and result (AIP-157's BASIC view).
	Basic bool
}

// CountRow is one group of Counts.
type CountRow struct {
	Action       string
	Status       opjournal.Status // effective: an expired lease counts as unknown
	NeedsReview  bool
	LeaseExpired bool // an in_progress row whose lease has expired
	CheckDue     bool // effective unknown, not under review, next check due now (as ListParams.DueForCheck)
	Count        int
	OldestUpdate time.Time // the least updated_at in the group
}

// ActivityParams are the arguments of Activity.
type ActivityParams struct {
	Tenant string
	Since  time.Time
	// Bucket is the width of a bucket (≥ 1 s); buckets start at multiples of it since the Unix epoch, UTC.
	// It must be a whole number of milliseconds (the SQLite store's unit);
	// stores refuse anything else with CodeInvalidArgument.
	Bucket time.Duration
}

// ActivityRow counts the events of one kind in one bucket.
type ActivityRow struct {
	Start time.Time
	Kind  opjournal.EventKind
	Count int
}

// CheckBucket refuses an ActivityParams.Bucket shorter than a second or
// not a whole number of milliseconds, so that every store draws the same
// bucket boundaries.
func CheckBucket(d time.Duration) error {
	if d < time.Second || d%time.Millisecond != 0 {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "bucket", "is %v; it must be at least 1s and a whole number of milliseconds", d)
	}
	return nil
}

// KindCase renders the SQL expression that classifies an event by its
// reason column as opjournal.KindOf does: a CASE over
// opjournal.EventReasons in its order, an exact comparison for a text and
// a comparison of the reason's first characters for a prefix, ELSE
// 'other'. Every text and kind is a bound parameter, never SQL text:
// param(v) binds v and returns its placeholder, and prefix(p) renders
// "reason begins with the parameter p" in the store's dialect.
func KindCase(param func(v string) string, prefix func(p string) string) string {
	var b strings.Builder
	b.WriteString("(CASE")
	for _, r := range opjournal.EventReasons {
		text := param(r.Text)
		if r.Prefix {
			b.WriteString(" WHEN " + prefix(text))
		} else {
			b.WriteString(" WHEN reason = " + text)
		}
		b.WriteString(" THEN " + param(string(r.Kind)))
	}
	b.WriteString(" ELSE " + param(string(opjournal.KindOther)) + " END)")
	return b.String()
}

// PurgeParams are the arguments of Purge.
type PurgeParams struct {
	// Action is the action whose operations are purged.
	Action string
	// Retention is the action's retention (> 0): operations unchanged for
	// at least this long (database clock) go.
	Retention time.Duration
	// Limit is the batch size (> 0); ignored with DryRun.
	Limit int
	// DryRun counts instead of deleting.
	DryRun bool
}

// PurgeResult is what one Purge did (or, with DryRun, would do).
type PurgeResult struct {
	// Operations and Events count the rows deleted (or purgeable).
	Operations, Events int64
	// Oldest and Newest bound the updated_at of those operations (zero
	// when there were none).
	Oldest, Newest time.Time
}

// EventsParams page Events.
type EventsParams struct {
	Tenant string
	Key    string
	After  int64 // exclusive: continue after this event id
	Limit  int   // ≤ 0: opjournal.DefaultPageSize
}

// Page cuts a List result fetched with limit+1 rows down to limit and
// returns the key to continue after ("" when nothing is left): stores
// fetch one row more than asked to know whether another page exists.
func Page(ops []*opjournal.Operation, limit int) ([]*opjournal.Operation, string) {
	if len(ops) <= limit {
		return ops, ""
	}
	return ops[:limit], ops[limit-1].Key
}

// EventPage is Page for events.
func EventPage(evs []opjournal.Event, limit int) ([]opjournal.Event, int64) {
	if len(evs) <= limit {
		return evs, 0
	}
	return evs[:limit], evs[limit-1].ID
}

// RetryAfter is how long op's lease still runs at now, for a claim that
// lost to a live lease; 0 otherwise.
func RetryAfter(op *opjournal.Operation, now time.Time) time.Duration {
	if op.Status == opjournal.StatusAwaitingApproval {
		return AwaitRetryAfter(op, now)
	}
	if op.Status == opjournal.StatusInProgress {
		// A statement's clock may read a little before the claim it loses
		// to (PostgreSQL's now() is its transaction's start, and the
		// winner's transaction may have started later): the hint is
		// never longer than the lease itself.
		if now.Before(op.AttemptStartedAt) {
			now = op.AttemptStartedAt
		}
		return op.LeaseUntil.Sub(now)
	}
	return 0
}

// MaxAwaitRetryAfter bounds the retry-after hint of an operation
// awaiting approval: a person may decide at any moment (and Lookup's
// wait_seconds answers at once when they do).
const MaxAwaitRetryAfter = 30 * time.Second

// AwaitRetryAfter is the retry-after hint of an operation awaiting
// approval at now (database clock): MaxAwaitRetryAfter, or less when the
// deadline comes sooner, at least a second.
func AwaitRetryAfter(op *opjournal.Operation, now time.Time) time.Duration {
	d := MaxAwaitRetryAfter
	if a := op.Approval; a != nil && !a.Deadline.IsZero() {
		d = min(d, a.Deadline.Sub(now))
	}
	return max(d, time.Second)
}

// BatchStat describes one kind of call that a store groups into shared
// statements (store/postgres: Register, Claim, MarkSucceeded) or
// transactions (store/sqlite: every write).
type BatchStat struct {
	Kind       string // "register", "claim", "mark_succeeded"; "write" on SQLite
	Statements int64  // statements (SQLite: transactions) run so far, one-call ones included
	Calls      int64  // the calls they carried
	Waiting    int64  // calls queued right now
}

// Batching is implemented by stores that group concurrent calls into
// shared statements; the server exports its figures as metrics.
type Batching interface {
	BatchStats() []BatchStat
}
