package protocol

import (
	"fmt"
	"time"

	"github.com/opjournal/opjournal"
)

// The protocol: every command, the case it handles, its guard, what it
// sets and the event it writes. The table of docs/protocol.md is
// generated from this table (go run ./protocol/cmd/protocolgen), and
// store/storetest checks every store against Apply over it.
//
// Three facts hold outside the table: every command but Register refuses
// an unknown key with NOT_FOUND; an operation is read with its EFFECTIVE
// status: in_progress whose lease has ended (database clock) is unknown;
// and an operation is deleted only by purging (Purgeable), after which its
// key is unknown again: registering it makes a new operation.
var table = []*Rule{
	// Register: the unique key makes it atomic. A new key's budgets are
	// decided by the store before the table (DecideBudgets, under the
	// budgets' locks), and recorded with the row: its holds.
	{
		Command: CmdRegister, Case: "new, over budget",
		Doc:      "a new key that would pass a budget whose on_exceed is reject (the store's verdict on the window's use): refused; nothing is registered or reserved",
		Requires: reqs(absent(), flag(ParamBudgetRefused)),
		Outcome:  Refused,
		Refusal:  refuseBudgetExceeded,
	},
	{
		Command: CmdRegister, Case: "new, awaiting approval",
		Doc:      "a new key whose request the action's policy wants a person to approve (evaluated once, here), or that would pass a budget whose on_exceed is approval: inserted awaiting_approval with the approval (naming those budgets) and its deadline, and its holds; never claimed, with or without a claim asked",
		Requires: reqs(absent(), personAsked()),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusAwaitingApproval)), set(FieldAttemptCount, lit(0)),
			set(FieldApproval, param(ParamApproval)), set(FieldApprovalDeadline, nowPlus(ParamApprovalTimeout)),
		},
		Event:   event(fieldAttempt, opjournal.ReasonRegisteredAwaiting, Expr{}),
		Outcome: Changed,
	},
	{
		Command: CmdRegister, Case: "new, claimed",
		Doc:      "a new key with a claim: inserted already in progress, attempt 1, with its holds (one statement, one commit)",
		Requires: reqs(absent(), not(personAsked()), claimAsked()),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusInProgress)), set(FieldAttemptCount, lit(1)),
			set(FieldLeaseOwner, param(ParamWorkerID)), set(FieldLeaseUntil, nowPlus(ParamLeaseSeconds)),
			set(FieldAttemptStartedAt, now()), set(FieldFirstAttemptAt, now()),
		},
		Event:   event(fieldAttempt, opjournal.ReasonRegisteredClaimed, Expr{}),
		Outcome: Changed,
	},
	{
		Command: CmdRegister, Case: "new",
		Doc:      "a new key: inserted as pending, with its holds",
		Requires: reqs(absent(), not(personAsked()), not(claimAsked())),
		Sets:     []Set{set(FieldStatus, lit(opjournal.StatusPending)), set(FieldAttemptCount, lit(0))},
		Event:    event(fieldAttempt, opjournal.ReasonRegistered, Expr{}),
		Outcome:  Changed,
	},
	{
		Command: CmdRegister, Case: "replay",
		Doc: "the same key, request, refs and parent: the stored record (with a claim: then Claim)",
		Requires: []Requirement{
			{Cond: Cond{Kind: CondHashKeyKnown}, Refuse: refuseHashKeyGone},
			{Cond: Cond{Kind: CondSameRequest}, Refuse: refusePayloadMismatch},
			{Cond: Cond{Kind: CondSameRefs}, Refuse: refuseOtherRefs},
			{Cond: Cond{Kind: CondSameParent}, Refuse: refuseOtherParent},
		},
		Outcome: Unchanged,
	},

	// Claim: one conditional update; exactly one concurrent caller wins.
	{
		Command: CmdClaim, Case: "win",
		Doc: "pending, or unknown (an expired lease included) under on_timeout: retry_same_key while the provider still remembers the key (retry.provider_dedup_window from the first attempt); never under review",
		Requires: reqs(notUnderReview(),
			or(status(opjournal.StatusPending), and(flag(ParamRetryAfterUnknown), status(opjournal.StatusUnknown),
				Cond{Kind: CondWithinProviderWindow, Param: ParamProviderWindow}))),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusInProgress)), set(FieldAttemptCount, Expr{Kind: ExprIncrement}),
			set(FieldLeaseOwner, param(ParamWorkerID)), set(FieldLeaseUntil, nowPlus(ParamLeaseSeconds)),
			set(FieldUnknownSince, null()), set(FieldNextCheckAt, null()), set(FieldAttemptStartedAt, now()),
			set(FieldFirstAttemptAt, Expr{Kind: ExprKeepOrNow}),
			set(FieldErrorCode, null()), // a new attempt starts clean; the last one's error stays in the history
		},
		Event:   event(fieldAttempt, opjournal.ReasonClaimed, Expr{}),
		Outcome: Changed,
	},
	{
		Command: CmdClaim, Case: "lost",
		Doc:     "anything else: claimed = false with the current state (retry_after while another lease is live; awaiting_approval answers await_approval)",
		Outcome: NotClaimed,
	},

	// ExtendLease: a heartbeat of the current holder.
	{
		Command: CmdExtendLease, Case: "extend",
		Doc: "the holder's live lease: lease_until = now + lease, at most attempt_started_at + max_attempt_seconds",
		Requires: []Requirement{
			issued(), latestForHolder(),
			{Cond: status(opjournal.StatusInProgress), Refuse: refuseNotHolder},
			{Cond: Cond{Kind: CondAttemptYounger, Param: ParamMaxAttempt}, Refuse: refuseAttemptTooOld},
		},
		Sets:    []Set{set(FieldLeaseUntil, Expr{Kind: ExprExtendedLease, Param: ParamLeaseSeconds, Param2: ParamMaxAttempt})},
		Event:   event(paramAttempt, opjournal.ReasonLeaseExtended, Expr{}),
		Outcome: Changed,
	},

	// MarkSucceeded: a confirmed effect is a fact, from any issued attempt.
	{
		Command: CmdMarkSucceeded, Case: "confirm",
		Doc:      "any issued attempt (stale ones too) of a non-terminal operation",
		Requires: []Requirement{issued(), {Cond: status(opjournal.StatusPending, opjournal.StatusInProgress, opjournal.StatusUnknown)}},
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusSucceeded)), set(FieldExternalID, param(ParamExternalID)),
			set(FieldResult, param(ParamResult)), set(FieldLeaseUntil, null()),
			set(FieldUnknownSince, null()), set(FieldNextCheckAt, null()),
		},
		Event:   event(paramAttempt, opjournal.ReasonConfirmed, param(ParamExternalID)),
		Outcome: Changed,
	},
	{
		Command: CmdMarkSucceeded, Case: "repeat",
		Doc:      "succeeded, and the same external_id again (or none): a no-op",
		Requires: []Requirement{issued(), {Cond: status(opjournal.StatusSucceeded)}, {Cond: Cond{Kind: CondSameOrNoExternalID}}},
		Outcome:  Unchanged,
	},
	{
		Command: CmdMarkSucceeded, Case: "effect after failed_final",
		Doc:      "failed_final, not under review: an effect the journal thought absent; a person must look",
		Requires: []Requirement{issued(), {Cond: status(opjournal.StatusFailedFinal)}, {Cond: notUnderReview()}},
		Sets: []Set{
			set(FieldNeedsReview, lit(true)), set(FieldReviewReason, param(ParamReviewReason)),
			set(FieldDuplicateExternalIDs, Expr{Kind: ExprAppendDuplicate}), set(FieldDuplicateReports, Expr{Kind: ExprIncrement}),
		},
		Event:        event(paramAttempt, "", param(ParamExternalID), duplicateReason),
		ReviewReason: duplicateReason,
		Outcome:      Changed,
	},
	{
		Command: CmdMarkSucceeded, Case: "duplicate effect",
		Doc:      "terminal, not under review, another external_id not seen before: keep the first, record this one, a person must look",
		Requires: []Requirement{issued(), {Cond: status(opjournal.StatusSucceeded, opjournal.StatusFailedFinal)}, {Cond: Cond{Kind: CondNewDuplicate}}, {Cond: notUnderReview()}},
		Sets: []Set{
			set(FieldNeedsReview, lit(true)), set(FieldReviewReason, param(ParamReviewReason)),
			set(FieldDuplicateExternalIDs, Expr{Kind: ExprAppendDuplicate}), set(FieldDuplicateReports, Expr{Kind: ExprIncrement}),
		},
		Event:        event(paramAttempt, "", param(ParamExternalID), duplicateReason),
		ReviewReason: duplicateReason,
		Outcome:      Changed,
	},
	{
		Command: CmdMarkSucceeded, Case: "another duplicate",
		Doc:      "terminal, under review, another external_id not seen before: recorded too (up to 10 are kept)",
		Requires: []Requirement{issued(), {Cond: status(opjournal.StatusSucceeded, opjournal.StatusFailedFinal)}, {Cond: Cond{Kind: CondNewDuplicate}}},
		Sets: []Set{
			set(FieldDuplicateExternalIDs, Expr{Kind: ExprAppendDuplicate}), set(FieldDuplicateReports, Expr{Kind: ExprIncrement}),
		},
		Event:   event(paramAttempt, "", param(ParamExternalID), duplicateReason),
		Outcome: Changed,
	},
	{
		Command: CmdMarkSucceeded, Case: "repeated report",
		Doc:      "terminal, an external_id already recorded (or no room left): only counted, no event, so reports cannot flood the history",
		Requires: []Requirement{issued(), {Cond: status(opjournal.StatusSucceeded, opjournal.StatusFailedFinal)}},
		Sets:     []Set{set(FieldDuplicateReports, Expr{Kind: ExprIncrement})},
		Outcome:  Changed,
	},

	// MarkUnknown, MarkFailedFinal: only the current, live lease holder.
	{
		Command: CmdMarkUnknown, Case: "mark",
		Doc:      "the holder of the live lease (latest attempt, in progress)",
		Requires: holderOnly(),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusUnknown)), set(FieldErrorCode, Expr{Kind: ExprParamOrNull, Param: ParamErrorCode}),
			set(FieldLeaseUntil, null()), set(FieldUnknownSince, now()),
		},
		Event:   event(paramAttempt, "", Expr{}, markReason(opjournal.ReasonUnknown)),
		Outcome: Changed,
	},
	{
		Command: CmdMarkFailedFinal, Case: "mark",
		Doc:      "the holder of the live lease (latest attempt, in progress)",
		Requires: holderOnly(),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusFailedFinal)), set(FieldErrorCode, Expr{Kind: ExprParamOrNull, Param: ParamErrorCode}),
			set(FieldResult, param(ParamResult)), // the refusal as the provider gave it, if the caller stores one
			set(FieldLeaseUntil, null()), set(FieldUnknownSince, null()),
		},
		Event:   event(paramAttempt, "", Expr{}, markReason(opjournal.ReasonRejected)),
		Outcome: Changed,
	},

	// The reconciler's commands.
	{
		Command: CmdReleaseForRetry, Case: "release",
		Doc: "unknown, latest attempt, not under review, the policy's search is definitive, and unknown for visibility_lag + in_flight_window",
		Requires: []Requirement{
			issued(), latest(),
			{Cond: status(opjournal.StatusUnknown), Refuse: refuseNotUnknown("only an unknown outcome is released for retry")},
			{Cond: notUnderReview(), Refuse: refuseUnderReview},
			{Cond: flag(ParamDefinitiveAbsence), Refuse: refuseNotDefinitive},
			{Cond: Cond{Kind: CondUnknownFor, Param: ParamReleaseAfter}, Refuse: refuseTooEarly},
		},
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusPending)), set(FieldLeaseUntil, null()),
			set(FieldUnknownSince, null()), set(FieldNextCheckAt, null()),
		},
		Event:   event(fieldAttempt, "", Expr{}, prefixed(opjournal.ReasonReleasedPrefix)),
		Outcome: Changed,
	},
	{
		Command: CmdRecordCheck, Case: "check",
		Doc: "unknown, latest attempt: count the check, schedule the next; an expired lease becomes unknown for good",
		Requires: []Requirement{
			issued(), latest(),
			{Cond: status(opjournal.StatusUnknown), Refuse: refuseNotUnknown("there is nothing to check")},
		},
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusUnknown)), set(FieldUnknownSince, Expr{Kind: ExprLeaseEndIfHeld}),
			set(FieldLeaseUntil, null()), set(FieldCheckCount, Expr{Kind: ExprIncrement}),
			set(FieldLastCheckedAt, now()), set(FieldNextCheckAt, nowPlus(ParamNextCheckAfter)),
		},
		Event:   &EventSpec{Attempt: fieldAttempt, Actor: actorOrOwner(), Reason: prefixed(opjournal.ReasonCheckedPrefix), FromRaw: true},
		Outcome: Changed,
	},
	{
		Command: CmdEscalate, Case: "escalate",
		Doc:      "non-terminal, not yet under review: needs_review with the reason",
		Requires: reqs(status(opjournal.StatusPending, opjournal.StatusInProgress, opjournal.StatusUnknown), notUnderReview()),
		Sets:     []Set{set(FieldNeedsReview, lit(true)), set(FieldReviewReason, param(ParamReviewReason))},
		Event:    event(fieldAttempt, "", Expr{}, prefixed(opjournal.ReasonEscalatedPrefix)),
		ReviewReason: func(_ *opjournal.Operation, c *Command) string {
			return c.Reason
		},
		Outcome: Changed,
	},
	{
		Command: CmdEscalate, Case: "already under review",
		Doc:      "under review: unchanged",
		Requires: []Requirement{{Cond: underReview(), Refuse: refuseEscalateTerminal}},
		Outcome:  Unchanged,
	},

	// The operators' decisions.
	{
		Command: CmdResolve, Case: "as succeeded",
		Doc:      "non-terminal and unknown or under review: succeeded with the operator's external_id",
		Requires: resolveGuard(opjournal.StatusSucceeded),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusSucceeded)), set(FieldExternalID, param(ParamExternalID)),
			set(FieldResult, Expr{Kind: ExprParamOrKeep, Param: ParamResult}), set(FieldNeedsReview, lit(false)),
			set(FieldLeaseUntil, null()), set(FieldUnknownSince, null()), set(FieldNextCheckAt, null()),
		},
		Event:   event(fieldAttempt, "", param(ParamExternalID), prefixed(opjournal.ReasonResolvedPrefix)),
		Outcome: Changed,
	},
	{
		Command: CmdResolve, Case: "as failed_final",
		Doc:      "non-terminal and unknown or under review: failed_final; terminal states never go backwards",
		Requires: resolveGuard(opjournal.StatusFailedFinal),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusFailedFinal)), set(FieldErrorCode, Expr{Kind: ExprParamOrKeep, Param: ParamErrorCode}),
			set(FieldNeedsReview, lit(false)),
			set(FieldLeaseUntil, null()), set(FieldUnknownSince, null()), set(FieldNextCheckAt, null()),
		},
		Event:   event(fieldAttempt, "", Expr{}, prefixed(opjournal.ReasonResolvedPrefix)),
		Outcome: Changed,
	},
	{
		Command: CmdAcknowledge, Case: "acknowledge",
		Doc: "terminal and under review (a duplicate effect): the review ends, the status stays",
		Requires: []Requirement{
			{Cond: status(opjournal.StatusSucceeded, opjournal.StatusFailedFinal), Refuse: refuseAcknowledgeOpen},
			{Cond: underReview(), Refuse: refuseNothingToAcknowledge},
		},
		Sets:    []Set{set(FieldNeedsReview, lit(false))},
		Event:   event(fieldAttempt, "", Expr{}, prefixed(opjournal.ReasonAcknowledgedPrefix)),
		Outcome: Changed,
	},

	// An operator's note: words for people, never part of the state
	// machine, so it has no guard and touches no other field; a terminal
	// operation takes one too (the note explains, it decides nothing).
	{
		Command: CmdSetNote, Case: "note",
		Doc:     "any status, terminal ones included: the note is set (an empty one clears it); nothing else changes",
		Sets:    []Set{set(FieldNote, Expr{Kind: ExprParamOrNull, Param: ParamNote})},
		Event:   event(fieldAttempt, opjournal.ReasonNote, Expr{}),
		Outcome: Changed,
	},

	// A person's decision on an operation awaiting approval, bound to the
	// request hash they saw. Who may decide (the recorded approvers' roles,
	// not the requester) is checked by the journal against the row's
	// approval, which never changes after registration.
	{
		Command: CmdApprove, Case: "first of two",
		Doc:      "awaiting approval, the hash the approver saw, not past the deadline (or escalated), two_person and no approval yet: the approval is recorded, the operation still waits",
		Requires: append(approvalOpen(), Requirement{Cond: Cond{Kind: CondFirstOfTwo}}),
		Sets:     []Set{set(FieldApproval, Expr{Kind: ExprAppendApproval})},
		Event:    event(fieldAttempt, "", Expr{}, prefixed(opjournal.ReasonApprovedFirstPrefix)),
		Outcome:  Changed,
	},
	{
		Command: CmdApprove, Case: "release",
		Doc:      "awaiting approval, the hash the approver saw, not past the deadline (or escalated), and not an approver already: pending (claimable), the review (if any) ends",
		Requires: append(approvalOpen(), Requirement{Cond: Cond{Kind: CondNotApprovedByActor}, Refuse: refuseSameApprover}),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusPending)), set(FieldApproval, Expr{Kind: ExprAppendApproval}),
			set(FieldNeedsReview, lit(false)),
		},
		Event:   event(fieldAttempt, "", Expr{}, prefixed(opjournal.ReasonApprovedPrefix)),
		Outcome: Changed,
	},
	{
		Command: CmdReject, Case: "reject",
		Doc:      "awaiting approval, the hash the approver saw, not past the deadline (or escalated): failed_final with the error code (approval_rejected by default); every later Register replays it",
		Requires: approvalOpen(),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusFailedFinal)), set(FieldErrorCode, Expr{Kind: ExprParamOrNull, Param: ParamErrorCode}),
			set(FieldNeedsReview, lit(false)),
		},
		Event:   event(fieldAttempt, "", Expr{}, prefixed(opjournal.ReasonDeniedPrefix)),
		Outcome: Changed,
	},
	{
		Command: CmdExpireApproval, Case: "reject",
		Doc:      "awaiting approval past its deadline (database clock), not under review, on_timeout reject: failed_final with error_code approval_timeout",
		Requires: reqs(status(opjournal.StatusAwaitingApproval), notUnderReview(), not(Cond{Kind: CondBeforeDeadline}), not(Cond{Kind: CondTimeoutEscalates})),
		Sets: []Set{
			set(FieldStatus, lit(opjournal.StatusFailedFinal)), set(FieldErrorCode, lit(opjournal.ErrorApprovalTimeout)),
		},
		Event:   event(fieldAttempt, opjournal.ReasonApprovalTimedOutPrefix+"rejected", Expr{}),
		Outcome: Changed,
	},
	{
		Command: CmdExpireApproval, Case: "escalate",
		Doc: "awaiting approval past its deadline, not under review, on_timeout escalate: needs_review; it stays awaiting_approval until a person approves or rejects it",
		Requires: []Requirement{
			{Cond: status(opjournal.StatusAwaitingApproval), Refuse: refuseNotAwaiting},
			{Cond: notUnderReview(), Refuse: refuseAlreadyEscalated},
			{Cond: not(Cond{Kind: CondBeforeDeadline}), Refuse: refuseDeadlineNotReached},
			{Cond: Cond{Kind: CondTimeoutEscalates}},
		},
		Sets:         []Set{set(FieldNeedsReview, lit(true)), set(FieldReviewReason, param(ParamReviewReason))},
		Event:        event(fieldAttempt, opjournal.ReasonApprovalTimedOutPrefix+"escalated to a person", Expr{}),
		ReviewReason: constReason("the approval timed out: a person must approve or reject it"),
		Outcome:      Changed,
	},
}

