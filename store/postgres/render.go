package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol"
)

// The protocol table (protocol/table.go) rendered as SQL. Every rule that changes
// an operation becomes one statement: a conditional UPDATE whose WHERE is
// the rule's guard, whose SET is the rule's assignments, and which writes
// the rule's event in the same statement (a data-modifying CTE). The batched
// statements (batched.go) are the same rules over unnest()ed arrays. Nothing
// here is a rule of its own: change a rule in the table and its SQL follows.
//
// Every statement takes the clock as $1 (NULL in production: the database's
// now(); a time under a test clock, store.Clock), the tenant as $2 and the
// key as $3; the rule's parameters follow. In a batched statement the
// parameters are columns of the unnest, named in_<param>.

// clock is "now" in every statement.
const clock = `coalesce($1::timestamptz, now())`

// dialect is how PostgreSQL spells the protocol's shared terms
// (protocol/predicate.go): the statement's clock, a false
// boolean, and a duration argument in seconds ($3 in the purge).
var dialect = protocol.Dialect{
	Now:     clock,
	IsFalse: func(col string) string { return "NOT " + col },
	NowMinus: func(arg string) string {
		if arg != protocol.RetentionArg {
			panic("postgres: no placeholder for " + arg)
		}
		return clock + " - make_interval(secs => $3::float8)"
	},
}

// The shared terms rendered once; every statement is made of these.
var (
	// effectiveStatus is the status as the rules see it.
	effectiveStatus = protocol.EffectiveStatusTerm.SQL(dialect)
	// isUnknown matches operations whose effective status is unknown.
	isUnknown = protocol.UnknownTerm.SQL(dialect)
	// leaseExpired matches in_progress rows whose lease has expired.
	leaseExpired = protocol.LeaseExpiredTerm.SQL(dialect)
	// checkDue matches operations due for a check (ListParams.DueForCheck).
	checkDue = protocol.CheckDueTerm.SQL(dialect)
	// effectiveUnknownSince is when the outcome became unknown.
	effectiveUnknownSince = protocol.EffectiveUnknownSinceTerm.SQL(dialect)
	// terminal matches rows in a terminal status.
	terminal = protocol.TerminalTerm.SQL(dialect)
	// approvalDue matches operations whose approval has timed out.
	approvalDue = protocol.ApprovalDueTerm.SQL(dialect)
)

// restColumns, after payload, result and note, is the row every query
// returns, with the effective status and, last, the database's clock (used
// to compute retry-after hints without trusting ours). The BASIC view
// leaves out payload, result and note (AIP-157).
var (
	fullColumns  = `payload::text, result::text, coalesce(note, ''), ` + restColumns
	basicColumns = `NULL::text, NULL::text, '', ` + restColumns
	restColumns  = `tenant, operation_key, action_type, request_hash, ` + effectiveStatus + `,
	attempt_count, coalesce(lease_owner, ''), lease_until, coalesce(external_id, ''),
	nullif(duplicate_external_ids, '{}'), duplicate_reports, coalesce(error_code, ''),
	needs_review, coalesce(review_reason, ''), created_at, updated_at,
	` + effectiveUnknownSince + `,
	check_count, last_checked_at, next_check_at, attempt_started_at, hash_key_id,
	refs::text, coalesce(parent_key, ''), first_attempt_at, approval::text, approval_deadline, budgets::text, ` + clock
)

// statement is a rule rendered as SQL, and the parameters it takes after
// $1–$3 (or, batched, the unnest's columns after tenant and key).
type statement struct {
	rule *protocol.Rule
	// name is the rules it applies ("Claim: win"), for traces and the
	// golden file of statements.
	name   string
	sql    string
	params []protocol.Param
}

// args returns the statement's arguments for command c (op: the row as
// read, nil on the one-statement path).
func (st *statement) args(clockArg any, tenant string, c *protocol.Command, op *opjournal.Operation) []any {
	args := make([]any, 0, 3+len(st.params))
	args = append(args, clockArg, tenant, c.Key)
	for _, p := range st.params {
		switch p.Type() {
		case protocol.TypeInt:
			args = append(args, int32(c.Int(p)))
		case protocol.TypeBool:
			args = append(args, c.Bool(p))
		case protocol.TypeDuration:
			args = append(args, c.Duration(p).Seconds())
		case protocol.TypeJSON:
			if raw := c.JSON(p); raw != nil {
				s := string(raw)
				args = append(args, &s)
			} else {
				args = append(args, nil)
			}
		default:
			args = append(args, c.Text(p, st.rule, op))
		}
	}
	return args
}

