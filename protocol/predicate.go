package protocol

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
)

// The predicates that the rules, the stores' queries and the purge share
// (the effective status, "due for a check", "purgeable", ...) are defined
// here once, as terms: Go evaluates a term on an operation (Eval), and
// each SQL store renders the same term in its dialect (SQL). So a store's
// WHERE clause and the engine's decision cannot drift apart; the stores'
// tests run every rendering on real rows and compare it with Eval.

// Dialect is how one SQL store spells what the shared terms need.
type Dialect struct {
	// Now is the statement's clock.
	Now string
	// IsFalse renders "the boolean column col is false".
	IsFalse func(col string) string
	// NowMinus renders the clock minus the duration argument named arg
	// (the store chooses the placeholder and the unit).
	NowMinus func(arg string) string
	// Table qualifies every column ("o" renders o.status); "" leaves them
	// bare. See On.
	Table string
}

// On returns d with every column qualified by table (an alias in a join).
func (d Dialect) On(table string) Dialect {
	d.Table = table
	return d
}

// column renders a column's name.
func (d Dialect) column(name string) string {
	if d.Table == "" {
		return name
	}
	return d.Table + "." + name
}

// termKind is the kind of a Term.
type termKind int

const (
	termColumn     termKind = iota + 1 // the column col
	termText                           // the text literal text
	termInt                            // the integer literal n
	termNow                            // the clock
	termNowMinus                       // the clock minus the duration argument arg
	termEq                             // sub[0] = sub[1]
	termIn                             // sub[0] is one of texts
	termAtOrBefore                     // sub[0] <= sub[1] (times)
	termIsNull                         // sub[0] IS NULL
	termIsFalse                        // the boolean column col is false
	termAnd                            // every one of sub
	termOr                             // one of sub
	termCase                           // CASE WHEN sub[0] THEN sub[1] ... [ELSE sub[last]] END
)

// Term is a value or a condition over an operation's row, the clock and
// named duration arguments, with SQL's semantics (a NULL compares to
// nothing). Build terms with the helpers below; they are immutable.
type Term struct {
	kind  termKind
	col   string
	get   func(op *opjournal.Operation) value
	text  string
	texts []string
	n     int64
	arg   string
	sub   []Term
	// hasElse: the last of a CASE's sub is its ELSE.
	hasElse bool
}

// value is a term's value: NULL, a text, a time or a boolean. It is not
// boxed, so that evaluating a term on the hot path allocates nothing.
type value struct {
	kind byte // 0 NULL, 's' text, 't' time, 'b' bool, 'i' integer
	s    string
	t    time.Time
	b    bool
	n    int64
}

func intValue(n int64) value { return value{kind: 'i', n: n} }

func textValue(s string) value { return value{kind: 's', s: s} }

// timeValue is t, NULL for the zero time (as the stores write it).
func timeValue(t time.Time) value {
	if t.IsZero() {
		return value{}
	}
	return value{kind: 't', t: t}
}

func boolValue(b bool) value { return value{kind: 'b', b: b} }

// termColumns are the columns the shared terms read, and how Go reads
// them from an operation (status is the stored one, Operation.Raw).
var termColumns = map[string]func(op *opjournal.Operation) value{
	"status":            func(op *opjournal.Operation) value { return textValue(string(op.Raw())) },
	"lease_until":       func(op *opjournal.Operation) value { return timeValue(op.LeaseUntil) },
	"unknown_since":     func(op *opjournal.Operation) value { return timeValue(op.UnknownSince) },
	"needs_review":      func(op *opjournal.Operation) value { return boolValue(op.NeedsReview) },
	"next_check_at":     func(op *opjournal.Operation) value { return timeValue(op.NextCheckAt) },
	"updated_at":        func(op *opjournal.Operation) value { return timeValue(op.UpdatedAt) },
	"duplicate_reports": func(op *opjournal.Operation) value { return intValue(int64(op.DuplicateReports)) },
	"approval_deadline": func(op *opjournal.Operation) value {
		if op.Approval == nil {
			return value{}
		}
		return timeValue(op.Approval.Deadline)
	},
}

func tColumn(name string) Term {
	get, ok := termColumns[name]
	if !ok {
		panic("protocol: no term column " + name)
	}
	return Term{kind: termColumn, col: name, get: get}
}