// --- building blocks of the table -----------------------------------------

func reqs(cs ...Cond) []Requirement {
	out := make([]Requirement, len(cs))
	for i, c := range cs {
		out[i] = Requirement{Cond: c}
	}
	return out
}

func set(f Field, e Expr) Set            { return Set{Field: f, Expr: e} }
func lit(v any) Expr                     { return Expr{Kind: ExprLit, Value: v} }
func null() Expr                         { return Expr{Kind: ExprLit} }
func now() Expr                          { return Expr{Kind: ExprNow} }
func param(p Param) Expr                 { return Expr{Kind: ExprParam, Param: p} }
func nowPlus(p Param) Expr               { return Expr{Kind: ExprNowPlus, Param: p} }
func status(s ...opjournal.Status) Cond  { return Cond{Kind: CondStatus, Statuses: s} }
func underReview() Cond                  { return Cond{Kind: CondReview, Want: true} }
func notUnderReview() Cond               { return Cond{Kind: CondReview, Want: false} }
func flag(p Param) Cond                  { return Cond{Kind: CondFlag, Param: p} }
func absent() Cond                       { return Cond{Kind: CondAbsent} }
func claimAsked() Cond                   { return flag(ParamClaim) }
func approvalAsked() Cond                { return flag(ParamApprovalRequired) }
func personAsked() Cond                  { return or(approvalAsked(), flag(ParamBudgetApproval)) }
func not(c Cond) Cond                    { return Cond{Kind: CondNot, Sub: []Cond{c}} }
func or(cs ...Cond) Cond                 { return Cond{Kind: CondOr, Sub: cs} }
func and(cs ...Cond) Cond                { return Cond{Kind: CondAnd, Sub: cs} }
func resolution(s opjournal.Status) Cond { return Cond{Kind: CondResolution, Status: s} }
func fieldOf(f Field) Expr               { return Expr{Kind: ExprField, Field: f} }
func actorOrOwner() Expr                 { return Expr{Kind: ExprActorOrOwner} }
func constReason(s string) func(*opjournal.Operation, *Command) string {
	return func(*opjournal.Operation, *Command) string { return s }
}