// renderer renders one statement, numbering its parameters.
type renderer struct {
	batched bool
	params  []protocol.Param
	index   map[protocol.Param]int
}

func newRenderer(batched bool) *renderer {
	return &renderer{batched: batched, index: map[protocol.Param]int{}}
}

// param renders a reference to parameter p.
func (r *renderer) param(p protocol.Param) string {
	i, ok := r.index[p]
	if !ok {
		r.params = append(r.params, p)
		i = len(r.params)
		r.index[p] = i
	}
	if r.batched {
		if p.Type() == protocol.TypeJSON {
			return "in_" + p.Name() + "::json"
		}
		return "in_" + p.Name()
	}
	n := "$" + strconv.Itoa(3+i)
	switch p.Type() {
	case protocol.TypeInt:
		return n + "::int"
	case protocol.TypeBool:
		return n + "::boolean"
	case protocol.TypeDuration:
		return n + "::float8"
	case protocol.TypeJSON:
		return n + "::json"
	}
	return n + "::text"
}

// seconds renders a duration (or whole-seconds int) parameter as an interval.
func (r *renderer) seconds(p protocol.Param) string {
	return "make_interval(secs => " + r.param(p) + ")"
}

// arrayType is the unnest array type of a parameter in a batched statement.
func arrayType(p protocol.Param) string {
	switch p.Type() {
	case protocol.TypeInt:
		return "int[]"
	case protocol.TypeBool:
		return "bool[]"
	case protocol.TypeDuration:
		return "float8[]"
	}
	return "text[]"
}

// renderable reports whether a condition can be rendered: Register's own
// conditions are decided by the insert itself (the primary key) or in Go
// on the row read back.
func renderable(c protocol.Cond) bool { return !c.Kind.RegisterOnly() }

// condSQL renders each kind of condition but the combinations (cond
// renders those): the SQL column of the protocol's table of conditions
// (protocol/kinds.go). TestEveryKindRenders checks that no kind
// lacks its row.
var condSQL = map[protocol.CondKind]func(r *renderer, c protocol.Cond) string{
	protocol.CondStatus: func(_ *renderer, c protocol.Cond) string {
		if len(c.Statuses) == 1 && c.Statuses[0] == opjournal.StatusUnknown {
			return isUnknown
		}
		q := make([]string, len(c.Statuses))
		for i, s := range c.Statuses {
			q[i] = "'" + string(s) + "'"
		}
		return effectiveStatus + " IN (" + strings.Join(q, ", ") + ")"
	},
	protocol.CondReview: func(_ *renderer, c protocol.Cond) string {
		if c.Want {
			return "needs_review"
		}
		return "NOT needs_review"
	},
	protocol.CondAttemptIssued: func(r *renderer, _ protocol.Cond) string {
		return "(" + r.param(protocol.ParamAttempt) + " BETWEEN 1 AND attempt_count)"
	},
	protocol.CondAttemptLatest: func(r *renderer, _ protocol.Cond) string {
		return "(attempt_count = " + r.param(protocol.ParamAttempt) + ")"
	},
	protocol.CondFlag: func(r *renderer, c protocol.Cond) string { return r.param(c.Param) },
	protocol.CondUnknownFor: func(r *renderer, c protocol.Cond) string {
		return "((CASE WHEN status = 'in_progress' THEN lease_until ELSE unknown_since END) <= " + clock + " - " + r.seconds(c.Param) + ")"
	},
	protocol.CondAttemptYounger: func(r *renderer, c protocol.Cond) string {
		return "(attempt_started_at + " + r.seconds(c.Param) + " > " + clock + ")"
	},
	protocol.CondWithinProviderWindow: func(r *renderer, c protocol.Cond) string {
		w := r.param(c.Param)
		return "(" + w + " <= 0 OR first_attempt_at IS NULL OR first_attempt_at + " + r.seconds(c.Param) + " > " + clock + ")"
	},
	protocol.CondSameOrNoExternalID: func(r *renderer, _ protocol.Cond) string {
		x := r.param(protocol.ParamExternalID)
		return "(" + x + " = '' OR " + x + " = coalesce(external_id, ''))"
	},
	protocol.CondNewDuplicate: func(r *renderer, _ protocol.Cond) string {
		x := r.param(protocol.ParamExternalID)
		return fmt.Sprintf("(%s <> '' AND %s <> coalesce(external_id, '') AND NOT (%s = ANY(duplicate_external_ids)) AND cardinality(duplicate_external_ids) < %d)",
			x, x, x, opjournal.MaxDuplicateExternalIDs)
	},
	protocol.CondResolution: func(r *renderer, c protocol.Cond) string {
		return "(" + r.param(protocol.ParamResolution) + " = '" + string(c.Status) + "')"
	},
	protocol.CondSameHash: func(r *renderer, _ protocol.Cond) string {
		return "(request_hash = " + r.param(protocol.ParamRequestHash) + ")"
	},
	protocol.CondBeforeDeadline: func(*renderer, protocol.Cond) string {
		return "(approval_deadline IS NULL OR approval_deadline > " + clock + ")"
	},
	protocol.CondFirstOfTwo: func(*renderer, protocol.Cond) string {
		return "(coalesce((approval->>'two_person')::boolean, false) AND coalesce(jsonb_array_length(approval->'approvals'), 0) = 0)"
	},
	protocol.CondNotApprovedByActor: func(r *renderer, _ protocol.Cond) string {
		return "(NOT (coalesce(approval->'approvals', '[]'::jsonb) @> jsonb_build_array(jsonb_build_object('principal', " + r.param(protocol.ParamActor) + "))))"
	},
	protocol.CondTimeoutEscalates: func(*renderer, protocol.Cond) string {
		return "(coalesce(approval->>'on_timeout', '') = '" + opjournal.ApprovalTimeoutEscalate + "')"
	},
}

