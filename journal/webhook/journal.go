package webhook

import (
	"context"
	"fmt"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
)

// ForOperation returns the notification of op, an operation that entered
// awaiting_approval, and true; false when op awaits no approval or its
// action has no approval.notify in pol.
func ForOperation(pol *policy.Policy, op *opjournal.Operation) (Notification, bool) {
	if op == nil || op.Status != opjournal.StatusAwaitingApproval || op.Approval == nil {
		return Notification{}, false
	}
	url := NotifyURL(pol, op.Action)
	if url == "" {
		return Notification{}, false
	}
	return Notification{URL: url, Tenant: op.Tenant, OperationKey: op.Key, ActionType: op.Action, RequestHash: op.RequestHash,
		RequestedBy: op.Approval.RequestedBy, RequestedByLabel: op.Approval.RequestedByLabel, Deadline: op.Approval.Deadline, TwoPerson: op.Approval.TwoPerson, At: op.CreatedAt}, true
}

// NotifyURL is the approval.notify URL of action in pol, "" for none.
func NotifyURL(pol *policy.Policy, action string) string {
	a, ok := pol.Action(action)
	if !ok || a.Approval == nil {
		return ""
	}
	return a.Approval.Notify
}

// NotifyingActions are the actions of pol with an approval.notify URL.
func NotifyingActions(pol *policy.Policy) []string {
	var names []string
	for _, name := range pol.Names() {
		if NotifyURL(pol, name) != "" {
			names = append(names, name)
		}
	}
	return names
}

// Pending is the Source of a Sender in a journal server: every operation of
// tenants still awaiting approval whose action has approval.notify, read
// through the journal's ListOperations, page by page. The deadline and the
// requester come from the operation, the URL from the policy in force now.
func Pending(svc *journal.Service, tenants []string) Source {
	pol := svc.Policy()
	actions := NotifyingActions(pol)
	return func(ctx context.Context, yield func(Notification) bool) error {
		for _, tenant := range tenants {
			for _, action := range actions {
				req := journal.ListRequest{Caller: journal.Caller{Tenant: tenant}, PageSize: journal.MaxPageSize, ListFilter: journal.ListFilter{Action: action, Statuses: []opjournal.Status{opjournal.StatusAwaitingApproval}}}
				for {
					page, err := svc.List(ctx, req)
					if err != nil {
						return fmt.Errorf("list the operations of tenant %q awaiting approval: %w", tenant, err)
					}
					for _, op := range page.Operations {
						if n, ok := ForOperation(pol, op); ok && !yield(n) {
							return nil
						}
					}
					if page.NextPageToken == "" {
						break
					}
					req.PageToken = page.NextPageToken
				}
			}
		}
		return nil
	}
}
