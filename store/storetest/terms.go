package storetest

import (
	"fmt"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
)

// TermRetention is the "retention" argument the stores' term tests bind.
const TermRetention = time.Hour

// SharedTerm is one of the protocol's shared terms, by name.
type SharedTerm struct {
	Name string
	Term protocol.Term
}

// SharedTerms are every shared term of protocol/predicate.go:
// each store's test renders them in its dialect, runs them on TermRows
// and compares the answers with Term.Value.
var SharedTerms = []SharedTerm{
	{"effective status", protocol.EffectiveStatusTerm},
	{"effective unknown since", protocol.EffectiveUnknownSinceTerm},
	{"lease expired", protocol.LeaseExpiredTerm},
	{"unknown", protocol.UnknownTerm},
	{"check due", protocol.CheckDueTerm},
	{"terminal", protocol.TerminalTerm},
	{"settled", protocol.SettledTerm},
	{"purgeable", protocol.PurgeableTerm},
	{"approval due", protocol.ApprovalDueTerm},
}

// TermArgs are the duration arguments of SharedTerms.
var TermArgs = map[string]time.Duration{protocol.RetentionArg: TermRetention}

// TermRows returns rows that tell the shared terms' cases apart at now:
// every status; for in_progress (the only status with a lease, as the
// stores keep it) a lease that ended before, at and after now; under
// review or not; no next check, one due and one not; unknown since or
// not; changed before, exactly at and after the retention's edge. Only
// the columns the terms read are set.
func TermRows(now time.Time) []*opjournal.Operation {
	var rows []*opjournal.Operation
	statuses := []opjournal.Status{opjournal.StatusPending, opjournal.StatusInProgress, opjournal.StatusUnknown,
		opjournal.StatusSucceeded, opjournal.StatusFailedFinal, opjournal.StatusAwaitingApproval}
	for _, st := range statuses {
		leases := []time.Time{{}}
		if st == opjournal.StatusInProgress {
			leases = []time.Time{now.Add(-time.Second), now, now.Add(time.Second)}
		}
		for _, lease := range leases {
			for _, review := range []bool{false, true} {
				for _, next := range []time.Time{{}, now.Add(-time.Second), now.Add(time.Second)} {
					for _, since := range []time.Time{{}, now.Add(-time.Minute)} {
						for _, updated := range []time.Time{now.Add(-2 * TermRetention), now.Add(-TermRetention), now} {
							op := &opjournal.Operation{
								Key: fmt.Sprintf("%s-%d", st, len(rows)), Status: st, LeaseUntil: lease, NeedsReview: review,
								NextCheckAt: next, UnknownSince: since, UpdatedAt: updated,
							}
							// An approval's deadline before, at and after
							// now, told apart by the next check's cases.
							if st == opjournal.StatusAwaitingApproval && !next.IsZero() {
								op.Approval = &opjournal.Approval{Required: true, Deadline: next}
							} else if st == opjournal.StatusAwaitingApproval && since.IsZero() {
								op.Approval = &opjournal.Approval{Required: true, Deadline: now}
							}
							rows = append(rows, op)
						}
					}
				}
			}
		}
	}
	return rows
}