// exprSQL renders each kind of expression, the value assigned to field
// col: the SQL column of the protocol's table of expressions.
var exprSQL = map[protocol.ExprKind]func(r *renderer, col string, e protocol.Expr) string{
	protocol.ExprLit: func(_ *renderer, _ string, e protocol.Expr) string {
		switch v := e.Value.(type) {
		case nil:
			return "NULL"
		case opjournal.Status:
			return "'" + string(v) + "'"
		case bool:
			return strconv.FormatBool(v)
		case int:
			return strconv.Itoa(v)
		case string:
			return "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
		panic(fmt.Sprintf("postgres: literal %T", e.Value))
	},
	protocol.ExprParam:       func(r *renderer, _ string, e protocol.Expr) string { return r.param(e.Param) },
	protocol.ExprParamOrNull: func(r *renderer, _ string, e protocol.Expr) string { return "nullif(" + r.param(e.Param) + ", '')" },
	protocol.ExprNow:         func(*renderer, string, protocol.Expr) string { return clock },
	protocol.ExprNowPlus: func(r *renderer, _ string, e protocol.Expr) string {
		return "(" + clock + " + " + r.seconds(e.Param) + ")"
	},
	protocol.ExprIncrement: func(_ *renderer, col string, _ protocol.Expr) string { return "(" + col + " + 1)" },
	protocol.ExprParamOrKeep: func(r *renderer, col string, e protocol.Expr) string {
		if e.Param.Type() == protocol.TypeJSON {
			return "coalesce(" + r.param(e.Param) + ", " + col + ")"
		}
		return "coalesce(nullif(" + r.param(e.Param) + ", ''), " + col + ")"
	},
	protocol.ExprExtendedLease: func(r *renderer, _ string, e protocol.Expr) string {
		return "least(" + clock + " + " + r.seconds(e.Param) + ", attempt_started_at + " + r.seconds(e.Param2) + ")"
	},
	protocol.ExprLeaseEndIfHeld: func(*renderer, string, protocol.Expr) string {
		return "(CASE WHEN status = 'in_progress' THEN lease_until ELSE unknown_since END)"
	},
	protocol.ExprAppendDuplicate: func(r *renderer, _ string, _ protocol.Expr) string {
		return "(CASE WHEN " + r.cond(protocol.Cond{Kind: protocol.CondNewDuplicate}) +
			" THEN array_append(duplicate_external_ids, " + r.param(protocol.ParamExternalID) + ") ELSE duplicate_external_ids END)"
	},
	protocol.ExprField: func(_ *renderer, _ string, e protocol.Expr) string { return e.Field.Column() },
	protocol.ExprActorOrOwner: func(r *renderer, _ string, _ protocol.Expr) string {
		return "coalesce(nullif(" + r.param(protocol.ParamActor) + ", ''), lease_owner, '')"
	},
	protocol.ExprKeepOrNow: func(_ *renderer, col string, _ protocol.Expr) string { return "coalesce(" + col + ", " + clock + ")" },
	protocol.ExprAppendApproval: func(r *renderer, col string, _ protocol.Expr) string {
		// The label is left out when empty, as opjournal.ApprovalJSON does.
		label := r.param(protocol.ParamActorLabel)
		return "jsonb_set(" + col + ", '{approvals}', coalesce(" + col + "->'approvals', '[]'::jsonb) || jsonb_build_array(jsonb_build_object('principal', " +
			r.param(protocol.ParamActor) + ", 'at', " + clock + ", 'reason', " + r.param(protocol.ParamReason) + ") || " +
			"CASE WHEN " + label + " = '' THEN '{}'::jsonb ELSE jsonb_build_object('label', " + label + ") END))"
	},
}

// cond renders a condition. The combinations are rendered here, not in
// condSQL: a table row that rendered its Sub would make the table's
// initialization depend on itself.
func (r *renderer) cond(c protocol.Cond) string {
	switch c.Kind {
	case protocol.CondNot:
		return "NOT " + r.cond(c.Sub[0])
	case protocol.CondOr:
		return r.join(c.Sub, " OR ")
	case protocol.CondAnd:
		return r.join(c.Sub, " AND ")
	}
	if render := condSQL[c.Kind]; render != nil {
		return render(r, c)
	}
	panic(fmt.Sprintf("postgres: condition kind %d cannot be rendered", c.Kind))
}

// join renders sub joined by op, in parentheses.
func (r *renderer) join(sub []protocol.Cond, op string) string {
	parts := make([]string, len(sub))
	for i, s := range sub {
		parts[i] = r.cond(s)
	}
	return "(" + strings.Join(parts, op) + ")"
}

// guard renders a rule's whole first-match predicate: its own
// requirements, and that no earlier rule of its command holds. Apply
// picks the first rule that holds on the row it read; a concurrent commit
// may change the row before the UPDATE runs, so the UPDATE must not rely
// on an earlier rule having failed on that read: a rule that has no
// condition of its own on what an earlier rule tests (a repeated report
// after an acknowledged review, say) would otherwise still match. Each
// part is coalesced to false, so a NULL column decides "does not hold" in
// the rule's own guard and in its negation alike (TestGuardIsFirstMatch
// compares both with Apply on real rows).
func (r *renderer) guard(rule *protocol.Rule) string {
	parts := []string{}
	if own := r.holds(rule); own != "" {
		parts = append(parts, own)
	}
	for _, e := range protocol.Rules(rule.Command) {
		if e == rule {
			break
		}
		holds := r.holds(e)
		if holds == "" {
			panic(fmt.Sprintf("postgres: %s rule %q holds always, so %q after it never applies", e.Command, e.Case, rule.Case))
		}
		parts = append(parts, "NOT "+holds)
	}
	if len(parts) == 0 {
		return "true"
	}
	return strings.Join(parts, "\n\t\t  AND ")
}

// holds renders "every requirement of rule holds" (NULL: false), or ""
// for a rule without requirements. A rule whose requirements cannot all
// be rendered is decided in Go (Register's, on the row read back) and
// never guards an UPDATE.
func (r *renderer) holds(rule *protocol.Rule) string {
	var conds []string
	for _, req := range rule.Requires {
		if !renderable(req.Cond) {
			if rule.Command != protocol.CmdRegister {
				panic(fmt.Sprintf("postgres: %s rule %q has a condition SQL cannot render", rule.Command, rule.Case))
			}
			continue
		}
		conds = append(conds, r.cond(req.Cond))
	}
	if len(conds) == 0 {
		return ""
	}
	return "coalesce(" + strings.Join(conds, " AND ") + ", false)"
}

// expr renders the value e assigns to field f.
func (r *renderer) expr(f protocol.Field, e protocol.Expr) string {
	if render := exprSQL[e.Kind]; render != nil {
		return render(r, f.Column(), e)
	}
	panic(fmt.Sprintf("postgres: expression kind %d cannot be rendered", e.Kind))
}

// sets renders a rule's SET list.
func (r *renderer) sets(rule *protocol.Rule) string {
	parts := make([]string, len(rule.Sets))
	for i, s := range rule.Sets {
		parts[i] = s.Field.Column() + " = " + r.expr(s.Field, s.Expr)
	}
	return strings.Join(parts, ",\n\t\t       ")
}

// eventInsert renders the INSERT of a rule's event, selecting from the
// CTE named from (the changed rows).
func (r *renderer) eventInsert(rule *protocol.Rule, from, fromStatus string) string {
	ev := rule.Event
	ext := "NULL"
	if ev.ExternalID.Kind != 0 {
		ext = "nullif(" + r.expr(0, ev.ExternalID) + ", '')"
	}
	return `INSERT INTO operation_events (tenant, operation_key, at, from_status, to_status, attempt, actor, actor_label, stated_actor, reason, external_id)
		SELECT tenant, operation_key, ` + clock + `, ` + fromStatus + `, ` + effectiveStatus + `, ` + r.expr(0, ev.Attempt) + `, ` +
		r.expr(0, ev.Actor) + `, ` + r.param(protocol.ParamActorLabel) + `, ` + r.param(protocol.ParamStatedActor) + `, ` + r.param(protocol.ParamEventReason) + `, ` + ext + `
		FROM ` + from
}

// fromStatus is the status a rule's event records as From, evaluated on
// the row before the change (prev_status).
func fromStatus(rule *protocol.Rule) string {
	if rule.Event != nil && rule.Event.FromRaw {
		return "status"
	}
	return effectiveStatus
}

// renderUpdate renders a rule that changes an existing operation as one
// statement.
func renderUpdate(rule *protocol.Rule) *statement {
	r := newRenderer(false)
	sql := `WITH upd AS (
		UPDATE operations SET prev_status = ` + fromStatus(rule) + `,
		       ` + r.sets(rule) + `,
		       updated_at = ` + clock + `
		WHERE tenant = $2 AND operation_key = $3
		  AND ` + r.guard(rule) + `
		RETURNING *
	)`
	if rule.Event != nil {
		sql += `, ev AS (
		` + r.eventInsert(rule, "upd", "prev_status") + `
	)`
	}
	sql += `
	SELECT ` + fullColumns + ` FROM upd`
	return &statement{rule: rule, name: rule.Name(), sql: sql, params: r.params}
}

// renderBatchedUpdate renders a rule over unnest()ed arrays: one row of
// arrays per call, $2 the tenants, $3 the keys, then one array per
// parameter in the order of statement.params.
func renderBatchedUpdate(rule *protocol.Rule) *statement {
	r := newRenderer(true)
	body := `upd AS (
		UPDATE operations SET prev_status = ` + fromStatus(rule) + `,
		       ` + r.sets(rule) + `,
		       updated_at = ` + clock + `
		FROM i
		WHERE tenant = in_tenant AND operation_key = in_key
		  AND ` + r.guard(rule) + `
		RETURNING operations.*, i.*
	)`
	if rule.Event != nil {
		body += `, ev AS (
		` + r.eventInsert(rule, "upd", "prev_status") + `
	)`
	}
	sql := `WITH ` + unnest(r.params) + `, ` + body + `
	SELECT ` + fullColumns + ` FROM upd`
	return &statement{rule: rule, name: rule.Name(), sql: sql, params: r.params}
}

// unnest renders the CTE i of a batched statement.
func unnest(params []protocol.Param) string {
	arrays := []string{"$2::text[]", "$3::text[]"}
	names := []string{"in_tenant", "in_key"}
	for i, p := range params {
		arrays = append(arrays, "$"+strconv.Itoa(4+i)+"::"+arrayType(p))
		names = append(names, "in_"+p.Name())
	}
	return `i AS (
		SELECT * FROM unnest(` + strings.Join(arrays, ", ") + `)
		    AS i(` + strings.Join(names, ", ") + `)
	)`
}

// registerColumns are what Register writes besides the rule's sets.
const registerColumns = `tenant, operation_key, action_type, request_hash, hash_key_id, payload, refs, parent_key, budgets, created_at, updated_at`

// registerValues renders the values of registerColumns after the tenant
// and key.
func (r *renderer) registerValues() string {
	return r.param(protocol.ParamAction) + ", " + r.param(protocol.ParamRequestHash) + ", " +
		r.param(protocol.ParamHashKeyID) + ", " + r.param(protocol.ParamPayload) + ", " +
		r.param(protocol.ParamRefs) + "::jsonb, nullif(" + r.param(protocol.ParamParentKey) + ", ''), " +
		r.param(protocol.ParamBudgets) + "::jsonb, " + clock + ", " + clock
}

// holdsInsert writes the inserted rows' budget holds (their budgets
// column) one per row into budget_holds, in the insert's statement: a
// row and its holds are written together or not at all.
const holdsInsert = `holds AS (
		INSERT INTO budget_holds (tenant, budget, scope, created_at, operation_key, amount, over_limit)
		SELECT ins.tenant, b.budget, b.scope, ins.created_at, ins.operation_key, b.amount, coalesce(b.over_limit, false)
		FROM ins, jsonb_to_recordset(ins.budgets) AS b(budget text, scope text, amount bigint, over_limit boolean)
		WHERE ins.budgets IS NOT NULL
	)`

// renderInsert renders a Register rule as an INSERT that does nothing when
// the key exists (the primary key is the rule's "absent" guard).
func renderInsert(rule *protocol.Rule) *statement {
	r := newRenderer(false)
	cols, vals := []string{registerColumns}, []string{"$2, $3, " + r.registerValues()}
	for _, s := range rule.Sets {
		cols = append(cols, s.Field.Column())
		vals = append(vals, r.expr(s.Field, s.Expr))
	}
	sql := `WITH ins AS (
		INSERT INTO operations (` + strings.Join(cols, ", ") + `)
		VALUES (` + strings.Join(vals, ", ") + `)
		ON CONFLICT (tenant, operation_key) DO NOTHING
		RETURNING *
	), ev AS (
		` + r.eventInsert(rule, "ins", "NULL") + `
	), ` + holdsInsert + `
	SELECT ` + fullColumns + ` FROM ins`
	return &statement{rule: rule, name: rule.Name(), sql: sql, params: r.params}
}

// renderBatchedInsert renders both Register rules (claimed and not) over
// unnest()ed arrays: each column takes the value of the call's rule
// (in_claim), NULL where that rule sets none. It returns the inserted rows
// and, flagged as existing, the rows of the keys that were there already.
func renderBatchedInsert(claimed, plain *protocol.Rule) *statement {
	r := newRenderer(true)
	claim := r.param(protocol.ParamClaim)
	var fields []protocol.Field
	seen := map[protocol.Field]bool{}
	for _, rule := range []*protocol.Rule{claimed, plain} {
		for _, s := range rule.Sets {
			if !seen[s.Field] {
				seen[s.Field] = true
				fields = append(fields, s.Field)
			}
		}
	}
	value := func(rule *protocol.Rule, f protocol.Field) string {
		for _, s := range rule.Sets {
			if s.Field == f {
				return r.expr(f, s.Expr)
			}
		}
		return "NULL"
	}
	cols := []string{registerColumns}
	vals := []string{"in_tenant, in_key, " + r.registerValues()}
	for _, f := range fields {
		cols = append(cols, f.Column())
		vals = append(vals, "CASE WHEN "+claim+" THEN "+value(claimed, f)+" ELSE "+value(plain, f)+" END")
	}
	body := `ins AS (
		INSERT INTO operations (` + strings.Join(cols, ", ") + `)
		SELECT ` + strings.Join(vals, ", ") + ` FROM i
		ON CONFLICT (tenant, operation_key) DO NOTHING
		RETURNING *
	), ev AS (
		` + r.eventInsert(claimed, "ins JOIN i ON in_tenant = tenant AND in_key = operation_key", "NULL") + `
	), ` + holdsInsert
	sql := `WITH ` + unnest(r.params) + `, ` + body + `
	SELECT false, ` + fullColumns + ` FROM ins
	UNION ALL
	SELECT true, ` + fullColumns + ` FROM operations
	WHERE (tenant, operation_key) IN (SELECT in_tenant, in_key FROM i)`
	return &statement{rule: claimed, name: claimed.Name() + " | " + plain.Case, sql: sql, params: r.params}
}
