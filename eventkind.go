package opjournal

import "strings"

// EventKind names what one event of an operation's history records. The
// history stores the reason text each protocol rule writes (see the
// table's EventSpecs); its kind is read back from that text by the table
// EventReasons, so the console's charts and the stores' activity counts
// classify events by one rule.
type EventKind string

// The kinds of history events.
const (
	KindRegistered      EventKind = "registered"       // Register (with or without its claim)
	KindClaimed         EventKind = "claimed"          // Claim: an attempt began
	KindLeaseExtended   EventKind = "lease_extended"   // ExtendLease
	KindConfirmed       EventKind = "confirmed"        // MarkSucceeded: the effect was confirmed
	KindUnknown         EventKind = "unknown"          // MarkUnknown: the outcome became unknown
	KindRejected        EventKind = "rejected"         // MarkFailedFinal: the provider refused
	KindReleased        EventKind = "released"         // ReleaseForRetry
	KindChecked         EventKind = "checked"          // RecordCheck: a check found nothing definite
	KindEscalated       EventKind = "escalated"        // Escalate: handed to a person
	KindResolved        EventKind = "resolved"         // Resolve: an operator's verdict
	KindAcknowledged    EventKind = "acknowledged"     // Acknowledge: a review ended
	KindDuplicate       EventKind = "duplicate"        // another effect reported after the end
	KindNoted           EventKind = "noted"            // SetNote: an operator's note was set or cleared
	KindApproved        EventKind = "approved"         // Approve: a person approved (one of two, or the release)
	KindDenied          EventKind = "denied"           // Reject: a person refused the request
	KindApprovalTimeout EventKind = "approval_timeout" // the approval's deadline passed (rejected or escalated)
	KindOther           EventKind = "other"            // a reason no rule writes
)

// The reason texts the protocol's events begin with.
const (
	ReasonRegistered         = "registered"
	ReasonRegisteredClaimed  = "registered and claimed"
	ReasonClaimed            = "claimed"
	ReasonLeaseExtended      = "lease extended"
	ReasonConfirmed          = "effect confirmed"
	ReasonUnknown            = "outcome unknown"
	ReasonRejected           = "rejected"
	ReasonReleasedPrefix     = "released for retry: "
	ReasonCheckedPrefix      = "checked: "
	ReasonEscalatedPrefix    = "escalated: "
	ReasonResolvedPrefix     = "resolved by operator: "
	ReasonAcknowledgedPrefix = "acknowledged by operator: "
	ReasonDuplicatePrefix    = "duplicate effect: "
	ReasonLateEffectPrefix   = "effect "
	// ReasonNote carries no text of the note: the history says that an
	// operator changed it, the operation holds what it now says.
	ReasonNote = "note"
	// ReasonRegisteredAwaiting: registered, and a person must approve it.
	ReasonRegisteredAwaiting = "registered, awaiting approval"
	// ReasonApprovedFirstPrefix: the first of two approvals.
	ReasonApprovedFirstPrefix = "approved (1 of 2): "
	// ReasonApprovedPrefix: the approval that released the operation.
	ReasonApprovedPrefix = "approved: "
	// ReasonDeniedPrefix: a person rejected the request.
	ReasonDeniedPrefix = "approval rejected: "
	// ReasonApprovalTimedOutPrefix: the deadline passed (then what happened).
	ReasonApprovalTimedOutPrefix = "approval timed out: "
)

// EventReason is one row of EventReasons: events whose reason is Text
// (Prefix false) or begins with it (Prefix true) are of Kind.
type EventReason struct {
	Kind   EventKind
	Text   string
	Prefix bool
}

// EventReasons classifies reasons, first match wins; a store that counts
// events by kind in SQL builds its CASE from it, in this order. A
// caller's free text only ever follows one of these prefixes, so it
// cannot make its event look like another kind.
var EventReasons = []EventReason{
	{KindRegistered, ReasonRegistered, false},
	{KindRegistered, ReasonRegisteredClaimed, false},
	{KindClaimed, ReasonClaimed, false},
	{KindLeaseExtended, ReasonLeaseExtended, false},
	{KindConfirmed, ReasonConfirmed, false},
	{KindUnknown, ReasonUnknown, false},
	{KindUnknown, ReasonUnknown + ": ", true},
	{KindRejected, ReasonRejected, false},
	{KindRejected, ReasonRejected + ": ", true},
	{KindReleased, ReasonReleasedPrefix, true},
	{KindChecked, ReasonCheckedPrefix, true},
	{KindEscalated, ReasonEscalatedPrefix, true},
	{KindResolved, ReasonResolvedPrefix, true},
	{KindAcknowledged, ReasonAcknowledgedPrefix, true},
	{KindDuplicate, ReasonDuplicatePrefix, true},
	{KindDuplicate, ReasonLateEffectPrefix, true},
	{KindNoted, ReasonNote, false},
	{KindRegistered, ReasonRegisteredAwaiting, false},
	{KindApproved, ReasonApprovedFirstPrefix, true},
	{KindApproved, ReasonApprovedPrefix, true},
	{KindDenied, ReasonDeniedPrefix, true},
	{KindApprovalTimeout, ReasonApprovalTimedOutPrefix, true},
}

// KindOf returns the kind of an event with this reason.
func KindOf(reason string) EventKind {
	for _, r := range EventReasons {
		if reason == r.Text || (r.Prefix && strings.HasPrefix(reason, r.Text)) {
			return r.Kind
		}
	}
	return KindOther
}