var (
	fieldAttempt = fieldOf(FieldAttemptCount) // the attempt after the change
	paramAttempt = param(ParamAttempt)        // the caller's attempt
)

// event builds an EventSpec with the actor rule every command shares:
// the authenticated principal (or what the caller stated), else the lease
// owner. reason is a constant, or computed by the optional fn.
func event(attempt Expr, reason string, extID Expr, fn ...func(*opjournal.Operation, *Command) string) *EventSpec {
	r := constReason(reason)
	if len(fn) > 0 {
		r = fn[0]
	}
	return &EventSpec{Attempt: attempt, Actor: actorOrOwner(), Reason: r, ExternalID: extID}
}

func markReason(what string) func(*opjournal.Operation, *Command) string {
	return func(_ *opjournal.Operation, c *Command) string {
		if c.ErrorCode != "" {
			return what + ": " + c.ErrorCode
		}
		return what
	}
}

func prefixed(prefix string) func(*opjournal.Operation, *Command) string {
	return func(_ *opjournal.Operation, c *Command) string { return prefix + c.Reason }
}

// duplicateReason is the review reason and event reason of an effect
// reported after the operation became terminal. op is the row as read
// (the rules that use it are never a command's first rule).
func duplicateReason(op *opjournal.Operation, c *Command) string {
	id := fmt.Sprintf("%q", c.ExternalID)
	if c.ExternalID == "" {
		id = "without an external_id"
	}
	if op.Status == opjournal.StatusFailedFinal {
		return fmt.Sprintf(opjournal.ReasonLateEffectPrefix+"%s confirmed after the operation was marked failed_final", id)
	}
	return fmt.Sprintf(opjournal.ReasonDuplicatePrefix+"external_id %s reported after %q was confirmed", id, op.ExternalID)
}

