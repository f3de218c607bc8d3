// Package protocol is the journal's state machine: the table of rules
// (table.go) that says, for every command and case, what must hold, what
// changes and what the history records, and the engine that evaluates it
// (Apply). Both stores apply this one table: SQLite by calling Apply inside
// its write transaction, PostgreSQL by running the rules rendered as SQL
// (store/postgres/render.go). The vocabulary that SDK callers see
// (Operation, Status, Error, Event) stays in the root package; this
// package is the server's.
package protocol

import (
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/opjournal/opjournal"
)

// This file is the machinery of the state machine; table.go is the
// table itself. A Rule is data: its guard (Requirements), the fields it
// sets (Sets) and the event it writes are values that Apply evaluates in
// Go and that store/postgres renders into SQL. So every store applies the
// same rows: SQLite by calling Apply inside its transaction, PostgreSQL by
// running each row as one conditional UPDATE rendered from it.

// CommandKind names a command of the protocol.
type CommandKind string

// The commands.
const (
	CmdRegister        CommandKind = "Register"
	CmdClaim           CommandKind = "Claim"
	CmdExtendLease     CommandKind = "ExtendLease"
	CmdMarkSucceeded   CommandKind = "MarkSucceeded"
	CmdMarkUnknown     CommandKind = "MarkUnknown"
	CmdMarkFailedFinal CommandKind = "MarkFailedFinal"
	CmdReleaseForRetry CommandKind = "ReleaseForRetry"
	CmdRecordCheck     CommandKind = "RecordCheck"
	CmdEscalate        CommandKind = "Escalate"
	CmdResolve         CommandKind = "Resolve"
	CmdAcknowledge     CommandKind = "Acknowledge"
	CmdSetNote         CommandKind = "SetNote"
	// CmdApprove, CmdReject: a person's decision on an operation awaiting
	// approval; CmdExpireApproval: its deadline passed (the serving
	// process's sweep applies it).
	CmdApprove        CommandKind = "Approve"
	CmdReject         CommandKind = "Reject"
	CmdExpireApproval CommandKind = "ExpireApproval"
)

// CommandPolicy is what the action's policy says about a command, resolved
// by the journal before the command reaches a store.
type CommandPolicy struct {
	// RetryAfterUnknown: on_timeout is retry_same_key, so an unknown
	// operation (or an expired lease) may be claimed again.
	RetryAfterUnknown bool
	// DefinitiveAbsence: reconcile.definitive_absence; without it no
	// absence is ever proven and nothing is released for retry.
	DefinitiveAbsence bool
	// ReleaseAfter is how long the outcome must have been unknown before a
	// release: reconcile.visibility_lag plus reconcile.in_flight_window,
	// counted from the moment the attempt really ended.
	ReleaseAfter time.Duration
	// MaxAttempt is max_attempt_seconds: heartbeats never extend a lease
	// beyond this long after the attempt was claimed.
	MaxAttempt time.Duration
	// ProviderWindow is retry.provider_dedup_window of a retry_same_key
	// action: how long the provider remembers our key. Once the first
	// attempt is older, a retry may no longer reuse the key blindly. 0: the
	// provider never forgets.
	ProviderWindow time.Duration
}