func tText(s string) Term              { return Term{kind: termText, text: s} }
func tInt(n int64) Term                { return Term{kind: termInt, n: n} }
func tNow() Term                       { return Term{kind: termNow} }
func tNowMinus(arg string) Term        { return Term{kind: termNowMinus, arg: arg} }
func tEq(a, b Term) Term               { return Term{kind: termEq, sub: []Term{a, b}} }
func tAtOrBefore(a, b Term) Term       { return Term{kind: termAtOrBefore, sub: []Term{a, b}} }
func tIsNull(a Term) Term              { return Term{kind: termIsNull, sub: []Term{a}} }
func tAnd(sub ...Term) Term            { return flat(termAnd, sub) }
func tOr(sub ...Term) Term             { return flat(termOr, sub) }
func tIsFalse(col string) Term         { c := tColumn(col); c.kind = termIsFalse; return c }
func tIn(a Term, texts ...string) Term { return Term{kind: termIn, sub: []Term{a}, texts: texts} }
func tCase(whenThen ...Term) Term      { return Term{kind: termCase, sub: whenThen} }
func tCaseElse(whenThenElse ...Term) Term {
	return Term{kind: termCase, sub: whenThenElse, hasElse: true}
}

// flat joins sub with AND or OR, taking a sub-term of the same kind
// apart: (a AND (b AND c)) renders as (a AND b AND c).
func flat(kind termKind, sub []Term) Term {
	var out []Term
	for _, s := range sub {
		if s.kind == kind {
			out = append(out, s.sub...)
		} else {
			out = append(out, s)
		}
	}
	return Term{kind: kind, sub: out}
}

