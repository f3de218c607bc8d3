package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server/auth"
)

// The approval verdicts of the decision form (decide.go).
const (
	verdictApprove = "approve"
	verdictReject  = "reject"
)

// maxApprovalQueue bounds the operations the approvals queue reads: the
// journal lists in key order, so the console reads every awaiting
// operation (up to this many) to show the oldest first.
const maxApprovalQueue = 1000

// maxBulkReject bounds the operations one bulk rejection covers.
const maxBulkReject = 200

// approvalRow is one line of the approvals queue.
type approvalRow struct {
	Op       *opjournal.Operation
	Approval approvalState
	// Amount is the payload's amount-like members (amountOf).
	Amount []member
}

// member is one payload member shown as the amount.
type member struct {
	Name, Value string
}

// amountOf returns the members of a stored payload that the approvals
// queue shows as the request's amount, by one documented rule: the
// top-level members named "amount", starting with "amount_" or ending with
// "_amount", in name order, then "currency". Only scalars (a number, a
// string, a boolean) are shown, each at most 40 characters. The payload is
// the one the journal stores, in which the policy's redact_fields are
// already "[redacted]"; a member the policy redacts is shown as
// "[redacted]" whatever it holds, so that no secret reaches the queue.
func amountOf(payload json.RawMessage, act *policy.Action) []member {
	var obj map[string]json.RawMessage
	if len(payload) == 0 || json.Unmarshal(payload, &obj) != nil {
		return nil
	}
	var names []string
	for name := range obj {
		if name == "amount" || strings.HasPrefix(name, "amount_") || strings.HasSuffix(name, "_amount") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if _, ok := obj["currency"]; ok {
		names = append(names, "currency")
	}
	var out []member
	for _, name := range names {
		v, ok := scalarText(obj[name])
		if !ok {
			continue
		}
		if act != nil && slices.Contains(act.RedactFields, name) {
			v = "[redacted]"
		}
		out = append(out, member{name, v})
	}
	return out
}

// scalarText is a JSON scalar as text, cut to 40 characters.
func scalarText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == '{' || raw[0] == '[' || string(raw) == "null" {
		return "", false
	}
	var s string
	if raw[0] == '"' {
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
	} else {
		s = string(raw)
	}
	if r := []rune(s); len(r) > 40 {
		s = string(r[:39]) + "…"
	}
	return s, true
}

// oldestFirst orders the queue: the longest-waiting request first (created
// at, then key, so that the order is total).
func oldestFirst(rows []approvalRow) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i].Op, rows[j].Op
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return a.Key < b.Key
	})
}

// MayApprove reports whether the session may decide approvals at all:
// operators and admins (Principal.MayDecide), as every decision page.
func (s *session) MayApprove() bool { return s.mayDecide("Approve") && s.mayDecide("Reject") }

// awaitingOf reads every operation of the session's tenant that awaits
// approval (up to maxApprovalQueue; more says so), oldest first.
func (c *Console) awaitingOf(ctx context.Context, s *session, action string) (rows []approvalRow, more bool, err error) {
	req := journal.ListRequest{Caller: s.caller(), PageSize: journal.MaxPageSize, Full: true, ListFilter: journal.ListFilter{Statuses: []opjournal.Status{statusAwaitingApproval}, Action: action}}
	for {
		page, err := c.svc.List(ctx, req)
		if err != nil {
			return nil, false, err
		}
		for _, op := range page.Operations {
			if len(rows) == maxApprovalQueue {
				more = true
				break
			}
			act, _ := c.svc.Policy().Action(op.Action)
			rows = append(rows, approvalRow{Op: op, Approval: approvalStateOf(op), Amount: amountOf(op.Payload, act)})
		}
		if more {
			break
		}
		if req.PageToken = page.NextPageToken; req.PageToken == "" {
			break
		}
	}
	oldestFirst(rows)
	return rows, more, nil
}