// Command is one request to change an operation, validated and resolved
// against the policy by the journal.
type Command struct {
	Kind CommandKind
	// Key is the operation's key (for messages; stores find the row by it).
	Key string
	// Actor is recorded as the event's actor: the authenticated principal,
	// or (without authentication) what the caller stated; "" records the
	// lease owner.
	Actor string
	// ActorLabel is the authenticated actor's label for people (a token's
	// name), recorded beside Actor in the event and in an approval; ""
	// without authentication. Never compared.
	ActorLabel string
	// StatedActor is what the caller said (actor, worker_id), recorded as
	// the event's stated_actor.
	StatedActor string

	// Register.
	Action      string
	RequestHash string
	HashKeyID   string
	Payload     json.RawMessage
	// HashFor returns this request's hash under another hash key, to
	// compare with an operation registered under it; ok is false when the
	// key is no longer known. nil: only HashKeyID is known.
	HashFor func(keyID string) (hash string, ok bool)
	// Claim asks Register to claim a new operation in the same step.
	Claim bool
	// Approval, if not nil, is the approval the action's policy asks of
	// this request (evaluated once, by the journal): a new operation is
	// then created awaiting_approval, never claimed. ApprovalTimeout is
	// how long the question stays open (the deadline is the database
	// clock plus it).
	Approval        *opjournal.Approval
	ApprovalTimeout time.Duration
	// Refs are the business references (validated; nil for none; the
	// stores keep them as RefsJSON gives them). ParentKey is the parent
	// operation's key ("" for none). Both are immutable: a replay must
	// bring the same.
	Refs      map[string]string
	ParentKey string
	// Budgets are what a new operation would hold of its action's budgets
	// (the journal evaluates them on the request; nil for none), and
	// BudgetVerdict is the store's decision on them, made under the
	// budgets' locks on the usage it read (DecideBudgets). A replay or a
	// conflict never looks at either.
	Budgets       []BudgetCharge
	BudgetVerdict BudgetVerdict
	// BudgetApproval is the approval to ask when a budget's on_exceed is
	// approval and the action's approval block asked none (Approval is
	// nil): who decides and what happens at the deadline, with its
	// timeout. nil when no budget of the action asks a person.
	BudgetApproval        *opjournal.Approval
	BudgetApprovalTimeout time.Duration

	// Claim, ExtendLease.
	WorkerID     string
	LeaseSeconds int

	// The fencing token of attempt-bound commands.
	Attempt int

	// MarkSucceeded, Resolve.
	ExternalID string
	Result     json.RawMessage
	// MarkUnknown, MarkFailedFinal, Resolve to failed_final.
	ErrorCode string
	// The caller's words: the release reason, the check's note, the
	// escalation's, resolution's or acknowledgement's reason.
	Reason string
	// RecordCheck.
	NextCheckAfter time.Duration
	// Resolve: StatusSucceeded or StatusFailedFinal.
	Resolution opjournal.Status
	// SetNote: the operator's note ("" clears it).
	Note string
	// Approve and Reject carry the request hash the approver saw in
	// RequestHash, the reason in Reason and (Reject) the error code in
	// ErrorCode.

	Policy CommandPolicy
}

// Outcome is what a rule does to the caller's answer.
type Outcome int

const (
	// Changed: the rule changed the operation (and wrote its event, if any).
	Changed Outcome = iota + 1
	// Unchanged: the request is answered with the operation as it is
	// (a replay, a repeated report, an escalation already made).
	Unchanged
	// NotClaimed: a Claim that did not win; answered with the operation
	// as it is, not as an error.
	NotClaimed
	// Refused: the rule's guard holds and the request is refused with the
	// rule's Refusal; nothing changes.
	Refused
)

// Rule is one row of the table: a command in one case.
type Rule struct {
	// Command is the command the rule belongs to.
	Command CommandKind
	// Case names the case ("confirm", "duplicate effect").
	Case string
	// Doc says in words what the rule is for.
	Doc string
	// Requires is the guard: every requirement must hold. The rules of a
	// command are tried in order and the first whose guard holds applies.
	// When none does, the first failing requirement with a refusal in the
	// command's LAST rule refuses the request.
	Requires []Requirement
	// Sets are the fields the rule changes, all evaluated on the row as it
	// was (like SQL's UPDATE ... SET).
	Sets []Set
	// Event is what the rule writes to the history; nil writes nothing.
	Event *EventSpec
	// Outcome is how the caller is answered.
	Outcome Outcome
	// ReviewReason computes the review_reason the rule may set
	// (ParamReviewReason); op is the row as read.
	ReviewReason func(op *opjournal.Operation, c *Command) string
	// Refusal is the answer of a Refused rule.
	Refusal *RefusalSpec
}