func issued() Requirement {
	return Requirement{Cond: Cond{Kind: CondAttemptIssued}, Refuse: &RefusalSpec{Code: opjournal.CodeInvalidArgument, Field: "attempt",
		Why: func(op *opjournal.Operation, c *Command, _ time.Time) string {
			return fmt.Sprintf("attempt %d was never issued for operation %q (attempts so far: %d)", c.Attempt, op.Key, op.AttemptCount)
		}}}
}

// latest refuses an attempt that is not the latest (the reconciler's commands).
func latest() Requirement {
	return Requirement{Cond: Cond{Kind: CondAttemptLatest}, Refuse: &RefusalSpec{Code: opjournal.CodeStaleAttempt, Field: "attempt",
		Why: func(op *opjournal.Operation, c *Command, _ time.Time) string {
			return fmt.Sprintf("attempt %d of operation %q was superseded by attempt %d", c.Attempt, op.Key, op.AttemptCount)
		}}}
}

// latestForHolder refuses an attempt that is not the latest, in the words
// of the lease holder's commands.
func latestForHolder() Requirement {
	return Requirement{Cond: Cond{Kind: CondAttemptLatest}, Refuse: notHolder(func(op *opjournal.Operation, c *Command, _ time.Time) string {
		return fmt.Sprintf("attempt %d was superseded by attempt %d", c.Attempt, op.AttemptCount)
	})}
}

