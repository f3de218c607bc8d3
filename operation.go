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
	// StatusAwaitingApproval: registered, and the action's policy says a
	// person must approve this exact request (its request hash) before any
	// attempt. Approve makes it pending; Reject, or the approval's timeout
	// under on_timeout: reject, makes it failed_final. Nothing may call the
	// provider while it lasts.
	StatusAwaitingApproval Status = "awaiting_approval"
)

// Terminal reports whether no transition may leave s.
func (s Status) Terminal() bool { return s == StatusSucceeded || s == StatusFailedFinal }

// Valid reports whether s is one of the six statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusInProgress, StatusUnknown, StatusSucceeded, StatusFailedFinal, StatusAwaitingApproval:
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
	// Approval is what the action's policy required at registration and the
	// approvals given so far; nil when no approval was needed. It is
	// recorded once, at registration: a later policy change never re-opens
	// a decided question nor asks for approval of an older operation.
	Approval *Approval
	// Budgets are the holds the operation took of its action's budgets at
	// registration, nil for none. Like Approval they are recorded once.
	Budgets []BudgetHold
}

// Approval is the approval an operation's policy asked for when it was
// registered (policy approval block, evaluated once) and its decisions so
// far. Everything but Approvals is fixed at registration.
type Approval struct {
	// Required: a person had to approve before any attempt (always true
	// when an Approval is recorded).
	Required bool `json:"required"`
	// Approvers are the roles that may decide (operator, admin).
	Approvers []string `json:"approvers"`
	// DistinctFromRequester: the principal who registered the operation
	// may not approve it.
	DistinctFromRequester bool `json:"distinct_from_requester,omitempty"`
	// TwoPerson: two distinct principals must approve.
	TwoPerson bool `json:"two_person,omitempty"`
	// RequestedBy is the principal id of who registered the operation
	// (without authentication: the worker_id it stated, or ""): the
	// identity distinct_from_requester compares, never a label.
	RequestedBy string `json:"requested_by,omitempty"`
	// RequestedByLabel is the requester's label for people to read (a
	// token's name, a JWT's subject); never compared. "" without
	// authentication, and on records written before principal ids were
	// recorded, whose RequestedBy may hold a token's name (see
	// journal.Caller.FormerNames).
	RequestedByLabel string `json:"requested_by_label,omitempty"`
	// OnTimeout is what happens at Deadline: ApprovalTimeoutReject or
	// ApprovalTimeoutEscalate.
	OnTimeout string `json:"on_timeout"`
	// Rule is why the policy asked: the when expression that held, or
	// "required", or "budget" when only a budget's on_exceed asked.
	Rule string `json:"rule"`
	// Budgets names the budgets whose limit the registration would have
	// passed and whose on_exceed asked a person; an approval admits it
	// over them (the history records it). Empty when only the policy's
	// approval block asked.
	Budgets []string `json:"budgets,omitempty"`
	// Approvals are the approvals given so far, oldest first (at most two).
	Approvals []ApprovalDecision `json:"approvals,omitempty"`
	// Deadline is when the question times out (database clock); zero for
	// never. Stores keep it in a column of its own, which the timeout
	// sweep indexes, never in the JSON.
	Deadline time.Time `json:"-"`
}

// The values of Approval.OnTimeout.
const (
	// ApprovalTimeoutReject: at the deadline the operation becomes
	// failed_final with error_code ErrorApprovalTimeout.
	ApprovalTimeoutReject = "reject"
	// ApprovalTimeoutEscalate: at the deadline the operation goes under
	// review (needs_review) and stays awaiting_approval until a person
	// approves or rejects it.
	ApprovalTimeoutEscalate = "escalate"
)

// The error codes an approval ends an operation with.
const (
	// ErrorApprovalRejected is Reject's default error_code.
	ErrorApprovalRejected = "approval_rejected"
	// ErrorApprovalTimeout is the error_code of an approval that timed out
	// under on_timeout: reject.
	ErrorApprovalTimeout = "approval_timeout"
)

// ApprovalDecision is one person's approval.
type ApprovalDecision struct {
	// Principal is who approved: the authenticated principal's id, which
	// two_person compares (without authentication: the stated actor).
	Principal string `json:"principal"`
	// Label is the approver's label for people to read; never compared.
	// "" without authentication and on decisions recorded before principal
	// ids, whose Principal may hold a token's name.
	Label string `json:"label,omitempty"`
	// At is when (database clock).
	At time.Time `json:"at"`
	// Reason is the reason they gave.
	Reason string `json:"reason"`
}

// ApprovedBy reports whether principal has already approved.
func (a *Approval) ApprovedBy(principal string) bool {
	if a == nil {
		return false
	}
	for _, d := range a.Approvals {
		if d.Principal == principal {
			return true
		}
	}
	return false
}

// Clone returns a deep copy of a (nil for nil).
func (a *Approval) Clone() *Approval {
	if a == nil {
		return nil
	}
	c := *a
	c.Approvers = append([]string(nil), a.Approvers...)
	c.Approvals = append([]ApprovalDecision(nil), a.Approvals...)
	c.Budgets = append([]string(nil), a.Budgets...)
	return &c
}

// ApprovalJSON is the approval as the stores keep it (without Deadline,
// which has its own column); nil for nil.
func ApprovalJSON(a *Approval) json.RawMessage {
	if a == nil {
		return nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		panic("opjournal: approval: " + err.Error()) // plain strings, bools and times: cannot fail
	}
	return b
}

// ParseApproval reads an approval as ApprovalJSON wrote it (or a store
// rewrote it); deadline is its column's value. Empty input is nil.
func ParseApproval(b []byte, deadline time.Time) (*Approval, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var a Approval
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, err
	}
	for i := range a.Approvals {
		a.Approvals[i].At = a.Approvals[i].At.UTC()
	}
	a.Deadline = deadline
	return &a, nil
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
	c.Approval = op.Approval.Clone()
	c.Budgets = cloneHolds(op.Budgets)
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
	// authenticated principal's id; without it, what the caller stated,
	// or the lease owner. (Events written before principal ids hold the
	// token's name here.)
	Actor string
	// ActorLabel is the authenticated actor's label for people to read (a
	// token's name, a JWT's subject); "" without authentication.
	ActorLabel string
	// StatedActor is what the caller SAID it acts as (the request's actor
	// or worker_id), not verified; "" when it said nothing.
	StatedActor string
	Reason      string
	ExternalID  string
}
