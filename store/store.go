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
	"encoding/json"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
)

// Store is the journal's durable storage. Every method that changes an
// operation applies one command of the protocol table (opjournal.Apply,
// protocol.go) atomically: SQLite by applying the pure function inside its
// write transaction, PostgreSQL by running the table's rows as conditional
// statements rendered from them. Methods return *opjournal.Error with the
// refusal the table gives (and then change nothing), CodeNotFound for an
// unknown key, CodeUnavailable when the database cannot be reached, and
// CodeInternal otherwise.
type Store interface {
	// Register inserts a new operation (pending, or in_progress with attempt
	// 1 when Claim is set) or returns the existing one with the same hash
	// (and claims it when Claim is set).
	Register(ctx context.Context, p RegisterParams) (RegisterResult, error)
	// Claim takes a lease by one conditional update; losing is not an error.
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)
	// ExtendLease extends the current holder's live lease (a heartbeat).
	ExtendLease(ctx context.Context, p ExtendLeaseParams) (*opjournal.Operation, error)
	// MarkSucceeded records a confirmed effect (from any issued attempt).
	MarkSucceeded(ctx context.Context, p MarkSucceededParams) (*opjournal.Operation, error)
	// MarkUnknown moves the current lease holder's operation to unknown.
	MarkUnknown(ctx context.Context, p MarkParams) (*opjournal.Operation, error)
	// MarkFailedFinal moves the current lease holder's operation to failed_final.
	MarkFailedFinal(ctx context.Context, p MarkParams) (*opjournal.Operation, error)
	// Get returns the operation with its effective status.
	Get(ctx context.Context, tenant, key string) (*opjournal.Operation, error)
	// List returns one page of operations in key order and the key to
	// continue after ("" on the last page).
	List(ctx context.Context, p ListParams) (ops []*opjournal.Operation, next string, err error)
	// ReleaseForRetry moves an unknown operation back to pending.
	ReleaseForRetry(ctx context.Context, p ReleaseParams) (*opjournal.Operation, error)
	// RecordCheck counts an inconclusive check and schedules the next one.
	RecordCheck(ctx context.Context, p RecordCheckParams) (*opjournal.Operation, error)
	// Escalate sets needs_review on a non-terminal operation.
	Escalate(ctx context.Context, p EscalateParams) (*opjournal.Operation, error)
	// Resolve applies an operator's verdict to a non-terminal operation
	// that is unknown or under review.
	Resolve(ctx context.Context, p ResolveParams) (*opjournal.Operation, error)
	// Acknowledge ends the review of a terminal operation.
	Acknowledge(ctx context.Context, p AcknowledgeParams) (*opjournal.Operation, error)
	// Events returns one page of the operation's history, oldest first,
	// and the id to continue after (0 on the last page); CodeNotFound if
	// the operation does not exist.
	Events(ctx context.Context, p EventsParams) (evs []opjournal.Event, next int64, err error)
	// Purge deletes one batch of purgeable operations of one action
	// (opjournal.Purgeable: terminal, not under review, unchanged for the
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

// ClaimPolicy is what the action's policy says about claiming.
type ClaimPolicy struct {
	// WorkerID is stored as the lease owner.
	WorkerID string
	// LeaseSeconds is the lease length, already bounded by the policy (≥ 1).
	LeaseSeconds int
	// AllowRetryAfterUnknown permits claiming from unknown or from an expired
	// lease (policy on_timeout: retry_same_key).
	AllowRetryAfterUnknown bool
	// ProviderWindow is retry.provider_dedup_window: under
	// AllowRetryAfterUnknown, no blind retry once the first attempt is
	// older (0: no limit).
	ProviderWindow time.Duration
}

// RegisterParams are the arguments of Register. The caller has validated and
// canonicalised everything.
type RegisterParams struct {
	Tenant      string
	Key         string
	Action      string
	RequestHash string
	// HashKeyID names the key of a keyed request hash ("" for plain SHA-256).
	HashKeyID string
	// HashFor returns the request's hash under another key, to compare with
	// an operation registered under it (nil: only HashKeyID).
	HashFor func(keyID string) (string, bool)
	Payload json.RawMessage
	// Refs are the validated business references (nil for none) and
	// ParentKey the parent operation's key ("" for none); both immutable.
	Refs      map[string]string
	ParentKey string
	// Claim, if set, claims the operation in the same call.
	Claim *ClaimPolicy
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p RegisterParams) Command() *opjournal.Command {
	c := &opjournal.Command{Kind: opjournal.CmdRegister, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		Action: p.Action, RequestHash: p.RequestHash, HashKeyID: p.HashKeyID, HashFor: p.HashFor, Payload: p.Payload,
		Refs: p.Refs, RefsJSON: opjournal.RefsJSON(p.Refs), ParentKey: p.ParentKey}
	if p.Claim != nil {
		c.Claim, c.WorkerID, c.LeaseSeconds = true, p.Claim.WorkerID, p.Claim.LeaseSeconds
		c.Policy.RetryAfterUnknown = p.Claim.AllowRetryAfterUnknown
		c.Policy.ProviderWindow = p.Claim.ProviderWindow
	}
	return c
}

// ClaimCommand is the Claim that Register with a claim applies to an
// operation that already exists.
func (p RegisterParams) ClaimCommand() *opjournal.Command {
	return ClaimParams{Tenant: p.Tenant, Key: p.Key, ClaimPolicy: *p.Claim, Actor: p.Actor, StatedActor: p.StatedActor}.Command()
}

// RegisterResult is what Register did.
type RegisterResult struct {
	Operation *opjournal.Operation
	// Created is true when this call inserted the operation.
	Created bool
	// Claim is set when RegisterParams.Claim was.
	Claim *ClaimResult
}