func holderOnly() []Requirement {
	return []Requirement{
		issued(), latestForHolder(),
		{Cond: not(status(opjournal.StatusUnknown)), Refuse: refuseNotHolder},
		{Cond: status(opjournal.StatusInProgress), Refuse: refuseNotHolder},
	}
}

func resolveGuard(to opjournal.Status) []Requirement {
	return []Requirement{
		{Cond: resolution(to)},
		{Cond: status(opjournal.StatusPending, opjournal.StatusInProgress, opjournal.StatusUnknown), Refuse: refuseResolveTerminal},
		{Cond: or(status(opjournal.StatusUnknown), underReview()), Refuse: invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
			return fmt.Sprintf("operation %q is %s and not under review: an operator resolves only unknown or needs_review operations", op.Key, EffectiveStatus(op, now))
		})},
	}
}

// approvalOpen is what every decision on an approval requires: the
// operation awaits one, the approver saw this very request, and the
// question is still open (its deadline not passed, or it was escalated to
// a person by the timeout).
func approvalOpen() []Requirement {
	return []Requirement{
		{Cond: status(opjournal.StatusAwaitingApproval), Refuse: refuseNotAwaiting},
		{Cond: Cond{Kind: CondSameHash}, Refuse: refuseOtherHash},
		{Cond: or(Cond{Kind: CondBeforeDeadline}, underReview()), Refuse: refuseDeadlinePassed},
	}
}

