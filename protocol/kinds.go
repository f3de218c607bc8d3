package protocol

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/opjournal/opjournal"
)

// The vocabularies of conditions and expressions, one row per kind: how
// Apply evaluates it, how docs/protocol.md describes it, and what a store
// must know about it (does it read the row, the command alone, or only
// Register's row read back). Adding a kind is adding its constant and its
// row here, and its SQL in store/postgres/render.go (whose test fails for
// a kind without one); nothing else switches over kinds.

// condDef is one kind of condition.
type condDef struct {
	// eval decides the condition; op is nil only for a rowless kind.
	eval func(cd Cond, op *opjournal.Operation, c *Command, now time.Time) bool
	// describe is the condition in the docs' words.
	describe func(cd Cond) string
	// rowless: decided without an operation (eval sees op == nil for a
	// Register of a new key); any other kind does not hold without one.
	rowless bool
	// commandOnly: decided by the command alone (policy flags, the
	// resolution), so a store may decide it before reading the row.
	commandOnly bool
	// combines: a combination of Sub, command-only when all of Sub are.
	combines bool
	// registerOnly: Register's own checks, decided by the insert (the
	// primary key) or in Go on the row read back; never rendered as SQL.
	registerOnly bool
}

var conds []condDef

func init() {
	// In init: the combinations evaluate and describe their Sub through
	// this table.
	conds = make([]condDef, CondOr+1)
	for k, d := range map[CondKind]condDef{
		CondStatus: {
			eval: func(cd Cond, op *opjournal.Operation, _ *Command, now time.Time) bool {
				return slices.Contains(cd.Statuses, EffectiveStatus(op, now))
			},
			describe: func(cd Cond) string {
				s := make([]string, len(cd.Statuses))
				for i, st := range cd.Statuses {
					s[i] = string(st)
				}
				return "status " + strings.Join(s, " or ")
			},
		},
		CondReview: {
			eval: func(cd Cond, op *opjournal.Operation, _ *Command, _ time.Time) bool { return op.NeedsReview == cd.Want },
			describe: func(cd Cond) string {
				if cd.Want {
					return "under review"
				}
				return "not under review"
			},
		},
		CondAttemptIssued: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return c.Attempt >= 1 && c.Attempt <= op.AttemptCount
			},
			describe: func(Cond) string { return "attempt issued (1 ≤ attempt ≤ attempt_count)" },
		},
		CondAttemptLatest: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return c.Attempt == op.AttemptCount
			},
			describe: func(Cond) string { return "attempt = attempt_count" },
		},
		CondFlag: {
			eval: func(cd Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				b, _ := c.Value(cd.Param, nil, op).(bool)
				return b
			},
			describe: func(cd Cond) string { return cd.Param.Name() },
			rowless:  true, commandOnly: true,
		},
		CondUnknownFor: {
			eval: func(cd Cond, op *opjournal.Operation, c *Command, now time.Time) bool {
				since := EffectiveUnknownSince(op, now)
				return !since.IsZero() && !since.After(now.Add(-asDuration(c.Value(cd.Param, nil, op))))
			},
			describe: func(cd Cond) string {
				return "unknown for ≥ " + cd.Param.Name() + " (visibility_lag + in_flight_window)"
			},
		},
		CondAttemptYounger: {
			eval: func(cd Cond, op *opjournal.Operation, c *Command, now time.Time) bool {
				return op.AttemptStartedAt.Add(asDuration(c.Value(cd.Param, nil, op))).After(now)
			},
			describe: func(cd Cond) string { return "now < attempt_started_at + " + cd.Param.Name() },
		},
		CondSameOrNoExternalID: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return c.ExternalID == "" || c.ExternalID == op.ExternalID
			},
			describe: func(Cond) string { return "external_id empty or the confirmed one" },
		},
		CondNewDuplicate: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return c.ExternalID != "" && c.ExternalID != op.ExternalID &&
					!slices.Contains(op.DuplicateExternalIDs, c.ExternalID) && len(op.DuplicateExternalIDs) < opjournal.MaxDuplicateExternalIDs
			},
			describe: func(Cond) string {
				return fmt.Sprintf("a new other external_id (fewer than %d kept)", opjournal.MaxDuplicateExternalIDs)
			},
		},
		CondResolution: {
			eval:     func(cd Cond, _ *opjournal.Operation, c *Command, _ time.Time) bool { return c.Resolution == cd.Status },
			describe: func(cd Cond) string { return "resolution " + string(cd.Status) },
			rowless:  true, commandOnly: true,
		},
		CondAbsent: {
			eval:     func(_ Cond, op *opjournal.Operation, _ *Command, _ time.Time) bool { return op == nil },
			describe: func(Cond) string { return "key absent" },
			rowless:  true, registerOnly: true,
		},
		CondSameRequest: {
			eval:         func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool { return sameRequest(op, c) },
			describe:     func(Cond) string { return "same request hash" },
			registerOnly: true,
		},
		CondHashKeyKnown: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				if op.HashKeyID == c.HashKeyID || c.HashFor == nil {
					return op.HashKeyID == c.HashKeyID
				}
				_, ok := c.HashFor(op.HashKeyID)
				return ok
			},
			describe:     func(Cond) string { return "its hash key still held" },
			registerOnly: true,
		},
		CondSameRefs: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return maps.Equal(op.Refs, c.Refs)
			},
			describe:     func(Cond) string { return "same refs" },
			registerOnly: true,
		},
		CondSameParent: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return op.ParentKey == c.ParentKey
			},
			describe:     func(Cond) string { return "same parent_key" },
			registerOnly: true,
		},
		CondWithinProviderWindow: {
			eval: func(cd Cond, op *opjournal.Operation, c *Command, now time.Time) bool {
				return WithinProviderWindow(op.FirstAttemptAt, asDuration(c.Value(cd.Param, nil, op)), now)
			},
			describe: func(cd Cond) string {
				return "(" + cd.Param.Name() + " = 0 or now < first_attempt_at + " + cd.Param.Name() + ")"
			},
		},
		CondSameHash: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return op.RequestHash == c.RequestHash
			},
			describe: func(Cond) string { return "request_hash = the stored one" },
		},
		CondBeforeDeadline: {
			eval: func(_ Cond, op *opjournal.Operation, _ *Command, now time.Time) bool {
				return op.Approval == nil || op.Approval.Deadline.IsZero() || op.Approval.Deadline.After(now)
			},
			describe: func(Cond) string { return "now < approval_deadline (or none)" },
		},
		CondFirstOfTwo: {
			eval: func(_ Cond, op *opjournal.Operation, _ *Command, _ time.Time) bool {
				return op.Approval != nil && op.Approval.TwoPerson && len(op.Approval.Approvals) == 0
			},
			describe: func(Cond) string { return "two_person and no approval yet" },
		},
		CondNotApprovedByActor: {
			eval: func(_ Cond, op *opjournal.Operation, c *Command, _ time.Time) bool {
				return !op.Approval.ApprovedBy(c.Actor)
			},
			describe: func(Cond) string { return "the actor has not approved yet" },
		},
		CondTimeoutEscalates: {
			eval: func(_ Cond, op *opjournal.Operation, _ *Command, _ time.Time) bool {
				return op.Approval != nil && op.Approval.OnTimeout == opjournal.ApprovalTimeoutEscalate
			},
			describe: func(Cond) string { return "on_timeout escalate" },
		},
		CondAnd: {
			eval: func(cd Cond, op *opjournal.Operation, c *Command, now time.Time) bool {
				for _, s := range cd.Sub {
					if !s.Eval(op, c, now) {
						return false
					}
				}
				return true
			},
			describe: func(cd Cond) string { return describeAll(cd.Sub, " and ") },
			rowless:  true, combines: true,
		},
		CondNot: {
			eval: func(cd Cond, op *opjournal.Operation, c *Command, now time.Time) bool {
				return !cd.Sub[0].Eval(op, c, now)
			},
			describe: func(cd Cond) string { return "not (" + describeCond(cd.Sub[0]) + ")" },
			rowless:  true, combines: true,
		},
		CondOr: {
			eval: func(cd Cond, op *opjournal.Operation, c *Command, now time.Time) bool {
				for _, s := range cd.Sub {
					if s.Eval(op, c, now) {
						return true
					}
				}
				return false
			},
			describe: func(cd Cond) string { return describeAll(cd.Sub, " or ") },
			rowless:  true, combines: true,
		},
	} {
		conds[k] = d
	}
}

