package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
)

// statedActor is what the console says it acts as: the history's actor
// is the signed-in principal, its stated actor says where the decision
// was taken.
const statedActor = "console"

// The verdicts.
const (
	verdictSucceeded   = "succeeded"
	verdictFailed      = "failed_final"
	verdictRelease     = "release"
	verdictAcknowledge = "acknowledge"
)

// decision is a decision form's fields.
type decision struct {
	Key        string
	Verdict    string
	ExternalID string
	Result     string
	ErrorCode  string
	Reason     string
	Attempt    int
	// RequestHash is the request hash the operator saw (approve, reject):
	// the journal refuses another one (PAYLOAD_MISMATCH).
	RequestHash string
}

func decisionFrom(r *http.Request) decision {
	d := decision{Key: r.PostFormValue("key"), Verdict: r.PostFormValue("verdict"),
		ExternalID: strings.TrimSpace(r.PostFormValue("external_id")), Result: strings.TrimSpace(r.PostFormValue("result")),
		ErrorCode: strings.TrimSpace(r.PostFormValue("error_code")), Reason: strings.TrimSpace(r.PostFormValue("reason")),
		RequestHash: strings.TrimSpace(r.PostFormValue("request_hash"))}
	d.Attempt, _ = strconv.Atoi(r.PostFormValue("attempt"))
	return d
}

// method is the JournalService method the verdict calls.
func (d decision) method() string {
	switch d.Verdict {
	case verdictRelease:
		return "ReleaseForRetry"
	case verdictAcknowledge:
		return "Acknowledge"
	case verdictApprove:
		return "Approve"
	case verdictReject:
		return "Reject"
	}
	return "Resolve"
}

// check refuses what the journal would refuse anyway, before the
// confirmation, so that the operator is not asked to confirm a decision
// that cannot be taken.
func (d decision) check() error {
	switch d.Verdict {
	case verdictSucceeded, verdictFailed, verdictRelease, verdictAcknowledge, verdictApprove, verdictReject:
	default:
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "verdict", "%q is not a decision (succeeded, failed_final, release, acknowledge, approve, reject)", d.Verdict)
	}
	if d.Reason == "" {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "reason", "is required: say what you checked and why you decide so (it goes into the history)")
	}
	if len(d.Reason) > journal.MaxReasonLen {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "reason", "is %d bytes; the limit is %d", len(d.Reason), journal.MaxReasonLen)
	}
	if d.Verdict == verdictApprove || d.Verdict == verdictReject {
		if d.RequestHash == "" {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "request_hash", "is required: the request hash of the payload you read (reload the operation's page)")
		}
		if len(d.RequestHash) > maxHashLen {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "request_hash", "is %d bytes; the limit is %d", len(d.RequestHash), maxHashLen)
		}
	}
	if len(d.ErrorCode) > journal.MaxErrorCodeLen {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "error_code", "is %d bytes; the limit is %d", len(d.ErrorCode), journal.MaxErrorCodeLen)
	}
	if d.Verdict == verdictSucceeded && d.ExternalID == "" {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, "external_id", "is required to resolve as succeeded: the provider's id of the effect you found")
	}
	if d.Result != "" {
		var obj map[string]any
		if d.Verdict != verdictSucceeded {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "result", "is only for a succeeded verdict")
		}
		if err := json.Unmarshal([]byte(d.Result), &obj); err != nil || obj == nil {
			return opjournal.Errorf(opjournal.CodeInvalidArgument, "result", "must be a JSON object, such as {\"status\": \"captured\"}")
		}
	}
	return nil
}

