package console

import (
	"net/http"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
)

// pageSize is how many operations a queue page lists.
const pageSize = 50

// overdueShown is how many overdue checks the unknown queue lists first.
const overdueShown = 20

// refreshSeconds is the queues' auto-refresh period.
const refreshSeconds = 30

// queueCount is one queue's figures at a glance.
type queueCount struct {
	Queue   queue
	Count   int
	Oldest  time.Time // the least recent last change in it
	Overdue int       // unknown only: checks that are due
}

// tally sums the store's count groups into the queues' figures.
func tally(rows []journal.CountRow) map[string]*queueCount {
	out := map[string]*queueCount{}
	for _, q := range queues {
		out[q.ID] = &queueCount{Queue: q}
	}
	add := func(id string, r journal.CountRow) {
		qc := out[id]
		qc.Count += r.Count
		if qc.Oldest.IsZero() || (!r.OldestUpdate.IsZero() && r.OldestUpdate.Before(qc.Oldest)) {
			qc.Oldest = r.OldestUpdate
		}
	}
	for _, r := range rows {
		add("all", r)
		if r.NeedsReview {
			add("review", r)
		}
		if r.Status == opjournal.StatusUnknown && !r.NeedsReview {
			add("unknown", r)
			if r.CheckDue {
				out["unknown"].Overdue += r.Count
			}
		}
		if r.LeaseExpired {
			add("expired", r)
		}
	}
	return out
}

// queues lists one queue, filtered, one page at a time.
func (c *Console) queues(w http.ResponseWriter, r *http.Request, s *session) {
	f := filterFrom(r.URL.Query())
	req, ferr := f.request(s.caller())
	counts, err := c.svc.Counts(r.Context(), s.caller())
	if err != nil {
		c.fail(w, r, s, c.status(err), c.message(r, err))
		return
	}
	tallies := tally(counts)
	data := map[string]any{
		"Filter": f, "Queues": queues, "Tallies": tallies, "Actions": c.svc.Policy().Names(),
		"Statuses": []opjournal.Status{opjournal.StatusPending, opjournal.StatusInProgress, opjournal.StatusUnknown, opjournal.StatusSucceeded, opjournal.StatusFailedFinal, opjournal.StatusAwaitingApproval},
	}
	q, _ := queueByID(f.Queue)
	data["Current"] = q
	status := http.StatusOK
	if ferr != nil {
		data["Problem"] = c.message(r, ferr)
		status = c.status(ferr)
	} else {
		req.PageSize = pageSize
		page, err := c.svc.List(r.Context(), req)
		if err != nil {
			data["Problem"] = c.message(r, err)
			status = c.status(err)
		} else {
			data["Ops"], data["Next"] = page.Operations, page.NextPageToken
		}
		if f.Queue == "unknown" && f.Page == "" && err == nil {
			due := req
			due.DueForCheck, due.PageSize = true, overdueShown
			if page, err := c.svc.List(r.Context(), due); err == nil {
				data["Overdue"] = page.Operations
			}
		}
	}
	refresh := refreshSeconds
	if r.URL.Query().Get("refresh") == "off" {
		refresh = 0
	}
	data["Refresh"] = refresh
	c.renderView(w, r, status, &view{Page: "queues", Session: s, Data: data, Refresh: refresh, Title: q.Label})
}

// maxHistory bounds the events one operation page shows.
const maxHistory = 2000

// opView is what the operation page shows.
type opView struct {
	Op       *opjournal.Operation
	Action   *policy.Action
	Link     string
	Events   []opjournal.Event
	Checks   []opjournal.Event
	More     bool // the history is longer than maxHistory
	Children []*opjournal.Operation
	// The decisions this principal may take on it now.
	CanResolve, CanRelease, CanAcknowledge bool
	ReadOnly                               bool
	ReleaseNote                            string
	Done                                   string
	Problem                                string
	Form                                   decision
	// Approval is the operation's approval; CanApprove whether this
	// principal is offered Approve and Reject now (it awaits approval, the
	// principal is an operator or admin and has one of the approvers'
	// roles), and ApprovalNote why not, when it awaits approval.
	Approval     approvalState
	Awaiting     bool
	CanApprove   bool
	ApprovalNote string
	// RequesterNote warns the requester or a person who approved already
	// (requesterNote).
	RequesterNote string
	// Budgets are what the operation holds of its action's budgets, with
	// each counter now when the session may list budgets; BudgetNote says
	// why the counters are missing when they could not be read.
	Budgets    []heldBudget
	BudgetNote string
}