func describeAll(sub []Cond, sep string) string {
	parts := make([]string, len(sub))
	for i, s := range sub {
		parts[i] = describeCond(s)
	}
	return "(" + strings.Join(parts, sep) + ")"
}

func (k CondKind) def() *condDef {
	if k <= 0 || int(k) >= len(conds) || conds[k].eval == nil {
		panic(fmt.Sprintf("protocol: condition kind %d", int(k)))
	}
	return &conds[k]
}

// CondKinds returns every kind of condition (for tests that every kind
// has its SQL).
func CondKinds() []CondKind {
	var ks []CondKind
	for k := range conds {
		if conds[k].eval != nil {
			ks = append(ks, CondKind(k))
		}
	}
	return ks
}

// RegisterOnly reports whether conditions of kind k are Register's own
// checks: decided by the insert (the primary key) or in Go on the row
// read back, so SQL never renders them.
func (k CondKind) RegisterOnly() bool { return k.def().registerOnly }

// Eval evaluates the condition.
func (cd Cond) Eval(op *opjournal.Operation, c *Command, now time.Time) bool {
	d := cd.Kind.def()
	if op == nil && !d.rowless {
		return false
	}
	return d.eval(cd, op, c, now)
}

// CommandOnly reports whether the condition depends on the command alone
// (policy flags, the resolution): a store may decide it before it reads
// the row, with a nil operation.
func (cd Cond) CommandOnly() bool {
	d := cd.Kind.def()
	if !d.combines {
		return d.commandOnly
	}
	for _, s := range cd.Sub {
		if !s.CommandOnly() {
			return false
		}
	}
	return true
}

