package opjournal

import (
	"encoding/json"
	"maps"
	"time"
)

// Status is the state of an operation.
//
//	pending ──claim──▶ in_progress ──MarkSucceeded──▶ succeeded
//	   ▲                 │   │
//	   │                 │   └──MarkFailedFinal──▶ failed_final
//	   │        MarkUnknown / lease expiry
//	   │                 ▼
//	   └─(reconciler)── unknown ──claim (retry_same_key only)──▶ in_progress
//
// MarkSucceeded is accepted from any non-terminal status and from stale
// attempts: a confirmed effect is a fact. Succeeded and FailedFinal are terminal.
type Status string

// The statuses of docs/spec.md.
const (
	StatusPending     Status = "pending"
	StatusInProgress  Status = "in_progress"
	StatusUnknown     Status = "unknown"
	StatusSucceeded   Status = "succeeded"
	StatusFailedFinal Status = "failed_final"
)

// Terminal reports whether no transition may leave s.
func (s Status) Terminal() bool { return s == StatusSucceeded || s == StatusFailedFinal }

// Valid reports whether s is one of the five statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusInProgress, StatusUnknown, StatusSucceeded, StatusFailedFinal:
		return true
	}
	return false
}

// Operation is the journal's record of one business intent.
//
// Status is the effective status: an in_progress operation whose lease has
// expired on the database clock is reported as StatusUnknown, because its
// worker vanished mid-call and the effect may have happened.
type Operation struct {
	Tenant              string
	Key                 string
	Action              string
	RequestHash         string
	Payload             json.RawMessage // canonical JSON object, nulls removed
	Status              Status
	AttemptCount        int
	LeaseOwner          string
	LeaseUntil          time.Time // zero without a lease
	ExternalID          string
	DuplicateExternalID string
	Result              json.RawMessage // JSON object, nil until succeeded
	ErrorCode           string
	NeedsReview         bool
	ReviewReason        string
	CreatedAt           time.Time
	UpdatedAt           time.Time

	// UnknownSince is when the outcome became unknown (MarkUnknown, or the
	// lease's end for an expired lease); zero unless Status is unknown.
	UnknownSince time.Time
	// CheckCount counts reconciliation checks that found nothing definite.
	CheckCount int
	// LastCheckedAt is when the last such check was recorded (zero if none).
	LastCheckedAt time.Time
	// NextCheckAt is when the next check is due (zero: as soon as possible).
	NextCheckAt time.Time

	// AttemptStartedAt is when the current (or last) attempt was claimed;
	// zero before the first claim. The policy's max_attempt_seconds, the
	// limit of heartbeats, counts from it.
	AttemptStartedAt time.Time
	// DuplicateExternalIDs are the distinct other external_ids reported
	// after the operation became terminal (detected duplicate effects),
	// oldest first, at most MaxDuplicateExternalIDs. DuplicateExternalID is
	// the first of them.
	DuplicateExternalIDs []string
	// DuplicateReports counts every MarkSucceeded that reported another
	// effect after the operation became terminal, also beyond the ids kept.
	DuplicateReports int
	// HashKeyID names the key of the keyed request hash ("" for the plain
	// SHA-256 of actions without redact_fields). Never shown to clients.
	HashKeyID string

	// Refs are the business references given at registration (order_id,
	// customer): searchable, immutable, part of neither the key nor the
	// request hash. nil when none were given.
	Refs map[string]string
	// ParentKey is the key of the operation this one is a side effect of
	// (a payment's receipt email); "" for none.
	ParentKey string
	// FirstAttemptAt is when the first attempt was claimed; zero before it.
	// A retry_same_key action's retry.provider_dedup_window counts from it.
	FirstAttemptAt time.Time
	// Note is an operator's free text about the operation (SetNote), at
	// most MaxNoteLen characters; "" for none. It is never part of the
	// protocol's decisions.
	Note string
}

// Raw returns the status as stored: an operation read as unknown that
// still carries a lease is an in_progress row whose lease has expired.
func (op *Operation) Raw() Status {
	if !op.LeaseUntil.IsZero() {
		return StatusInProgress
	}
	return op.Status
}

// Clone returns a deep copy of op.
func (op *Operation) Clone() *Operation {
	c := *op
	c.DuplicateExternalIDs = append([]string(nil), op.DuplicateExternalIDs...)
	c.Refs = maps.Clone(op.Refs)
	return &c
}

// Event is one entry of an operation's history. Every state change writes
// one, in the same transaction as the change.
type Event struct {
	ID      int64
	At      time.Time
	From    Status // "" for the registration
	To      Status
	Attempt int
	// Actor is who made the change: with authentication, the
	// authenticated principal (the token's name); without it, what the
	// caller stated, or the lease owner.
	Actor string
	// StatedActor is what the caller SAID it acts as (the request's actor
	// or worker_id), not verified; "" when it said nothing.
	StatedActor string
	Reason      string
	ExternalID  string
}