// operation shows one operation with everything known about it.
func (c *Console) operation(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.URL.Query().Get("key")
	v, err := c.opView(r, s, key)
	if err != nil {
		c.fail(w, r, s, c.status(err), c.message(r, err))
		return
	}
	v.Done = doneMessages[r.URL.Query().Get("done")]
	c.render(w, r, http.StatusOK, "operation", s, v)
}

var doneMessages = map[string]string{
	"resolved":          "Resolved. The history below records your decision and reason.",
	"released":          "Released for retry. The next attempt will call the provider again.",
	"acknowledged":      "Acknowledged. The review has ended; the status is unchanged.",
	"approved":          "Approved. The operation is pending: the agent's next retry calls the provider with exactly this payload, once.",
	"approval_recorded": "Your approval is recorded. Another person must approve too before the agent may call the provider.",
	"rejected":          "Rejected. The operation is failed_final; the agent's retries get this refusal.",
}

func (c *Console) opView(r *http.Request, s *session, key string) (*opView, error) {
	ctx := r.Context()
	op, err := c.svc.Lookup(ctx, s.Principal.Tenant, key)
	if err != nil {
		return nil, err
	}
	v := &opView{Op: op}
	v.Action, _ = c.svc.Policy().Action(op.Action)
	v.Link = v.Action.Link(op.Key, op.ExternalID)
	token := ""
	for {
		page, err := c.svc.Events(ctx, journal.EventsRequest{Caller: s.caller(), Key: key, PageSize: journal.MaxPageSize, PageToken: token})
		if err != nil {
			return nil, err
		}
		v.Events = append(v.Events, page.Events...)
		if token = page.NextPageToken; token == "" {
			break
		}
		if len(v.Events) >= maxHistory {
			v.More = true
			break
		}
	}
	for _, e := range v.Events {
		switch opjournal.KindOf(e.Reason) {
		case opjournal.KindChecked, opjournal.KindEscalated, opjournal.KindReleased, opjournal.KindDuplicate:
			v.Checks = append(v.Checks, e)
		case opjournal.KindConfirmed:
			if e.From == opjournal.StatusUnknown {
				v.Checks = append(v.Checks, e) // found by a check after the outcome was unknown
			}
		}
	}
	children, err := c.svc.List(ctx, journal.ListRequest{Caller: s.caller(), PageSize: pageSize, ListFilter: journal.ListFilter{ParentKey: key}})
	if err != nil {
		return nil, err
	}
	v.Children = children.Operations
	v.Budgets, v.BudgetNote = c.heldBudgetsOf(r, s, op, s.MayListBudgets())
	v.Approval, v.Awaiting = approvalStateOf(op), op.Status == statusAwaitingApproval
	if v.Awaiting {
		v.CanApprove, v.ApprovalNote = approvalOffer(s, v.Approval)
		v.RequesterNote = requesterNote(op, s.caller())
	}
	// An operation awaiting approval is decided by Approve and Reject
	// only, also when its timeout escalated it to review.
	open := !op.Status.Terminal() && !v.Awaiting && (op.Status == opjournal.StatusUnknown || op.NeedsReview)
	v.CanResolve = open && s.mayDecide("Resolve")
	v.CanAcknowledge = op.Status.Terminal() && op.NeedsReview && s.mayDecide("Acknowledge")
	if op.Status == opjournal.StatusUnknown && s.mayDecide("ReleaseForRetry") {
		if v.Action != nil && v.Action.Reconcile.DefinitiveAbsence {
			v.CanRelease = true
		} else {
			v.ReleaseNote = "Release for retry is not offered: this action's policy does not say that its provider's search proves absence (reconcile.definitive_absence), so nobody can know that a retry would not be a second effect."
		}
	}
	v.ReadOnly = !s.mayDecide("Resolve") && !s.mayDecide("Acknowledge") && !s.mayDecide("ReleaseForRetry")
	return v, nil
}