// Consequence says what the decision will do, in the words the
// confirmation shows.
func (d decision) Consequence(op *opjournal.Operation) string {
	switch d.Verdict {
	case verdictSucceeded:
		return fmt.Sprintf("The journal will record that the provider DID carry out this %s, as %q. Every retry of the agent will get this answer and never call the provider again. This is final: a succeeded operation never changes.", op.Action, d.ExternalID)
	case verdictFailed:
		return fmt.Sprintf("The journal will record that the provider did NOT carry out this %s and never will. Every retry of the agent gets failed_final and never calls the provider again; if the provider did act after all, that shows up only as a duplicate report. This is final.", op.Action)
	case verdictRelease:
		return fmt.Sprintf("The operation goes back to pending: a retry WILL call the provider again (attempt %d). Only do this when you are sure the provider has no record of attempt %d; if it has, the customer gets a second effect.", op.AttemptCount+1, op.AttemptCount)
	case verdictAcknowledge:
		return fmt.Sprintf("The review ends and nothing else changes: the operation stays %s, and nothing is called.", op.Status)
	case verdictApprove, verdictReject:
		return approvalConsequence(d, op)
	}
	return ""
}

// apply takes the decision as the session's principal.
func (c *Console) apply(ctx context.Context, s *session, d decision) (*opjournal.Operation, error) {
	if !s.mayDecide(d.method()) {
		return nil, opjournal.Errorf(opjournal.CodePermissionDenied, "", "%s (roles %v) may look but not decide in the console: deciding needs an operator or admin token", s.Principal.Name, s.Principal.Roles)
	}
	if err := d.check(); err != nil {
		return nil, err
	}
	caller := s.caller()
	var op *opjournal.Operation
	var err error
	switch d.Verdict {
	case verdictSucceeded, verdictFailed:
		req := journal.ResolveRequest{Caller: caller, Key: d.Key, To: opjournal.Status(d.Verdict), ExternalID: d.ExternalID,
			ErrorCode: d.ErrorCode, Actor: statedActor, Reason: d.Reason}
		if d.Result != "" {
			req.Result = json.RawMessage(d.Result)
		}
		op, err = c.svc.Resolve(ctx, req)
	case verdictRelease:
		op, err = c.svc.ReleaseForRetry(ctx, journal.ReleaseRequest{Caller: caller, Key: d.Key, Attempt: d.Attempt, Actor: statedActor, Reason: d.Reason})
	case verdictAcknowledge:
		op, err = c.svc.Acknowledge(ctx, journal.AcknowledgeRequest{Caller: caller, Key: d.Key, Actor: statedActor, Reason: d.Reason})
	case verdictApprove:
		op, err = c.approveAs(ctx, caller, d.Key, d.RequestHash, d.Reason)
	case verdictReject:
		op, err = c.rejectAs(ctx, caller, d.Key, d.RequestHash, d.Reason, d.ErrorCode)
	}
	if err != nil {
		return nil, err
	}
	if c.cfg.Audit != nil {
		c.cfg.Audit(ctx, d.method(), caller, op)
	}
	return op, nil
}

