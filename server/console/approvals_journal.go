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
const statusAwaitingApproval = opjournal.StatusAwaitingApproval

// approvalState is what the console shows of an operation's approval:
// opjournal.Approval without its pointer, so that a page reads the fields
// of an operation that needs none (the zero value) too.
type approvalState struct {
	Required              bool
	Approvers             []string
	DistinctFromRequester bool
	TwoPerson             bool
	RequestedBy           string
	RequestedByLabel      string
	Deadline              time.Time
	OnTimeout             string
	Rule                  string
	// Budgets name the budgets the request would pass, whose on_exceed
	// asked a person (Rule "budget" when only they asked).
	Budgets []string
	Given   []givenApproval
}

// approvalStateOf returns op's approval (the zero value when none was
// required).
func approvalStateOf(op *opjournal.Operation) approvalState {
	a := op.Approval
	if a == nil {
		return approvalState{}
	}
	st := approvalState{Required: a.Required, Approvers: a.Approvers, DistinctFromRequester: a.DistinctFromRequester, TwoPerson: a.TwoPerson,
		RequestedBy: a.RequestedBy, RequestedByLabel: a.RequestedByLabel, Deadline: a.Deadline, OnTimeout: a.OnTimeout, Rule: a.Rule, Budgets: a.Budgets}
	for _, d := range a.Approvals {
		st.Given = append(st.Given, givenApproval{Principal: d.Principal, Label: d.Label, At: d.At, Reason: d.Reason})
	}
	return st
}

// approveAs approves key's request hash as caller (the journal checks the
// hash, the caller's roles against the approval's approvers, the
// requester and two_person) and returns the operation after it: pending
// once released, still awaiting after the first of two.
func (c *Console) approveAs(ctx context.Context, caller journal.Caller, key, hash, reason string) (*opjournal.Operation, error) {
	res, err := c.svc.Approve(ctx, journal.DecisionRequest{Caller: caller, Key: key, RequestHash: hash, Reason: reason, Actor: statedActor})
	if err != nil {
		return nil, err
	}
	return res.Operation, nil
}

// rejectAs rejects key's request hash as caller with errorCode ("" for
// the journal's default, approval_rejected).
func (c *Console) rejectAs(ctx context.Context, caller journal.Caller, key, hash, reason, errorCode string) (*opjournal.Operation, error) {
	return c.svc.Reject(ctx, journal.DecisionRequest{Caller: caller, Key: key, RequestHash: hash, Reason: reason, ErrorCode: errorCode, Actor: statedActor})
}