// notHolder is a STALE_ATTEMPT refusal of the lease holder's commands:
// why says how the caller lost the lease.
func notHolder(why func(op *opjournal.Operation, c *Command, now time.Time) string) *RefusalSpec {
	return &RefusalSpec{Code: opjournal.CodeStaleAttempt, Field: "attempt", Why: func(op *opjournal.Operation, c *Command, now time.Time) string {
		return fmt.Sprintf("attempt %d of operation %q no longer holds the lease: %s", c.Attempt, op.Key, why(op, c, now))
	}}
}

// invalidState is an INVALID_STATE refusal about no field of the request.
func invalidState(why func(op *opjournal.Operation, c *Command, now time.Time) string) *RefusalSpec {
	return &RefusalSpec{Code: opjournal.CodeInvalidState, Why: why}
}

var refuseNotHolder = notHolder(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	if st := EffectiveStatus(op, now); st != opjournal.StatusUnknown {
		return fmt.Sprintf("the operation is %s, not in progress", st)
	}
	return "the operation is unknown (its lease expired or it was marked unknown) and goes to reconciliation"
})

var refuseAttemptTooOld = invalidState(func(op *opjournal.Operation, c *Command, now time.Time) string {
	return fmt.Sprintf("attempt %d of operation %q was claimed %s ago: the policy's max_attempt_seconds (%s) allows no longer lease; let the call end or give up (the outcome is then unknown)",
		c.Attempt, op.Key, now.Sub(op.AttemptStartedAt).Round(time.Millisecond), c.Policy.MaxAttempt)
})