// Name names the rule wherever it shows (traces, the statements' golden
// file): "Claim: win".
func (r *Rule) Name() string { return string(r.Command) + ": " + r.Case }

// Requirement is one condition of a guard and the refusal when it fails.
type Requirement struct {
	Cond Cond
	// Refuse is the refusal; nil when a failure of this condition only
	// means another rule applies.
	Refuse *RefusalSpec
}

// RefusalSpec is how a requirement refuses: the error code and the
// request field it is about are data (the docs and the stores read them
// without evaluating anything); Why words the message for the operation
// at hand.
type RefusalSpec struct {
	Code  opjournal.Code
	Field string // "" for none
	Why   func(op *opjournal.Operation, c *Command, now time.Time) string
	// Details, if set, adds facts for programs and a retry hint
	// (opjournal.Error's Details and RetryAfter).
	Details func(c *Command) (map[string]string, time.Duration)
}

// Error is the refusal of c on op at now.
func (r *RefusalSpec) Error(op *opjournal.Operation, c *Command, now time.Time) *opjournal.Error {
	e := &opjournal.Error{Code: r.Code, Field: r.Field, Message: r.Why(op, c, now)}
	if r.Details != nil {
		e.Details, e.RetryAfter = r.Details(c)
	}
	return e
}

// EventSpec says what a rule writes to the history. From and To are the
// effective statuses before and after (From the stored one with FromRaw). The expressions are
// evaluated on the row AFTER the change (as an INSERT ... SELECT FROM the
// updated row does).
type EventSpec struct {
	// Attempt is the event's attempt number.
	Attempt Expr
	// Actor is the event's actor.
	Actor Expr
	// Reason is the event's reason in words. op is the row as read, or nil
	// when a store applies the command's first rule without reading the
	// row first (PostgreSQL's one-statement path): the first rule of a
	// command must not look at op.
	Reason func(op *opjournal.Operation, c *Command) string
	// ExternalID is the event's external_id; the zero Expr records none.
	ExternalID Expr
	// FromRaw records the stored status as From: an expired lease is
	// in_progress there, so the history shows the in_progress → unknown
	// step that no other event recorded.
	FromRaw bool
}

// CondKind is the kind of a Cond.
type CondKind int

// The kinds of conditions.
const (
	// CondStatus: the effective status is one of Statuses.
	CondStatus CondKind = iota + 1
	// CondReview: needs_review equals Want.
	CondReview
	// CondAttemptIssued: 1 <= attempt <= attempt_count.
	CondAttemptIssued
	// CondAttemptLatest: attempt = attempt_count.
	CondAttemptLatest
	// CondFlag: the boolean Param is true.
	CondFlag
	// CondUnknownFor: the outcome has been unknown for at least the
	// duration Param (on the database clock).
	CondUnknownFor
	// CondAttemptYounger: the attempt was claimed less than the duration
	// Param ago.
	CondAttemptYounger
	// CondSameOrNoExternalID: the reported external_id is empty or the
	// confirmed one.
	CondSameOrNoExternalID
	// CondNewDuplicate: the reported external_id is not empty, not the
	// confirmed one, not yet kept, and there is room to keep it.
	CondNewDuplicate
	// CondResolution: the command's resolution is Status.
	CondResolution
	// CondAbsent: no operation has the key (Register only).
	CondAbsent
	// CondSameRequest: the request hash equals the stored one (Register).
	CondSameRequest
	// CondHashKeyKnown: the server still holds the key the stored request
	// hash was made with (Register only).
	CondHashKeyKnown
	// CondSameRefs: the command brings the stored refs (Register only).
	CondSameRefs
	// CondSameParent: the command brings the stored parent_key (Register only).
	CondSameParent
	// CondWithinProviderWindow: the duration Param is 0, or no attempt was
	// claimed yet, or the first one was claimed less than Param ago: the
	// provider still remembers the key (WithinProviderWindow).
	CondWithinProviderWindow
	// CondSameHash: the command's request hash is the stored one (the
	// hash an approver saw).
	CondSameHash
	// CondBeforeDeadline: the approval has no deadline, or it has not
	// passed on the database clock.
	CondBeforeDeadline
	// CondFirstOfTwo: the approval needs two persons and none has
	// approved yet.
	CondFirstOfTwo
	// CondNotApprovedByActor: the command's actor is not among the
	// approvals given so far.
	CondNotApprovedByActor
	// CondTimeoutEscalates: the approval's on_timeout is escalate.
	CondTimeoutEscalates
	// CondAnd: every one of Sub holds.
	CondAnd
	// CondNot: Sub[0] does not hold.
	CondNot
	// CondOr: one of Sub holds.
	CondOr
)

