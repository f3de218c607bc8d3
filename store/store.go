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
	"time"

	"github.com/opjournal/opjournal"
)

// Store is the journal's durable storage. Methods return *opjournal.Error
// with CodeNotFound, CodePayloadMismatch, CodeStaleAttempt or
// CodeInvalidArgument for rule violations (and then change nothing),
// CodeUnavailable when the database cannot be reached, and CodeInternal
// otherwise.
type Store interface {
	// Register inserts a new operation (pending, or in_progress with attempt
	// 1 when Claim is set) or returns the existing one with the same hash.
	Register(ctx context.Context, p RegisterParams) (RegisterResult, error)
	// Claim takes a lease by one conditional update; losing is not an error.
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)
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
	// Resolve applies an operator's verdict to an unknown or needs_review operation.
	Resolve(ctx context.Context, p ResolveParams) (*opjournal.Operation, error)
	// Events returns the operation's history, oldest first (CodeNotFound if
	// the operation does not exist).
	Events(ctx context.Context, tenant, key string) ([]opjournal.Event, error)
	// Ping checks that the database answers.
	Ping(ctx context.Context) error
	// Close releases the connections.
	Close() error
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
}

// RegisterParams are the arguments of Register. The caller has validated and
// canonicalised everything.
type RegisterParams struct {
	Tenant      string
	Key         string
	Action      string
	RequestHash string
	Payload     json.RawMessage
	// Claim, if set, claims the operation in the same call.
	Claim *ClaimPolicy
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

// MarkSucceededParams are the arguments of MarkSucceeded.
type MarkSucceededParams struct {
	Tenant     string
	Key        string
	Attempt    int
	ExternalID string
	Result     json.RawMessage // canonical JSON object or nil
	// Actor is recorded in the history; "" records the lease owner.
	Actor string
}

// MarkParams are the arguments of MarkUnknown and MarkFailedFinal.
type MarkParams struct {
	Tenant    string
	Key       string
	Attempt   int
	ErrorCode string
}

// ListParams filter and page List. Zero values do not filter.
type ListParams struct {
	Tenant      string
	Statuses    []opjournal.Status // effective statuses
	NeedsReview *bool
	Action      string
	// DueForCheck keeps only unknown operations (expired leases included)
	// that are not under review and whose next check is due.
	DueForCheck bool
	After       string // exclusive: continue after this key
	Limit       int
}

// ReleaseParams are the arguments of ReleaseForRetry.
type ReleaseParams struct {
	Tenant  string
	Key     string
	Attempt int // must be the latest attempt
	Actor   string
	Reason  string
	// VisibilityLag: absence only counts once the operation has been
	// unknown this long (database clock).
	VisibilityLag time.Duration
}

// RecordCheckParams are the arguments of RecordCheck.
type RecordCheckParams struct {
	Tenant         string
	Key            string
	Attempt        int // must be the latest attempt
	Actor          string
	Note           string
	NextCheckAfter time.Duration
}

// EscalateParams are the arguments of Escalate.
type EscalateParams struct {
	Tenant string
	Key    string
	Actor  string
	Reason string
}

// ResolveParams are the arguments of Resolve.
type ResolveParams struct {
	Tenant     string
	Key        string
	To         opjournal.Status // StatusSucceeded or StatusFailedFinal
	ExternalID string           // with StatusSucceeded
	Result     json.RawMessage  // with StatusSucceeded, optional
	ErrorCode  string           // with StatusFailedFinal, optional
	Actor      string
	Reason     string
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