func refuseNotUnknown(why string) *RefusalSpec {
	return invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
		return fmt.Sprintf("operation %q is %s, not unknown: %s", op.Key, EffectiveStatus(op, now), why)
	})
}

var refuseUnderReview = invalidState(func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("operation %q is under review (%s): a person resolves it", op.Key, op.ReviewReason)
})

var refuseNotDefinitive = invalidState(func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("the policy of %s says its provider's search is not definitive (reconcile.definitive_absence: false): absence cannot be proven, so the operation is never released automatically; escalate it", op.Action)
})

var refuseTooEarly = invalidState(func(op *opjournal.Operation, c *Command, now time.Time) string {
	return fmt.Sprintf("operation %q has been unknown for %s; absence only counts %s after the attempt ended (the policy's visibility_lag plus in_flight_window, database clock)",
		op.Key, now.Sub(EffectiveUnknownSince(op, now)).Round(time.Millisecond), c.Policy.ReleaseAfter)
})

var refuseEscalateTerminal = invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	return fmt.Sprintf("operation %q is %s: a terminal operation is not escalated", op.Key, EffectiveStatus(op, now))
})

var refuseResolveTerminal = invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	return fmt.Sprintf("operation %q is %s, a terminal state, and terminal states never change: to end its review, acknowledge it (Acknowledge, `opjournal ops acknowledge`)", op.Key, EffectiveStatus(op, now))
})

var refuseAcknowledgeOpen = invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	return fmt.Sprintf("operation %q is %s, not terminal: decide its outcome with Resolve instead", op.Key, EffectiveStatus(op, now))
})

var refuseNothingToAcknowledge = invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	return fmt.Sprintf("operation %q is %s and not under review: there is nothing to acknowledge", op.Key, EffectiveStatus(op, now))
})