// Cond is a condition on an operation, a command and the time: data that
// Apply evaluates and that store/postgres renders as SQL.
type Cond struct {
	Kind     CondKind
	Statuses []opjournal.Status
	Want     bool
	Param    Param
	Status   opjournal.Status
	Sub      []Cond
}

// ExprKind is the kind of an Expr.
type ExprKind int

// The kinds of expressions.
const (
	// ExprLit is Value (a Status, string, bool, int, or nil for NULL).
	ExprLit ExprKind = iota + 1
	// ExprParam is the command's Param.
	ExprParam
	// ExprParamOrNull is the text Param, NULL when empty.
	ExprParamOrNull
	// ExprNow is the database clock.
	ExprNow
	// ExprNowPlus is the clock plus the duration Param.
	ExprNowPlus
	// ExprIncrement is the field's value plus one.
	ExprIncrement
	// ExprParamOrKeep is Param when it is not empty, else the field's value.
	ExprParamOrKeep
	// ExprExtendedLease is the clock plus the lease Param, but no later
	// than attempt_started_at plus the duration Param2.
	ExprExtendedLease
	// ExprLeaseEndIfHeld is lease_until for an in_progress row (whose
	// lease has expired), else unknown_since.
	ExprLeaseEndIfHeld
	// ExprAppendDuplicate is the field's list with the reported
	// external_id appended when CondNewDuplicate holds.
	ExprAppendDuplicate
	// ExprField is the value of Field.
	ExprField
	// ExprActorOrOwner is Param ParamActor when not empty, else lease_owner.
	ExprActorOrOwner
	// ExprKeepOrNow is the field's value, or the clock when it has none.
	ExprKeepOrNow
	// ExprAppendApproval is the approval with one more decision: the
	// actor's, at the clock, with the command's reason.
	ExprAppendApproval
)

// Expr is a value a rule writes: data that Apply evaluates and that
// store/postgres renders as SQL.
type Expr struct {
	Kind   ExprKind
	Value  any
	Param  Param
	Param2 Param
	Field  Field
}

// Set assigns Expr to Field.
type Set struct {
	Field Field
	Expr  Expr
}

// Field is a column of an operation that rules may set.
type Field int

// The fields.
const (
	FieldStatus Field = iota + 1
	FieldAttemptCount
	FieldLeaseOwner
	FieldLeaseUntil
	FieldExternalID
	FieldResult
	FieldErrorCode
	FieldNeedsReview
	FieldReviewReason
	FieldUnknownSince
	FieldCheckCount
	FieldLastCheckedAt
	FieldNextCheckAt
	FieldAttemptStartedAt
	FieldDuplicateExternalIDs
	FieldDuplicateReports
	FieldFirstAttemptAt
	FieldNote
	FieldApproval
	FieldApprovalDeadline
	// The fields only Register sets.
	FieldAction
	FieldRequestHash
	FieldHashKeyID
	FieldPayload
	FieldRefs
	FieldParentKey
	FieldBudgets
)

// Param is a value a command brings to a rule.
type Param int