// decide is the one decision form: step "review" shows the confirmation,
// step "apply" takes the decision.
func (c *Console) decide(w http.ResponseWriter, r *http.Request, s *session) {
	d := decisionFrom(r)
	v, err := c.opView(r, s, d.Key)
	if err != nil {
		c.fail(w, r, s, c.status(err), c.message(r, err))
		return
	}
	v.Form = d
	if !s.mayDecide(d.method()) {
		c.log.Warn("console: decision refused: read-only principal", "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant, "method", d.method())
		v.Problem = fmt.Sprintf("%s (roles %v) may look but not decide: deciding needs an operator or admin token. Nothing was changed.", s.Principal.Name, s.Principal.Roles)
		c.render(w, r, http.StatusForbidden, "operation", s, v)
		return
	}
	if err := d.check(); err != nil {
		v.Problem = c.message(r, err)
		c.render(w, r, c.status(err), "operation", s, v)
		return
	}
	if r.PostFormValue("step") != "apply" {
		if problem := approvalPreflight(d, v.Op); problem != "" {
			// Not asked to confirm what the journal will refuse; the apply
			// step leaves this check to the journal itself.
			v.Problem = problem
			c.render(w, r, http.StatusConflict, "operation", s, v)
			return
		}
		c.render(w, r, http.StatusOK, "confirm", s, map[string]any{"Op": v.Op, "Form": d, "Consequence": d.Consequence(v.Op), "Approval": v.Approval})
		return
	}
	op, err := c.apply(r.Context(), s, d)
	if err != nil {
		v.Problem = "Not done: " + c.message(r, err)
		c.render(w, r, c.status(err), "operation", s, v)
		return
	}
	done := map[string]string{verdictSucceeded: "resolved", verdictFailed: "resolved", verdictRelease: "released", verdictAcknowledge: "acknowledged",
		verdictApprove: "approved", verdictReject: "rejected"}[d.Verdict]
	if d.Verdict == verdictApprove && op.Status == statusAwaitingApproval {
		done = "approval_recorded"
	}
	http.Redirect(w, r, Prefix+"operation?key="+url.QueryEscape(d.Key)+"&done="+done, http.StatusSeeOther)
}

// MaxBulk bounds the operations one bulk decision may cover.
const MaxBulk = 1000

// bulkVerdicts are the decisions a selection can take: a succeeded
// verdict needs each operation's own external_id, so it is one by one.
var bulkVerdicts = []string{verdictFailed, verdictRelease, verdictAcknowledge}

// selection is what a bulk count found.
type selection struct {
	Filter   filter
	Matching int
	Applies  []*opjournal.Operation
	Skipped  []skip
	Digest   string // of the keys it applies to, to notice a change
	TooMany  bool
	Decision decision
}

type skip struct {
	Key, Why string
}

// select lists every operation the filter matches (up to MaxBulk) and
// which of them the verdict applies to.
func (c *Console) selectFor(ctx context.Context, s *session, f filter, d decision) (*selection, error) {
	req, err := f.request(s.caller())
	if err != nil {
		return nil, err
	}
	req.PageSize = journal.MaxPageSize
	sel := &selection{Filter: f, Decision: d}
	h := sha256.New()
	for {
		page, err := c.svc.List(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, op := range page.Operations {
			sel.Matching++
			if sel.Matching > MaxBulk {
				sel.TooMany = true
				return sel, nil
			}
			act, _ := c.svc.Policy().Action(op.Action)
			if why := applicable(d.Verdict, op, act); why != "" {
				sel.Skipped = append(sel.Skipped, skip{op.Key, why})
				continue
			}
			sel.Applies = append(sel.Applies, op)
			fmt.Fprintf(h, "%s\x00%d\x00", op.Key, op.AttemptCount)
		}
		if req.PageToken = page.NextPageToken; req.PageToken == "" {
			break
		}
	}
	sel.Digest = hex.EncodeToString(h.Sum(nil))
	return sel, nil
}

// applicable returns "" if the verdict can be taken on op, else why not.
func applicable(verdict string, op *opjournal.Operation, act *policy.Action) string {
	switch verdict {
	case verdictFailed:
		if op.Status.Terminal() {
			return "already " + string(op.Status)
		}
		if op.Status != opjournal.StatusUnknown && !op.NeedsReview {
			return string(op.Status) + " and not under review: its outcome is not in question"
		}
	case verdictRelease:
		if op.Status != opjournal.StatusUnknown {
			return string(op.Status) + ": only an unknown outcome is released"
		}
		if act == nil || !act.Reconcile.DefinitiveAbsence {
			return "the policy of " + op.Action + " cannot prove absence (reconcile.definitive_absence)"
		}
	case verdictAcknowledge:
		if !op.Status.Terminal() || !op.NeedsReview {
			return "not a terminal operation under review"
		}
	}
	return ""
}

// bulkForm shows the bulk decision form for a queue's filter.
func (c *Console) bulkForm(w http.ResponseWriter, r *http.Request, s *session) {
	f := filterFrom(r.URL.Query())
	c.render(w, r, http.StatusOK, "bulk", s, map[string]any{"Filter": f, "Describe": f.describe(), "Verdicts": bulkVerdicts,
		"Form": decision{Verdict: verdictFailed}, "MayDecide": s.mayDecide("Resolve")})
}

// bulk counts (step "count", a dry run that changes nothing) or applies
// (step "apply") a decision over a filtered selection. Apply refuses when
// the selection is no longer the one counted.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, s *session) {
	f := filterFrom(r.PostForm)
	d := decisionFrom(r)
	data := map[string]any{"Filter": f, "Describe": f.describe(), "Verdicts": bulkVerdicts, "Form": d, "MayDecide": s.mayDecide(d.method())}
	refuse := func(status int, msg string) {
		data["Problem"] = msg
		c.render(w, r, status, "bulk", s, data)
	}
	if !s.mayDecide(d.method()) {
		refuse(http.StatusForbidden, fmt.Sprintf("%s (roles %v) may look but not decide: nothing was changed.", s.Principal.Name, s.Principal.Roles))
		return
	}
	if d.Verdict == verdictSucceeded {
		refuse(http.StatusBadRequest, "A succeeded verdict needs each operation's own external_id: resolve those one by one.")
		return
	}
	if d.Verdict == verdictApprove || d.Verdict == verdictReject {
		// An approval is of one payload a person read; rejections of
		// several go through the approvals queue, which carries each
		// payload's hash as seen.
		refuse(http.StatusBadRequest, "Approvals are not decided for a filtered selection: approve one by one on the operation's page, or reject a selection on the Approvals page. Nothing was changed.")
		return
	}
	d.Key = "bulk" // check() does not look at it
	if err := d.check(); err != nil {
		refuse(c.status(err), c.message(r, err))
		return
	}
	sel, err := c.selectFor(r.Context(), s, f, d)
	if err != nil {
		refuse(c.status(err), c.message(r, err))
		return
	}
	data["Selection"] = sel
	if sel.TooMany {
		refuse(http.StatusBadRequest, fmt.Sprintf("More than %d operations match: narrow the filter (by action, refs, key prefix or time) and count again.", MaxBulk))
		return
	}
	if r.PostFormValue("step") != "apply" {
		data["Counted"] = true
		data["Consequence"] = bulkConsequence(d.Verdict, len(sel.Applies))
		c.render(w, r, http.StatusOK, "bulk", s, data)
		return
	}
	if r.PostFormValue("digest") != sel.Digest {
		refuse(http.StatusConflict, fmt.Sprintf("The selection changed since you counted it (%d operations would be decided now). Nothing was changed: check the new count and confirm again.", len(sel.Applies)))
		return
	}
	var done int
	var refused []skip
	for _, op := range sel.Applies {
		one := d
		one.Key, one.Attempt = op.Key, op.AttemptCount
		if _, err := c.apply(r.Context(), s, one); err != nil {
			refused = append(refused, skip{op.Key, c.message(r, err)})
			continue
		}
		done++
	}
	c.log.Info("console: bulk decision", "principal", s.Principal.ID, "label", s.Principal.Name, "tenant", s.Principal.Tenant, "verdict", d.Verdict, "decided", done, "refused", len(refused))
	c.render(w, r, http.StatusOK, "done", s, map[string]any{"Decided": done, "Refused": refused, "Verdict": d.Verdict, "Filter": f, "Describe": f.describe()})
}

func bulkConsequence(verdict string, n int) string {
	switch verdict {
	case verdictFailed:
		return fmt.Sprintf("Each of these %d operations will be recorded as NOT carried out by the provider, finally: no retry calls the provider for them again.", n)
	case verdictRelease:
		return fmt.Sprintf("Each of these %d operations goes back to pending: its next retry WILL call the provider again.", n)
	case verdictAcknowledge:
		return fmt.Sprintf("The review of these %d operations ends; their status stays and nothing is called.", n)
	}
	return ""
}