// ClaimParams are the arguments of Claim.
type ClaimParams struct {
	Tenant string
	Key    string
	ClaimPolicy
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p ClaimParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdClaim, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		WorkerID: p.WorkerID, LeaseSeconds: p.LeaseSeconds,
		Policy: opjournal.CommandPolicy{RetryAfterUnknown: p.AllowRetryAfterUnknown, ProviderWindow: p.ProviderWindow}}
}

// ClaimResult is the outcome of a claim.
type ClaimResult struct {
	Operation *opjournal.Operation
	// Claimed is true when the caller now holds the lease; the attempt is
	// Operation.AttemptCount and the lease ends at Operation.LeaseUntil.
	Claimed bool
	// RetryAfter is how long another worker's live lease still runs (by the
	// database clock), when that is why the claim was lost.
	RetryAfter time.Duration
}

// ExtendLeaseParams are the arguments of ExtendLease.
type ExtendLeaseParams struct {
	Tenant       string
	Key          string
	Attempt      int
	LeaseSeconds int           // already bounded by the policy (≥ 1)
	MaxAttempt   time.Duration // the policy's max_attempt_seconds
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p ExtendLeaseParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdExtendLease, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		Attempt: p.Attempt, LeaseSeconds: p.LeaseSeconds, Policy: opjournal.CommandPolicy{MaxAttempt: p.MaxAttempt}}
}

// MarkSucceededParams are the arguments of MarkSucceeded.
type MarkSucceededParams struct {
	Tenant     string
	Key        string
	Attempt    int
	ExternalID string
	Result     json.RawMessage // canonical JSON object or nil
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p MarkSucceededParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdMarkSucceeded, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		Attempt: p.Attempt, ExternalID: p.ExternalID, Result: p.Result}
}

// MarkParams are the arguments of MarkUnknown and MarkFailedFinal.
type MarkParams struct {
	Tenant    string
	Key       string
	Attempt   int
	ErrorCode string
	// Result (MarkFailedFinal only): the refusal as the provider gave it,
	// canonical JSON object or nil.
	Result json.RawMessage
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command kind of p.
func (p MarkParams) Command(kind opjournal.CommandKind) *opjournal.Command {
	return &opjournal.Command{Kind: kind, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		Attempt: p.Attempt, ErrorCode: p.ErrorCode, Result: p.Result}
}

// ListParams filter and page List. Zero values do not filter.
type ListParams struct {
	Tenant      string
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
	// KeyPrefix keeps only operations whose key starts with it (exactly, byte-wise; no wildcards: % and _ are literal).
	KeyPrefix string
	// UpdatedAfter and UpdatedBefore keep only operations whose updated_at is >= UpdatedAfter and < UpdatedBefore; zero means unbounded.
	UpdatedAfter, UpdatedBefore time.Time
	// LeaseExpired keeps only in_progress rows whose lease has expired on the database clock (their effective status is unknown).
	LeaseExpired bool
	After        string // exclusive: continue after this key
	Limit        int
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

// ReleaseParams are the arguments of ReleaseForRetry.
type ReleaseParams struct {
	Tenant  string
	Key     string
	Attempt int // must be the latest attempt
	Reason  string
	// DefinitiveAbsence: the action's policy says its provider's search is
	// complete and current (reconcile.definitive_absence); without it
	// nothing is released.
	DefinitiveAbsence bool
	// ReleaseAfter: absence only counts once the outcome has been unknown
	// this long (database clock): visibility_lag + in_flight_window.
	ReleaseAfter time.Duration
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p ReleaseParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdReleaseForRetry, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		Attempt: p.Attempt, Reason: p.Reason,
		Policy: opjournal.CommandPolicy{DefinitiveAbsence: p.DefinitiveAbsence, ReleaseAfter: p.ReleaseAfter}}
}

// RecordCheckParams are the arguments of RecordCheck.
type RecordCheckParams struct {
	Tenant         string
	Key            string
	Attempt        int // must be the latest attempt
	Note           string
	NextCheckAfter time.Duration
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p RecordCheckParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdRecordCheck, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		Attempt: p.Attempt, Reason: p.Note, NextCheckAfter: p.NextCheckAfter}
}

// EscalateParams are the arguments of Escalate.
type EscalateParams struct {
	Tenant string
	Key    string
	Reason string
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p EscalateParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdEscalate, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor, Reason: p.Reason}
}

// ResolveParams are the arguments of Resolve.
type ResolveParams struct {
	Tenant     string
	Key        string
	To         opjournal.Status // StatusSucceeded or StatusFailedFinal
	ExternalID string           // with StatusSucceeded
	Result     json.RawMessage  // with StatusSucceeded, optional
	ErrorCode  string           // with StatusFailedFinal, optional
	Reason     string
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p ResolveParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdResolve, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor,
		Resolution: p.To, ExternalID: p.ExternalID, Result: p.Result, ErrorCode: p.ErrorCode, Reason: p.Reason}
}

// AcknowledgeParams are the arguments of Acknowledge.
type AcknowledgeParams struct {
	Tenant string
	Key    string
	Reason string
	// Actor is recorded as the event's actor: the authenticated principal,
	// or without authentication what the caller stated ("" records the
	// lease owner). StatedActor is what the caller said it acts as.
	Actor, StatedActor string
}

// Command returns the protocol command of p.
func (p AcknowledgeParams) Command() *opjournal.Command {
	return &opjournal.Command{Kind: opjournal.CmdAcknowledge, Key: p.Key, Actor: p.Actor, StatedActor: p.StatedActor, Reason: p.Reason}
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