func statusText(ss ...opjournal.Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

// The shared terms.
var (
	statusColumn = tColumn("status")

	// LeaseExpiredTerm holds for an in_progress row whose lease has ended
	// on the clock: unknown in effect, not yet written down.
	LeaseExpiredTerm = tAnd(tEq(statusColumn, tText(string(opjournal.StatusInProgress))), tAtOrBefore(tColumn("lease_until"), tNow()))

	// EffectiveStatusTerm is the status the rules and every reader see:
	// LeaseExpiredTerm makes an in_progress row unknown.
	EffectiveStatusTerm = tCaseElse(LeaseExpiredTerm, tText(string(opjournal.StatusUnknown)), statusColumn)

	// UnknownTerm holds when the effective status is unknown.
	UnknownTerm = tOr(tEq(statusColumn, tText(string(opjournal.StatusUnknown))), LeaseExpiredTerm)

	// EffectiveUnknownSinceTerm is when the outcome became unknown as of
	// the effective status: unknown_since of an unknown row, the lease's
	// end of an expired lease, NULL otherwise.
	EffectiveUnknownSinceTerm = tCase(tEq(statusColumn, tText(string(opjournal.StatusUnknown))), tColumn("unknown_since"),
		LeaseExpiredTerm, tColumn("lease_until"))

	// CheckDueTerm holds for an operation due for a reconciliation check
	// (ListParams.DueForCheck): unknown in effect, not under review, and
	// its next check due (or never scheduled).
	CheckDueTerm = tAnd(UnknownTerm, tIsFalse("needs_review"), tOr(tIsNull(tColumn("next_check_at")), tAtOrBefore(tColumn("next_check_at"), tNow())))

	// TerminalTerm holds for a row in a terminal status.
	TerminalTerm = tIn(statusColumn, statusText(opjournal.StatusSucceeded, opjournal.StatusFailedFinal)...)

	// SettledTerm holds for an operation nothing will change and no
	// person must look at: terminal and not under review. Only a settled
	// operation is ever purged; any other pins its history.
	SettledTerm = tAnd(TerminalTerm, tIsFalse("needs_review"))

	// ApprovalDueTerm holds for an operation whose approval has timed out
	// and is not yet escalated: awaiting approval, not under review, its
	// deadline at or before the clock (store.Store.DueApprovals; the rules
	// of ExpireApproval).
	ApprovalDueTerm = tAnd(tEq(statusColumn, tText(string(opjournal.StatusAwaitingApproval))), tIsFalse("needs_review"),
		tAtOrBefore(tColumn("approval_deadline"), tNow()))

	// PurgeableTerm holds for an operation a purge may delete (see
	// Purgeable): settled, and unchanged since the duration argument
	// "retention" before the clock.
	PurgeableTerm = tAnd(SettledTerm, tAtOrBefore(tColumn("updated_at"), tNowMinus(RetentionArg)))
)

// RetentionArg names PurgeableTerm's duration argument.
const RetentionArg = "retention"

// EffectiveStatus returns the status op shows at now (EffectiveStatusTerm).
func EffectiveStatus(op *opjournal.Operation, now time.Time) opjournal.Status {
	return opjournal.Status(EffectiveStatusTerm.eval(op, now, nil).s)
}

// EffectiveUnknownSince returns when op's outcome became unknown as of
// its effective status at now, zero if it is not unknown
// (EffectiveUnknownSinceTerm).
func EffectiveUnknownSince(op *opjournal.Operation, now time.Time) time.Time {
	return EffectiveUnknownSinceTerm.eval(op, now, nil).t
}

// CheckDue reports whether op is due for a reconciliation check at now
// (CheckDueTerm).
func CheckDue(op *opjournal.Operation, now time.Time) bool {
	return CheckDueTerm.Holds(op, now, nil)
}

// Holds reports whether the condition t is true (not false, not NULL) for
// op at now; args are the durations it names.
func (t Term) Holds(op *opjournal.Operation, now time.Time, args map[string]time.Duration) bool {
	v := t.eval(op, now, args)
	return v.kind == 'b' && v.b
}

// Value returns the term's value for op at now: nil for NULL, else a
// string, a time.Time or a bool. Tests compare it with a store's answer.
func (t Term) Value(op *opjournal.Operation, now time.Time, args map[string]time.Duration) any {
	switch v := t.eval(op, now, args); v.kind {
	case 's':
		return v.s
	case 't':
		return v.t
	case 'b':
		return v.b
	case 'i':
		return v.n
	}
	return nil
}

// eval evaluates the term with SQL's three-valued logic.
func (t Term) eval(op *opjournal.Operation, now time.Time, args map[string]time.Duration) value {
	switch t.kind {
	case termColumn:
		return t.get(op)
	case termText:
		return textValue(t.text)
	case termInt:
		return intValue(t.n)
	case termNow:
		return timeValue(now)
	case termNowMinus:
		d, ok := args[t.arg]
		if !ok {
			panic("protocol: no argument " + t.arg)
		}
		return timeValue(now.Add(-d))
	case termEq, termAtOrBefore:
		a, b := t.sub[0].eval(op, now, args), t.sub[1].eval(op, now, args)
		if a.kind == 0 || b.kind == 0 {
			return value{}
		}
		if t.kind == termAtOrBefore {
			return boolValue(!a.t.After(b.t))
		}
		return boolValue(a.kind == b.kind && a.s == b.s && a.b == b.b && a.n == b.n && a.t.Equal(b.t))
	case termIn:
		a := t.sub[0].eval(op, now, args)
		if a.kind == 0 {
			return value{}
		}
		for _, s := range t.texts {
			if a.s == s {
				return boolValue(true)
			}
		}
		return boolValue(false)
	case termIsNull:
		return boolValue(t.sub[0].eval(op, now, args).kind == 0)
	case termIsFalse:
		v := t.get(op)
		if v.kind == 0 {
			return value{}
		}
		return boolValue(!v.b)
	case termAnd, termOr:
		// AND: false wins over NULL; OR: true wins over NULL.
		decisive := t.kind == termOr
		null := false
		for _, s := range t.sub {
			switch v := s.eval(op, now, args); {
			case v.kind == 0:
				null = true
			case v.b == decisive:
				return boolValue(decisive)
			}
		}
		if null {
			return value{}
		}
		return boolValue(!decisive)
	case termCase:
		n := len(t.sub)
		if t.hasElse {
			n--
		}
		for i := 0; i+1 < n; i += 2 {
			if t.sub[i].Holds(op, now, args) {
				return t.sub[i+1].eval(op, now, args)
			}
		}
		if t.hasElse {
			return t.sub[n].eval(op, now, args)
		}
		return value{}
	}
	panic(fmt.Sprintf("protocol: term kind %d", t.kind))
}

// SQL renders the term in dialect d.
func (t Term) SQL(d Dialect) string {
	switch t.kind {
	case termColumn:
		return d.column(t.col)
	case termText:
		return "'" + t.text + "'"
	case termInt:
		return strconv.FormatInt(t.n, 10)
	case termNow:
		return d.Now
	case termNowMinus:
		return d.NowMinus(t.arg)
	case termEq:
		return t.sub[0].SQL(d) + " = " + t.sub[1].SQL(d)
	case termAtOrBefore:
		return t.sub[0].SQL(d) + " <= " + t.sub[1].SQL(d)
	case termIn:
		q := make([]string, len(t.texts))
		for i, s := range t.texts {
			q[i] = "'" + s + "'"
		}
		return t.sub[0].SQL(d) + " IN (" + strings.Join(q, ", ") + ")"
	case termIsNull:
		return t.sub[0].SQL(d) + " IS NULL"
	case termIsFalse:
		return d.IsFalse(d.column(t.col))
	case termAnd, termOr:
		sep := " AND "
		if t.kind == termOr {
			sep = " OR "
		}
		parts := make([]string, len(t.sub))
		for i, s := range t.sub {
			parts[i] = s.SQL(d)
		}
		return "(" + strings.Join(parts, sep) + ")"
	case termCase:
		var b strings.Builder
		b.WriteString("(CASE")
		n := len(t.sub)
		if t.hasElse {
			n--
		}
		for i := 0; i+1 < n; i += 2 {
			b.WriteString(" WHEN " + t.sub[i].SQL(d) + " THEN " + t.sub[i+1].SQL(d))
		}
		if t.hasElse {
			b.WriteString(" ELSE " + t.sub[n].SQL(d))
		}
		b.WriteString(" END)")
		return b.String()
	}
	panic(fmt.Sprintf("protocol: term kind %d", t.kind))
}
