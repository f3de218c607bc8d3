package opjournal

// NextStep is what the caller of Register or Claim does next. The journal
// decides it (NextStepOf) and every SDK acts on it and nothing else, so
// the outcome table lives here once instead of in each language.
type NextStep string

// The next steps.
const (
	// NextCallProvider: the caller holds the lease and may call the
	// provider once, with the attempt number as fencing token.
	NextCallProvider NextStep = "call_provider"
	// NextReplay: the effect is confirmed; return the stored result.
	NextReplay NextStep = "replay"
	// NextWait: another worker holds a live lease, or the operation is
	// changing hands; ask again after the retry-after hint.
	NextWait NextStep = "wait"
	// NextVerificationRequired: the outcome is unknown, or a person must
	// decide; nothing may be called until it is settled.
	NextVerificationRequired NextStep = "verification_required"
	// NextFailedFinal: the provider confirmed a rejection.
	NextFailedFinal NextStep = "failed_final"
	// NextClaim: registered without a claim and pending: claim it to call
	// the provider.
	NextClaim NextStep = "claim"
	// NextAwaitApproval: a person must approve this exact request first;
	// call nothing, ask again after the retry-after hint (or wait with
	// Lookup's wait_seconds). Another payload is another request.
	NextAwaitApproval NextStep = "await_approval"
)

// NextStepOf decides the next step of a Register or Claim caller from the
// operation as answered, whether a claim was asked for, and whether it won.
func NextStepOf(op *Operation, claimAsked, claimed bool) NextStep {
	switch {
	case claimed:
		return NextCallProvider
	case op.Status == StatusAwaitingApproval:
		// Before needs_review: an approval that timed out under
		// on_timeout: escalate is still decided by Approve or Reject.
		return NextAwaitApproval
	case op.Status == StatusSucceeded:
		return NextReplay
	case op.Status == StatusFailedFinal:
		return NextFailedFinal
	case op.NeedsReview, op.Status == StatusUnknown:
		return NextVerificationRequired
	case op.Status == StatusInProgress:
		return NextWait
	case !claimAsked:
		return NextClaim
	}
	// Pending, but our claim lost: it changed hands between the claim and
	// the read (a release, then another worker). Ask again.
	return NextWait
}