// The overview's windows: how far back and the bucket width.
var windows = map[string]struct {
	Span, Bucket time.Duration
	Label        string
}{
	"24h": {24 * time.Hour, time.Hour, "the last 24 hours, per hour"},
	"7d":  {7 * 24 * time.Hour, 6 * time.Hour, "the last 7 days, per 6 hours"},
}

// overviewRow is one action's operations by status.
type overviewRow struct {
	Action   string
	ByStatus map[opjournal.Status]int
	Review   int
	Total    int
}

// overview shows the tenant's operations by status and action, unknowns
// and decisions over time, and (to admins) the purges.
func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	win := r.URL.Query().Get("window")
	if _, ok := windows[win]; !ok {
		win = "24h"
	}
	wd := windows[win]
	ctx := r.Context()
	counts, err := c.svc.Counts(ctx, s.caller())
	if err != nil {
		c.fail(w, r, s, c.status(err), c.message(r, err))
		return
	}
	byAction := map[string]*overviewRow{}
	var actions []string
	totals := &overviewRow{Action: "all actions", ByStatus: map[opjournal.Status]int{}}
	for _, row := range counts {
		or := byAction[row.Action]
		if or == nil {
			or = &overviewRow{Action: row.Action, ByStatus: map[opjournal.Status]int{}}
			byAction[row.Action] = or
			actions = append(actions, row.Action)
		}
		for _, t := range []*overviewRow{or, totals} {
			t.ByStatus[row.Status] += row.Count
			t.Total += row.Count
			if row.NeedsReview {
				t.Review += row.Count
			}
		}
	}
	rows := make([]*overviewRow, 0, len(actions)+1)
	for _, a := range sortedStrings(actions) {
		rows = append(rows, byAction[a])
	}
	now := c.cfg.Now()
	since := now.Add(-wd.Span).Truncate(wd.Bucket)
	activity, err := c.svc.Activity(ctx, s.caller(), since, wd.Bucket, now)
	if err != nil {
		c.fail(w, r, s, c.status(err), c.message(r, err))
		return
	}
	unknowns := seriesOf(activity, since, now, wd.Bucket, []opjournal.EventKind{opjournal.KindUnknown})
	decisions := seriesOf(activity, since, now, wd.Bucket, decisionKinds)
	data := map[string]any{
		"Rows": rows, "Totals": totals, "Window": win, "WindowLabel": wd.Label, "Windows": []string{"24h", "7d"},
		"Statuses":      []opjournal.Status{opjournal.StatusPending, opjournal.StatusInProgress, opjournal.StatusUnknown, opjournal.StatusSucceeded, opjournal.StatusFailedFinal, opjournal.StatusAwaitingApproval},
		"UnknownChart":  barChart("New unknown outcomes", unknowns, wd.Bucket),
		"DecisionChart": barChart("Reconciler and operator decisions", decisions, wd.Bucket),
		"Unknowns":      unknowns, "Decisions": decisions,
		"Tallies": tally(counts),
	}
	if s.Principal.IsAdmin() && c.cfg.Purges != nil {
		data["Purges"] = c.cfg.Purges()
		data["ShowPurges"] = true
	}
	retention := map[string]string{}
	for _, name := range c.svc.Policy().Names() {
		if a, ok := c.svc.Policy().Action(name); ok {
			retention[name] = short(a.Retention)
		}
	}
	data["Retention"] = retention
	data["PolicyActions"] = c.svc.Policy().Names()
	c.render(w, r, http.StatusOK, "overview", s, data)
}

// decisionKinds are the events the decisions chart stacks, bottom up.
var decisionKinds = []opjournal.EventKind{
	opjournal.KindChecked, opjournal.KindReleased, opjournal.KindEscalated,
	opjournal.KindResolved, opjournal.KindAcknowledged,
}
