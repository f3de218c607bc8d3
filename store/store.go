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
}

// MarkParams are the arguments of MarkUnknown and MarkFailedFinal.
type MarkParams struct {
	Tenant    string
	Key       string
	Attempt   int
	ErrorCode string
}
