package console

import (
	"context"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
)

// This file is the console's one door to the journal's approvals: the
// status, the approval recorded on an operation, and the Approve and
// Reject calls.

// statusAwaitingApproval is the status of an operation a person must
// approve before any attempt.
const statusAwaitingApproval = opjournal.Status("awaiting_approval")

// approvalState is what the console shows of an operation's approval.
type approvalState struct {
	Required              bool
	Approvers             []string
	DistinctFromRequester bool
	TwoPerson             bool
	RequestedBy           string
	Deadline              time.Time
	OnTimeout             string
	Rule                  string
	Given                 []givenApproval
}

// approvalStateOf returns op's approval (the zero value when none was
// required).
func approvalStateOf(op *opjournal.Operation) approvalState {
	_ = op
	return approvalState{}
}

// approveAs approves key's request hash as caller; released says whether
// this approval made the operation pending.
func (c *Console) approveAs(ctx context.Context, caller journal.Caller, key, hash, reason string) (*opjournal.Operation, error) {
	_, _, _, _, _ = ctx, caller, key, hash, reason
	return nil, opjournal.Errorf(opjournal.CodeInternal, "", "approvals are not in this journal")
}

// rejectAs rejects key's request hash as caller with errorCode ("" for
// the journal's default).
func (c *Console) rejectAs(ctx context.Context, caller journal.Caller, key, hash, reason, errorCode string) (*opjournal.Operation, error) {
	_, _, _, _, _, _ = ctx, caller, key, hash, reason, errorCode
	return nil, opjournal.Errorf(opjournal.CodeInternal, "", "approvals are not in this journal")
}