// exprDef is one kind of expression.
type exprDef struct {
	// eval is the value for field f; op is never nil (a new row is the
	// zero operation) unless rowless.
	eval func(e Expr, op *opjournal.Operation, f Field, r *Rule, c *Command, now time.Time) any
	// describe is the expression in the docs' words.
	describe func(f Field, e Expr) string
	// rowless: the value does not read the row (op may be nil).
	rowless bool
}

var exprs = [...]exprDef{
	ExprLit: {
		eval: func(e Expr, _ *opjournal.Operation, _ Field, _ *Rule, _ *Command, _ time.Time) any { return e.Value },
		describe: func(_ Field, e Expr) string {
			if e.Value == nil {
				return "null"
			}
			return fmt.Sprint(e.Value)
		},
		rowless: true,
	},
	ExprParam: {
		eval: func(e Expr, op *opjournal.Operation, _ Field, r *Rule, c *Command, _ time.Time) any {
			return c.Value(e.Param, r, op)
		},
		describe: func(_ Field, e Expr) string { return e.Param.Name() },
		rowless:  true,
	},
	ExprParamOrNull: {
		eval: func(e Expr, op *opjournal.Operation, _ Field, r *Rule, c *Command, _ time.Time) any {
			if s, _ := c.Value(e.Param, r, op).(string); s != "" {
				return s
			}
			return nil
		},
		describe: func(_ Field, e Expr) string { return e.Param.Name() + " (null if empty)" },
		rowless:  true,
	},
	ExprNow: {
		eval:     func(_ Expr, _ *opjournal.Operation, _ Field, _ *Rule, _ *Command, now time.Time) any { return now },
		describe: func(Field, Expr) string { return "now" },
		rowless:  true,
	},
	ExprNowPlus: {
		eval: func(e Expr, op *opjournal.Operation, _ Field, r *Rule, c *Command, now time.Time) any {
			return now.Add(paramDuration(c.Value(e.Param, r, op), e.Param))
		},
		describe: func(_ Field, e Expr) string { return "now + " + e.Param.Name() },
		rowless:  true,
	},
	ExprIncrement: {
		eval: func(_ Expr, op *opjournal.Operation, f Field, _ *Rule, _ *Command, _ time.Time) any {
			return asInt(getField(op, f)) + 1
		},
		describe: func(f Field, _ Expr) string { return f.Column() + " + 1" },
	},
	ExprParamOrKeep: {
		eval: func(e Expr, op *opjournal.Operation, f Field, r *Rule, c *Command, _ time.Time) any {
			if v := c.Value(e.Param, r, op); !empty(v) {
				return v
			}
			return getField(op, f)
		},
		describe: func(_ Field, e Expr) string { return e.Param.Name() + " if given, else unchanged" },
	},
	ExprExtendedLease: {
		eval: func(e Expr, op *opjournal.Operation, _ Field, r *Rule, c *Command, now time.Time) any {
			until := now.Add(paramDuration(c.Value(e.Param, r, op), e.Param))
			if limit := op.AttemptStartedAt.Add(asDuration(c.Value(e.Param2, r, op))); limit.Before(until) {
				until = limit
			}
			return until
		},
		describe: func(_ Field, e Expr) string {
			return "min(now + " + e.Param.Name() + ", attempt_started_at + " + e.Param2.Name() + ")"
		},
	},
	ExprLeaseEndIfHeld: {
		eval: func(_ Expr, op *opjournal.Operation, _ Field, _ *Rule, _ *Command, _ time.Time) any {
			if op.Raw() == opjournal.StatusInProgress {
				return op.LeaseUntil
			}
			return op.UnknownSince
		},
		describe: func(Field, Expr) string { return "lease_until if in progress (an expired lease), else unchanged" },
	},
	ExprAppendDuplicate: {
		eval: func(_ Expr, op *opjournal.Operation, _ Field, _ *Rule, c *Command, now time.Time) any {
			ids := slices.Clone(op.DuplicateExternalIDs)
			if (Cond{Kind: CondNewDuplicate}).Eval(op, c, now) {
				ids = append(ids, c.ExternalID)
			}
			return ids
		},
		describe: func(f Field, _ Expr) string { return f.Column() + " + external_id if new" },
	},
	ExprField: {
		eval: func(e Expr, op *opjournal.Operation, _ Field, _ *Rule, _ *Command, _ time.Time) any {
			return getField(op, e.Field)
		},
		describe: func(_ Field, e Expr) string { return e.Field.Column() },
	},
	ExprActorOrOwner: {
		eval: func(_ Expr, op *opjournal.Operation, _ Field, _ *Rule, c *Command, _ time.Time) any {
			if a := c.Actor; a != "" {
				return a
			}
			return op.LeaseOwner
		},
		describe: func(Field, Expr) string { return "the principal, or else lease_owner" },
	},
	ExprKeepOrNow: {
		eval: func(_ Expr, op *opjournal.Operation, f Field, _ *Rule, _ *Command, now time.Time) any {
			if t := asTime(getField(op, f)); !t.IsZero() {
				return t
			}
			return now
		},
		describe: func(Field, Expr) string { return "now if not yet set" },
	},
	ExprAppendApproval: {
		eval: func(_ Expr, op *opjournal.Operation, _ Field, _ *Rule, c *Command, now time.Time) any {
			a := op.Approval.Clone()
			if a == nil {
				a = &opjournal.Approval{}
			}
			a.Approvals = append(a.Approvals, opjournal.ApprovalDecision{Principal: c.Actor, Label: c.ActorLabel, At: now, Reason: c.Reason})
			return opjournal.ApprovalJSON(a)
		},
		describe: func(f Field, _ Expr) string { return f.Column() + " + (actor, actor_label, now, reason)" },
	},
}

func (k ExprKind) def() *exprDef {
	if k <= 0 || int(k) >= len(exprs) || exprs[k].eval == nil {
		panic(fmt.Sprintf("protocol: expression kind %d", int(k)))
	}
	return &exprs[k]
}

// ExprKinds returns every kind of expression (for tests that every kind
// has its SQL).
func ExprKinds() []ExprKind {
	var ks []ExprKind
	for k := range exprs {
		if exprs[k].eval != nil {
			ks = append(ks, ExprKind(k))
		}
	}
	return ks
}

// Eval evaluates the expression for field f (its current value is the
// starting point of ExprIncrement and the like) on op.
func (e Expr) Eval(op *opjournal.Operation, f Field, r *Rule, c *Command, now time.Time) any {
	d := e.Kind.def()
	if op == nil && !d.rowless { // Register: a new row has no previous values
		op = &opjournal.Operation{}
	}
	return d.eval(e, op, f, r, c, now)
}