// The parameters.
const (
	ParamWorkerID Param = iota + 1
	ParamLeaseSeconds
	ParamAttempt
	ParamExternalID
	ParamResult
	ParamErrorCode
	ParamActor
	ParamStatedActor
	// ParamActorLabel is Command.ActorLabel.
	ParamActorLabel
	ParamEventReason  // computed: the rule's EventSpec.Reason
	ParamReviewReason // computed: the rule's ReviewReason
	ParamNextCheckAfter
	ParamRetryAfterUnknown
	ParamDefinitiveAbsence
	ParamReleaseAfter
	ParamMaxAttempt
	ParamResolution
	ParamAction
	ParamRequestHash
	ParamHashKeyID
	ParamPayload
	// ParamClaim: Register is asked to claim.
	ParamClaim
	ParamRefs
	ParamParentKey
	ParamProviderWindow
	ParamNote
	// ParamApprovalRequired: Register brings an approval (Command.Approval).
	ParamApprovalRequired
	ParamApproval
	ParamApprovalTimeout
	// ParamReason is the caller's reason (Command.Reason) as a value, for
	// the rules that store it beside the event (an approval).
	ParamReason
	// ParamBudgetRefused: the store's budget verdict refuses a new
	// operation (an on_exceed: reject budget it would pass).
	ParamBudgetRefused
	// ParamBudgetApproval: the verdict asks a person (an on_exceed:
	// approval budget it would pass).
	ParamBudgetApproval
	// ParamBudgets is the holds a new operation takes (the verdict's).
	ParamBudgets
)

// ParamType is the type of a Param's value.
type ParamType int

// The parameter types.
const (
	TypeText     ParamType = iota + 1 // string
	TypeInt                           // int
	TypeBool                          // bool
	TypeDuration                      // time.Duration
	TypeJSON                          // json.RawMessage, nil for NULL
)

// Rules returns the rules of a command, in the order they are tried.
func Rules(cmd CommandKind) []*Rule { return rulesByCommand[cmd] }

// AllRules returns every rule of the table, in table order.
func AllRules() []*Rule { return slices.Clone(table) }

var rulesByCommand = func() map[CommandKind][]*Rule {
	m := map[CommandKind][]*Rule{}
	for _, r := range table {
		m[r.Command] = append(m[r.Command], r)
	}
	return m
}()

// Decision is what Apply decided.
type Decision struct {
	// Rule is the rule that applied.
	Rule *Rule
	// Op is the operation after the rule, as read at the same instant
	// (its effective status); op itself when the rule changed nothing.
	Op *opjournal.Operation
	// Event is the history entry the rule writes, nil if none (its ID is
	// assigned by the store).
	Event *opjournal.Event
}

// Apply applies command c to op, the operation as read at now (nil when
// no operation has the key), and returns the rule that applies with the
// next state and event, or the refusal (an *Error). It is pure: op is not
// modified, and the same inputs always give the same answer. Every store
// gives the answers Apply gives (store/storetest checks it).
func Apply(op *opjournal.Operation, c *Command, now time.Time) (Decision, error) {
	if op == nil && c.Kind != CmdRegister {
		return Decision{}, opjournal.Errorf(opjournal.CodeNotFound, "operation_key", "no operation %q", c.Key)
	}
	rules := Rules(c.Kind)
	if len(rules) == 0 {
		return Decision{}, opjournal.Errorf(opjournal.CodeInternal, "", "no rule for command %q", c.Kind)
	}
	for _, r := range rules {
		if r.Holds(op, c, now) {
			if r.Outcome == Refused {
				return Decision{}, r.Refusal.Error(op, c, now)
			}
			return r.apply(op, c, now), nil
		}
	}
	return Decision{}, Refusal(rules[len(rules)-1], op, c, now)
}

// Holds reports whether every requirement of r holds.
func (r *Rule) Holds(op *opjournal.Operation, c *Command, now time.Time) bool {
	for _, req := range r.Requires {
		if !req.Cond.Eval(op, c, now) {
			return false
		}
	}
	return true
}