var refuseNotAwaiting = invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	st := EffectiveStatus(op, now)
	switch {
	case op.Approval == nil:
		return fmt.Sprintf("operation %q is %s and was registered without an approval: there is nothing to decide", op.Key, st)
	case st != opjournal.StatusFailedFinal && len(op.Approval.Approvals) > 0:
		return fmt.Sprintf("operation %q is already approved (it is %s)", op.Key, st)
	}
	return fmt.Sprintf("operation %q is %s, not awaiting approval: it was already decided", op.Key, st)
})

var refuseOtherHash = &RefusalSpec{Code: opjournal.CodePayloadMismatch, Field: "request_hash", Why: func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("is not the request hash of operation %q: the decision is for the exact request you saw; look it up again and decide on what it now shows", op.Key)
}}

var refuseDeadlinePassed = invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	if op.Approval == nil {
		return fmt.Sprintf("operation %q has no approval to decide", op.Key)
	}
	return fmt.Sprintf("the approval of operation %q timed out at %s (database clock, %s ago): it is no longer decided by Approve or Reject but by its on_timeout (%s)",
		op.Key, op.Approval.Deadline.UTC().Format(time.RFC3339), now.Sub(op.Approval.Deadline).Round(time.Second), op.Approval.OnTimeout)
})

var refuseSameApprover = invalidState(func(op *opjournal.Operation, c *Command, _ time.Time) string {
	return fmt.Sprintf("%q has already approved operation %q: two_person needs a second approval from another principal", c.Actor, op.Key)
})

var refuseAlreadyEscalated = invalidState(func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("the approval of operation %q has already timed out and is under review: a person decides", op.Key)
})

var refuseDeadlineNotReached = invalidState(func(op *opjournal.Operation, _ *Command, now time.Time) string {
	if op.Approval == nil || op.Approval.Deadline.IsZero() {
		return fmt.Sprintf("the approval of operation %q has no deadline", op.Key)
	}
	return fmt.Sprintf("the approval of operation %q is open until %s (database clock, %s from now)", op.Key,
		op.Approval.Deadline.UTC().Format(time.RFC3339), op.Approval.Deadline.Sub(now).Round(time.Second))
})

var refuseHashKeyGone = &RefusalSpec{Code: opjournal.CodeInvalidState, Field: "payload", Why: func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("operation %q was registered under request-hash key %q, which this server no longer holds, so this request cannot be compared with it; add the key back to --hash-key-file (keys may be retired only after the retention of the operations made with them)", op.Key, op.HashKeyID)
}}

var refuseOtherRefs = &RefusalSpec{Code: opjournal.CodePayloadMismatch, Field: "refs", Why: func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("operation %q is registered with other refs; refs cannot change after registration: send the ones it was registered with (Lookup shows them), or use a new operation key for a new intent", op.Key)
}}

var refuseOtherParent = &RefusalSpec{Code: opjournal.CodePayloadMismatch, Field: "parent_key", Why: func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("operation %q is registered with another parent_key; it cannot change after registration", op.Key)
}}

var refusePayloadMismatch = &RefusalSpec{Code: opjournal.CodePayloadMismatch, Field: "payload", Why: func(op *opjournal.Operation, _ *Command, _ time.Time) string {
	return fmt.Sprintf("operation %q is registered with other parameters; use a new operation key for a new intent", op.Key)
}}

// WithinProviderWindow reports whether a provider that remembers keys for
// window still remembers one first sent at firstAttempt: window 0 (it
// never forgets), no attempt yet, or the first attempt less than window
// before now. Past it a retry_same_key retry would no longer be
// deduplicated, so the operation waits for reconciliation instead.
func WithinProviderWindow(firstAttempt time.Time, window time.Duration, now time.Time) bool {
	return window <= 0 || firstAttempt.IsZero() || firstAttempt.Add(window).After(now)
}

// Purgeable reports whether op may be purged at now under its action's
// retention: terminal, not under review, and unchanged for at least
// retention. A non-terminal operation, or one a person must still look
// at, is never purged. Every store's purge deletes exactly these rows
// (store/storetest checks it).
func Purgeable(op *opjournal.Operation, retention time.Duration, now time.Time) bool {
	return retention > 0 && PurgeableTerm.Holds(op, now, map[string]time.Duration{RetentionArg: retention})
}