// approvals is the approvals queue: what awaits a person's yes or no,
// oldest first. Operators and admins only; any other principal gets 403
// and nothing of the queue.
func (c *Console) approvals(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.MayApprove() {
		c.log.Warn("console: approvals refused: not an approver", "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant)
		c.fail(w, r, s, http.StatusForbidden, fmt.Sprintf("%s (roles %v) may not see or decide approvals: that needs an operator or admin token.", s.Principal.Name, s.Principal.Roles))
		return
	}
	action := r.URL.Query().Get("action")
	rows, more, err := c.awaitingOf(r.Context(), s, action)
	if err != nil {
		c.fail(w, r, s, c.status(err), c.message(r, err))
		return
	}
	refresh := refreshSeconds
	if r.URL.Query().Get("refresh") == "off" {
		refresh = 0
	}
	data := map[string]any{"Rows": rows, "More": more, "Max": maxApprovalQueue, "Action": action, "Actions": c.svc.Policy().Names(),
		"Refresh": refresh, "MaxBulk": maxBulkReject, "Me": s.Principal.Name}
	c.renderView(w, r, http.StatusOK, &view{Page: "approvals", Session: s, Data: data, Refresh: refresh})
}

// approvalConsequence says what an approval decision will do, in the
// words the confirmation shows.
func approvalConsequence(d decision, op *opjournal.Operation) string {
	a := approvalStateOf(op)
	over := ""
	if len(a.Budgets) > 0 {
		// An approval admits the request past those limits: say so, as
		// the history will.
		over = fmt.Sprintf(" It is admitted over the limit of %s %s: once approved, its amount counts there, past the limit.", budgetsWord(a.Budgets), strings.Join(a.Budgets, ", "))
	}
	switch d.Verdict {
	case verdictApprove:
		if a.TwoPerson && len(a.Given) == 0 {
			return fmt.Sprintf("This is the first of two approvals: it is recorded with your name, and the operation stays awaiting approval until another person approves it too. Only then may the agent call %s, with exactly this payload (hash %s), once.", op.Action, op.RequestHash) + over
		}
		return fmt.Sprintf("Approving lets the agent call %s with exactly this payload (hash %s) once: the operation becomes pending, and the agent's next retry calls the provider.", op.Action, op.RequestHash) + over
	case verdictReject:
		code := d.ErrorCode
		if code == "" {
			code = defaultRejectCode
		}
		return fmt.Sprintf("Rejecting ends it as failed_final (error code %s); the agent's retries get this refusal and never call the provider for it. This is final.", code)
	}
	return ""
}

// defaultRejectCode is the error code a rejection ends with when the
// operator gives none (the journal's default).
const defaultRejectCode = "approval_rejected"

// bulkReject rejects a selection of the approvals queue, after a
// confirmation step. Each selected operation carries the request hash the
// operator saw ("KEY HASH"): the journal refuses one whose hash differs.
// There is no bulk approval: an approval is of one exact payload, read
// by a person, and a verdict other than reject is refused.
func (c *Console) bulkReject(w http.ResponseWriter, r *http.Request, s *session) {
	verdict := r.PostFormValue("verdict")
	if !s.MayApprove() {
		c.fail(w, r, s, http.StatusForbidden, fmt.Sprintf("%s (roles %v) may not decide approvals: nothing was changed.", s.Principal.Name, s.Principal.Roles))
		return
	}
	if verdict != verdictReject {
		c.log.Warn("console: bulk approval refused", "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant, "verdict", verdict)
		c.fail(w, r, s, http.StatusBadRequest, "Only rejections are taken for a selection: approve each operation on its own page, after reading its payload. Nothing was changed.")
		return
	}
	d := decision{Key: "bulk", Verdict: verdictReject, Reason: strings.TrimSpace(r.PostFormValue("reason")),
		ErrorCode: strings.TrimSpace(r.PostFormValue("error_code")), RequestHash: "bulk"}
	picked, err := pickedOf(r.PostForm["op"])
	if err == nil {
		err = d.check()
	}
	if err != nil {
		c.fail(w, r, s, c.status(err), "Nothing was changed: "+c.message(r, err))
		return
	}
	ctx := r.Context()
	if r.PostFormValue("step") != "apply" {
		var rows []approvalRow
		var skipped []skip
		for _, p := range picked {
			op, err := c.svc.Lookup(ctx, s.Principal.Tenant, p.Key)
			switch {
			case err != nil:
				skipped = append(skipped, skip{p.Key, c.message(r, err)})
			case op.Status != statusAwaitingApproval:
				skipped = append(skipped, skip{p.Key, "no longer awaiting approval: " + string(op.Status)})
			case op.RequestHash != p.Hash:
				skipped = append(skipped, skip{p.Key, "its request hash is not the one you saw (PAYLOAD_MISMATCH)"})
			default:
				act, _ := c.svc.Policy().Action(op.Action)
				rows = append(rows, approvalRow{Op: op, Approval: approvalStateOf(op), Amount: amountOf(op.Payload, act)})
			}
		}
		oldestFirst(rows)
		code := d.ErrorCode
		if code == "" {
			code = defaultRejectCode
		}
		c.render(w, r, http.StatusOK, "rejectmany", s, map[string]any{"Rows": rows, "Skipped": skipped, "Form": d,
			"Consequence": fmt.Sprintf("Each of these %d operations ends as failed_final (error code %s); the agent's retries get this refusal and never call the provider for them. This is final.", len(rows), code)})
		return
	}
	var done int
	var refused []skip
	for _, p := range picked {
		one := d
		one.Key, one.RequestHash = p.Key, p.Hash
		if _, err := c.apply(ctx, s, one); err != nil {
			refused = append(refused, skip{p.Key, c.message(r, err)})
			continue
		}
		done++
	}
	c.log.Info("console: bulk rejection", "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant, "rejected", done, "refused", len(refused))
	c.render(w, r, http.StatusOK, "done", s, map[string]any{"Decided": done, "Refused": refused, "Verdict": "rejected", "Approvals": true,
		"Describe": "picked on the approvals queue"})
}

// picked is one operation of a bulk rejection and the hash the operator saw.
type picked struct {
	Key, Hash string
}

// pickedOf reads the selection's "KEY HASH" values (keys and hashes are
// visible ASCII, so a space separates them), each key once.
func pickedOf(values []string) ([]picked, error) {
	if len(values) == 0 {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "op", "select at least one operation to reject")
	}
	if len(values) > maxBulkReject {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "op", "%d operations are selected; at most %d are rejected at once", len(values), maxBulkReject)
	}
	seen := map[string]bool{}
	out := make([]picked, 0, len(values))
	for _, v := range values {
		key, hash, ok := strings.Cut(v, " ")
		if !ok || key == "" || hash == "" || len(key) > journal.MaxKeyLen || len(hash) > maxHashLen || strings.ContainsAny(hash, " \t\r\n") {
			return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "op", "a selected operation is not a key and a request hash")
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, picked{key, hash})
	}
	return out, nil
}