// Refusal returns the refusal of r's first failing requirement that has
// one (CodeInternal if none: a hole in the table).
func Refusal(r *Rule, op *opjournal.Operation, c *Command, now time.Time) *opjournal.Error {
	for _, req := range r.Requires {
		if req.Refuse != nil && !req.Cond.Eval(op, c, now) {
			return req.Refuse.Error(op, c, now)
		}
	}
	return opjournal.Errorf(opjournal.CodeInternal, "", "no rule of %s applies to operation %q (%s)", c.Kind, opKey(op), statusOf(op, now))
}

func opKey(op *opjournal.Operation) string {
	if op == nil {
		return ""
	}
	return op.Key
}

func statusOf(op *opjournal.Operation, now time.Time) opjournal.Status {
	if op == nil {
		return ""
	}
	return EffectiveStatus(op, now)
}

// apply evaluates r's sets and event on op.
func (r *Rule) apply(op *opjournal.Operation, c *Command, now time.Time) Decision {
	if r.Outcome != Changed {
		return Decision{Rule: r, Op: op}
	}
	var next *opjournal.Operation
	if op == nil {
		next = &opjournal.Operation{Key: c.Key, CreatedAt: now}
	} else {
		next = op.Clone()
	}
	from := opjournal.Status("")
	switch {
	case op != nil && r.Event != nil && r.Event.FromRaw:
		from = op.Raw()
	case op != nil:
		from = EffectiveStatus(op, now)
	}
	// Evaluate every value on the row as it was, then assign: the SQL
	// UPDATE's semantics.
	vals := make([]any, len(r.Sets))
	for i, s := range r.Sets {
		vals[i] = s.Expr.Eval(op, s.Field, r, c, now)
	}
	for i, s := range r.Sets {
		setField(next, s.Field, vals[i])
	}
	next.UpdatedAt = now
	if op == nil {
		next.Action, next.RequestHash, next.HashKeyID = c.Action, c.RequestHash, c.HashKeyID
		next.Payload, next.Refs, next.ParentKey = c.Payload, maps.Clone(c.Refs), c.ParentKey
		next.Budgets = slices.Clone(c.BudgetVerdict.Holds)
	}
	next.Status = EffectiveStatus(next, now)
	next.UnknownSince = EffectiveUnknownSince(next, now)
	d := Decision{Rule: r, Op: next}
	if r.Event != nil {
		ev := &opjournal.Event{At: now, From: from, To: next.Status, StatedActor: c.StatedActor, ActorLabel: c.ActorLabel}
		ev.Attempt = asInt(r.Event.Attempt.Eval(next, 0, r, c, now))
		ev.Actor = asString(r.Event.Actor.Eval(next, 0, r, c, now))
		ev.Reason = r.Event.Reason(op, c)
		if r.Event.ExternalID.Kind != 0 {
			ev.ExternalID = asString(r.Event.ExternalID.Eval(next, 0, r, c, now))
		}
		d.Event = ev
	}
	return d
}

// sameRequest compares c's request hash with op's, under op's hash key.
func sameRequest(op *opjournal.Operation, c *Command) bool {
	if op.HashKeyID == c.HashKeyID {
		return op.RequestHash == c.RequestHash
	}
	if c.HashFor == nil {
		return false
	}
	h, ok := c.HashFor(op.HashKeyID)
	return ok && h == op.RequestHash
}

// paramDuration reads a duration parameter; an int one is seconds
// (lease_seconds).
func paramDuration(v any, p Param) time.Duration {
	if p.Type() == TypeInt {
		return time.Duration(asInt(v)) * time.Second
	}
	return asDuration(v)
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case json.RawMessage:
		return x == nil
	case time.Time:
		return x.IsZero()
	}
	return false
}

func asInt(v any) int {
	i, _ := v.(int)
	return i
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}

func asDuration(v any) time.Duration {
	d, _ := v.(time.Duration)
	return d
}

func asTime(v any) time.Time {
	t, _ := v.(time.Time)
	return t
}
