package opjournal

import "testing"

// TestKindOf: each protocol reason reads back as its kind, and a caller's
// free text after a prefix cannot pass for another kind.
func TestKindOf(t *testing.T) {
	for reason, want := range map[string]EventKind{
		"registered":               KindRegistered,
		"registered and claimed":   KindRegistered,
		"claimed":                  KindClaimed,
		"lease extended":           KindLeaseExtended,
		"effect confirmed":         KindConfirmed,
		"outcome unknown":          KindUnknown,
		"outcome unknown: timeout": KindUnknown,
		"rejected":                 KindRejected,
		"rejected: card_declined":  KindRejected,
		"released for retry: provider has no record":                         KindReleased,
		"checked: 0 results":                                                 KindChecked,
		"escalated: effect confirmed":                                        KindEscalated,
		"resolved by operator: registered":                                   KindResolved,
		"acknowledged by operator: refunded":                                 KindAcknowledged,
		`duplicate effect: external_id "b" reported after "a" was confirmed`: KindDuplicate,
		`effect "b" confirmed after the operation was marked failed_final`:   KindDuplicate,
		"registered, awaiting approval":                                      KindRegistered,
		"approved (1 of 2): looks right":                                     KindApproved,
		"approved: agreed with the customer":                                 KindApproved,
		"approval rejected: not ordered":                                     KindDenied,
		"approval timed out: rejected":                                       KindApprovalTimeout,
		"":                                                                   KindOther,
		"outcome unknownish":                                                 KindOther,
		"something else":                                                     KindOther,
	} {
		if got := KindOf(reason); got != want {
			t.Errorf("KindOf(%q) = %s, want %s", reason, got, want)
		}
	}
}