// maxHashLen bounds a request hash in a form (a SHA-256 in hex with a
// prefix is well under it).
const maxHashLen = 200

// Why says why the policy asked a person: its rule (the when expression
// that held, or "required"), and the budgets the request would pass.
func (a approvalState) Why() string {
	rule := a.Rule
	if rule == "" {
		rule = "the policy requires it"
	}
	if len(a.Budgets) == 0 {
		return rule
	}
	over := budgetsWord(a.Budgets) + " " + strings.Join(a.Budgets, ", ")
	if a.Rule == "budget" {
		return "it would pass the limit of " + over + ", whose on_exceed asks a person"
	}
	return rule + "; and it would pass the limit of " + over
}

// budgetsWord is "budget" or "budgets".
func budgetsWord(names []string) string {
	if len(names) == 1 {
		return "budget"
	}
	return "budgets"
}

// progress says how far the approval is: "0 of 1", "1 of 2".
func (a approvalState) Progress() string {
	need := 1
	if a.TwoPerson {
		need = 2
	}
	return fmt.Sprintf("%d of %d", len(a.Given), need)
}

// givenApproval is one person's approval so far.
type givenApproval struct {
	Principal string
	Label     string
	At        time.Time
	Reason    string
}

// approvalPreflight returns why an approval decision cannot be taken on op
// as it is now ("" if it can), before the operator is asked to confirm.
func approvalPreflight(d decision, op *opjournal.Operation) string {
	if d.Verdict != verdictApprove && d.Verdict != verdictReject {
		return ""
	}
	if op.Status != statusAwaitingApproval {
		return fmt.Sprintf("Not done: this operation is no longer awaiting approval (it is %s); nothing was changed.", op.Status)
	}
	if d.RequestHash != op.RequestHash {
		return "Not done (PAYLOAD_MISMATCH): the request hash in your form is not this operation's; you did not see this payload. Nothing was changed: read the payload below and decide again."
	}
	return ""
}

// requesterNote returns what the operation page says to the signed-in
// caller about approving op ("" for nothing): the journal refuses the
// requester under distinct_from_requester and a second approval by the
// same principal under two_person; the page says so before the operator
// tries, asking the journal's own rules (one person is one principal,
// whichever token they signed in with).
func requesterNote(op *opjournal.Operation, caller journal.Caller) string {
	a := op.Approval
	switch {
	case a == nil:
	case a.DistinctFromRequester && caller.IsRequester(a):
		return "You registered this operation: its policy says another person must approve it (distinct_from_requester). You may still reject it."
	case a.TwoPerson && caller.HasApproved(a):
		return "You have approved it already: its policy needs a second approval from another person (two_person)."
	}
	return ""
}

// approvalOffer says whether s is offered Approve and Reject of an
// operation with approval a, and if not why (the journal decides in the
// end: this only spares the operator a form that would be refused).
func approvalOffer(s *session, a approvalState) (bool, string) {
	if !s.MayApprove() {
		return false, "Approvals are decided by operators and admins; your token may look but not decide."
	}
	if len(a.Approvers) > 0 && !slices.ContainsFunc(s.Principal.Roles, func(r auth.Role) bool { return slices.Contains(a.Approvers, string(r)) }) {
		return false, fmt.Sprintf("The policy of this action lets only %s decide its approvals; your roles are %v.", strings.Join(a.Approvers, ", "), s.Principal.Roles)
	}
	return true, ""
}
