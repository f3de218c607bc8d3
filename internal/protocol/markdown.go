package protocol

import (
	"fmt"
	"strings"

	"github.com/opjournal/opjournal"
)

// ProtocolMarkdown renders the protocol table (table.go) as the
// Markdown table the README shows, one row per rule: the command, its
// case, its guard, what it sets and the event it writes. The README's
// copy is generated from it (go run ./internal/cmd/protocoldoc) and a test
// fails when the two differ, so the document cannot drift from the code.
func ProtocolMarkdown() string {
	var b strings.Builder
	b.WriteString("| command | case | guard (all must hold; the first failing one with a refusal refuses) | sets | event |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, r := range table {
		var guard []string
		for _, req := range r.Requires {
			g := describeCond(req.Cond)
			if req.Refuse != nil {
				g += " ⟶ " + string(refusalCode(r, req))
			}
			guard = append(guard, g)
		}
		if len(guard) == 0 {
			guard = []string{"—"}
		}
		var sets []string
		for _, s := range r.Sets {
			sets = append(sets, describeSet(s))
		}
		switch r.Outcome {
		case Unchanged:
			sets = []string{"nothing (answered as it is)"}
		case NotClaimed:
			sets = []string{"nothing (claimed = false)"}
		}
		ev := "—"
		if r.Event != nil {
			ev = describeEvent(r)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Command, r.Case, strings.Join(guard, "<br>"), strings.Join(sets, "<br>"), ev)
	}
	return b.String()
}

// refusalCode is the code a requirement refuses with, found by asking it
// about a made-up operation (refusals depend on the code alone).
func refusalCode(r *Rule, req Requirement) opjournal.Code {
	op := &opjournal.Operation{Key: "k", Status: opjournal.StatusPending}
	return req.Refuse(op, &Command{Kind: r.Command}, op.CreatedAt).Code
}

func describeCond(c Cond) string {
	switch c.Kind {
	case CondStatus:
		s := make([]string, len(c.Statuses))
		for i, st := range c.Statuses {
			s[i] = string(st)
		}
		return "status " + strings.Join(s, " or ")
	case CondReview:
		if c.Want {
			return "under review"
		}
		return "not under review"
	case CondAttemptIssued:
		return "attempt issued (1 ≤ attempt ≤ attempt_count)"
	case CondAttemptLatest:
		return "attempt = attempt_count"
	case CondFlag:
		return c.Param.Name()
	case CondUnknownFor:
		return "unknown for ≥ " + c.Param.Name() + " (visibility_lag + in_flight_window)"
	case CondAttemptYounger:
		return "now < attempt_started_at + " + c.Param.Name()
	case CondSameOrNoExternalID:
		return "external_id empty or the confirmed one"
	case CondNewDuplicate:
		return fmt.Sprintf("a new other external_id (fewer than %d kept)", opjournal.MaxDuplicateExternalIDs)
	case CondResolution:
		return "resolution " + string(c.Status)
	case CondAbsent:
		return "key absent"
	case CondSameRequest:
		return "same request hash"
	case CondHashKeyKnown:
		return "its hash key still held"
	case CondSameRefs:
		return "same refs"
	case CondSameParent:
		return "same parent_key"
	case CondWithinProviderWindow:
		return "(" + c.Param.Name() + " = 0 or now < first_attempt_at + " + c.Param.Name() + ")"
	case CondNot:
		return "not (" + describeCond(c.Sub[0]) + ")"
	case CondOr, CondAnd:
		op := " or "
		if c.Kind == CondAnd {
			op = " and "
		}
		parts := make([]string, len(c.Sub))
		for i, s := range c.Sub {
			parts[i] = describeCond(s)
		}
		return "(" + strings.Join(parts, op) + ")"
	}
	return fmt.Sprintf("cond(%d)", c.Kind)
}

func describeSet(s Set) string {
	return s.Field.Column() + " = " + describeExpr(s.Field, s.Expr)
}

func describeExpr(f Field, e Expr) string {
	switch e.Kind {
	case ExprLit:
		if e.Value == nil {
			return "null"
		}
		return fmt.Sprint(e.Value)
	case ExprParam:
		return e.Param.Name()
	case ExprParamOrNull:
		return e.Param.Name() + " (null if empty)"
	case ExprNow:
		return "now"
	case ExprNowPlus:
		return "now + " + e.Param.Name()
	case ExprIncrement:
		return f.Column() + " + 1"
	case ExprParamOrKeep:
		return e.Param.Name() + " if given, else unchanged"
	case ExprExtendedLease:
		return "min(now + " + e.Param.Name() + ", attempt_started_at + " + e.Param2.Name() + ")"
	case ExprLeaseEndIfHeld:
		return "lease_until if in progress (an expired lease), else unchanged"
	case ExprAppendDuplicate:
		return f.Column() + " + external_id if new"
	case ExprField:
		return e.Field.Column()
	case ExprActorOrOwner:
		return "the principal, or else lease_owner"
	case ExprKeepOrNow:
		return "now if not yet set"
	}
	return fmt.Sprintf("expr(%d)", e.Kind)
}

func describeEvent(r *Rule) string {
	ev := r.Event
	reason := "computed"
	if r.ReviewReason == nil {
		func() {
			defer func() { _ = recover() }()
			reason = "“" + ev.Reason(nil, &Command{Kind: r.Command, ErrorCode: "‹code›", Reason: "‹reason›"}) + "”"
		}()
	} else {
		reason = "the duplicate's description"
	}
	from := "from"
	if ev.FromRaw {
		from = "from (as stored)"
	}
	return fmt.Sprintf("%s → to, attempt %s, %s", from, describeExpr(FieldAttemptCount, ev.Attempt), reason)
}

// The README's markers around the generated table.
const (
	ProtocolBegin = "<!-- protocol table: generated by `go run ./internal/cmd/protocoldoc README.md`; do not edit -->"
	ProtocolEnd   = "<!-- end of the protocol table -->"
)

// SpliceProtocol returns doc with the text between ProtocolBegin and
// ProtocolEnd replaced by ProtocolMarkdown. It fails if a marker is missing.
func SpliceProtocol(doc string) (string, error) {
	i := strings.Index(doc, ProtocolBegin)
	j := strings.Index(doc, ProtocolEnd)
	if i < 0 || j < i {
		return "", fmt.Errorf("the markers of the protocol table are missing: put %q and %q in the document", ProtocolBegin, ProtocolEnd)
	}
	return doc[:i+len(ProtocolBegin)] + "\n\n" + ProtocolMarkdown() + "\n" + doc[j:], nil
}
