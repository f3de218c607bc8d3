package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"go.yaml.in/yaml/v4"

	"github.com/opjournal/opjournal"
)

// The approval block of an action: when a person must approve a request
// before any attempt, who may, and what happens when nobody does. The
// `when` expression is CEL (module cel.dev/cel-go, the continuation of
// github.com/google/cel-go), compiled and type-checked once at load.

// ApprovalPolicy is an action's approval block (approval), validated. It
// is immutable and safe for concurrent use.
type ApprovalPolicy struct {
	// When is the CEL expression over payload (and refs) that makes a
	// request need approval; "" when Required is set.
	When string `json:",omitempty"`
	// Required: every request of the action needs approval.
	Required bool `json:",omitempty"`
	// Approvers are the roles that may decide (operator, admin; the
	// default is both). Agents, reconcilers and scrapers never may.
	Approvers []string
	// DistinctFromRequester says whether the principal who registered an
	// operation may not approve it; nil: not set, which means true with
	// authentication and false without (see DistinctFor).
	DistinctFromRequester *bool `json:",omitempty"`
	// TwoPerson: two distinct principals must approve.
	TwoPerson bool `json:",omitempty"`
	// Timeout is how long a question stays open (default 24h).
	Timeout time.Duration
	// OnTimeout is what happens then: opjournal.ApprovalTimeoutReject (the
	// default) or opjournal.ApprovalTimeoutEscalate.
	OnTimeout string
	// Notify is a webhook URL told about new questions (sent by the
	// notifier, not by the journal's core); "" for none.
	Notify string `json:",omitempty"`

	program cel.Program // When, compiled; nil with Required
}

// The approval block's defaults and limits.
const (
	defaultApprovalTimeout = 24 * time.Hour
	maxApprovalTimeout     = 30 * 24 * time.Hour
	maxWhenLen             = 2000
	// whenCostLimit bounds one evaluation of when (CEL's cost units), so
	// that no expression can make Register slow.
	whenCostLimit = 10000
	// ApprovalRuleRequired is the rule recorded for required: true.
	ApprovalRuleRequired = "required"
)

// approverRoles are the roles that may decide: people's roles.
var approverRoles = []string{"operator", "admin"}

// DistinctFor is distinct_from_requester for a request made with
// (authenticated) or without authentication: as written, or by default
// true with authentication and false without (there is then no verified
// requester to tell apart).
func (a *ApprovalPolicy) DistinctFor(authenticated bool) bool {
	if a.DistinctFromRequester != nil {
		return *a.DistinctFromRequester
	}
	return authenticated
}

// Needed reports whether a request needs approval, and the rule that says
// so (the when expression, or ApprovalRuleRequired). payload is the
// canonical payload (before redaction). It fails safe: an expression that
// cannot be evaluated (a member missing from a payload no schema checks,
// a type the expression did not expect) means the request NEEDS approval,
// and the rule then says why in words that quote no value.
func (a *ApprovalPolicy) Needed(payload json.RawMessage, refs map[string]string) (needed bool, rule string) {
	if a == nil {
		return false, ""
	}
	if a.Required {
		return true, ApprovalRuleRequired
	}
	vars, err := whenVars(payload, refs)
	if err != nil {
		return true, a.When + " (could not be evaluated: the payload could not be read)"
	}
	out, _, err := a.program.Eval(vars)
	if err != nil {
		return true, a.When + " (could not be evaluated: " + evalProblem(err) + ")"
	}
	b, ok := out.Value().(bool)
	if !ok {
		return true, a.When + " (could not be evaluated: not a boolean)"
	}
	if !b {
		return false, ""
	}
	return true, a.When
}

// evalProblem words an evaluation error without the payload's values:
// CEL's messages name members and types ("no such key: amount"), never
// values, but they are cut short and kept to one line all the same.
func evalProblem(err error) string {
	msg := oneLine.Replace(err.Error())
	if len(msg) > 120 {
		msg = msg[:120] + "..."
	}
	return msg
}

// whenVars is the activation of when: the payload as CEL values (whole
// numbers as int, others as double, so that integer members compare as
// integers) and the refs.
func whenVars(payload json.RawMessage, refs map[string]string) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	r := map[string]string{}
	for k, x := range refs {
		r[k] = x
	}
	return map[string]any{"payload": celValue(v), "refs": r}, nil
}

func celValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = celValue(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = celValue(e)
		}
		return x
	}
	return v
}

// whenEnv is the environment when is evaluated in: payload a map of
// anything, refs a map of strings. Numbers of different types compare
// (an integer member with a double literal).
var whenEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("payload", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("refs", cel.MapType(cel.StringType, cel.StringType)),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		panic("policy: CEL environment: " + err.Error())
	}
	return env
}()

// schemaEnv is the environment when is checked in for an action with a
// payload_schema that lists properties: each property is a variable
// "payload.NAME" of the schema's type, and payload itself is not
// declared, so a member the schema does not have, or a comparison of a
// member with a value of another type, fails the load.
func schemaEnv(props map[string]*cel.Type) (*cel.Env, error) {
	opts := []cel.EnvOption{
		cel.Variable("refs", cel.MapType(cel.StringType, cel.StringType)),
		cel.CrossTypeNumericComparisons(true),
	}
	for _, name := range slices.Sorted(mapsKeys(props)) {
		opts = append(opts, cel.Variable("payload."+name, props[name]))
	}
	return cel.NewEnv(opts...)
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// schemaProperties returns the CEL types of the top-level properties of a
// payload schema; ok is false when the schema lists none (then members are
// not checked at load).
func schemaProperties(s *PayloadSchema) (map[string]*cel.Type, bool) {
	if s == nil {
		return nil, false
	}
	var doc struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(s.source, &doc); err != nil || len(doc.Properties) == 0 {
		return nil, false
	}
	out := make(map[string]*cel.Type, len(doc.Properties))
	for name, p := range doc.Properties {
		t, _ := p.Type.(string)
		switch t {
		case "integer":
			out[name] = cel.IntType
		case "number":
			out[name] = cel.DoubleType
		case "string":
			out[name] = cel.StringType
		case "boolean":
			out[name] = cel.BoolType
		case "array":
			out[name] = cel.ListType(cel.DynType)
		case "object":
			out[name] = cel.MapType(cel.StringType, cel.DynType)
		default: // no type, or several
			out[name] = cel.DynType
		}
	}
	return out, true
}

// approvalConfig is an action's approval block as written.
type approvalConfig struct {
	When                  yaml.Node `yaml:"when"`
	Required              yaml.Node `yaml:"required"`
	Approvers             yaml.Node `yaml:"approvers"`
	DistinctFromRequester yaml.Node `yaml:"distinct_from_requester"`
	TwoPerson             yaml.Node `yaml:"two_person"`
	Timeout               yaml.Node `yaml:"timeout"`
	OnTimeout             yaml.Node `yaml:"on_timeout"`
	Notify                yaml.Node `yaml:"notify"`
}

// approval validates an action's approval block; schema is the action's
// payload_schema (nil for none), which when is checked against. The rule
// (when or required) is checked only once every field is valid.
func (p *parser) approval(n *yaml.Node, path string, schema *PayloadSchema) *ApprovalPolicy {
	var c approvalConfig
	ok, allKnown := p.section(n, path, "a mapping with when (or required: true), approvers, timeout and on_timeout", &c)
	if !ok {
		return nil
	}
	a := &ApprovalPolicy{Approvers: slices.Clone(approverRoles), Timeout: defaultApprovalTimeout, OnTimeout: opjournal.ApprovalTimeoutReject}
	decision := c.decision(p, path, a)
	deadline := c.deadline(p, path, a)
	if !allKnown || !decision || !deadline {
		return nil
	}
	return c.rule(p, n, path, a, schema)
}

// valid reports whether the section field n is valid: not written, or
// converted (ok).
func valid(n *yaml.Node, ok bool) bool { return ok || !set(n) }

// decision converts who decides and how into a; it reports whether every
// one of those fields is valid.
func (c *approvalConfig) decision(p *parser, path string, a *ApprovalPolicy) bool {
	var okWhen, okRequired, okDistinct, okTwo bool
	a.When, okWhen = p.str(&c.When, join(path, "when"))
	a.Required, okRequired = p.boolean(&c.Required, join(path, "required"))
	okApprovers := true
	if set(&c.Approvers) {
		a.Approvers, okApprovers = p.approvers(&c.Approvers, join(path, "approvers"))
	}
	if b, ok := p.boolean(&c.DistinctFromRequester, join(path, "distinct_from_requester")); ok {
		a.DistinctFromRequester, okDistinct = &b, true
	}
	a.TwoPerson, okTwo = p.boolean(&c.TwoPerson, join(path, "two_person"))
	return valid(&c.When, okWhen) && valid(&c.Required, okRequired) && okApprovers &&
		valid(&c.DistinctFromRequester, okDistinct) && valid(&c.TwoPerson, okTwo)
}

// approvers validates the approvers list: people's roles, each once, at
// least one.
func (p *parser) approvers(n *yaml.Node, path string) ([]string, bool) {
	items, ok := p.stringList(n, path)
	if !ok {
		return nil, false
	}
	var out []string
	for i, s := range items {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case !slices.Contains(approverRoles, s.Value):
			p.add(s, ipath, "%s may not decide: approvers are people's roles, %s (agents, reconcilers and metrics never approve)", literal(s.Value), strings.Join(approverRoles, ", "))
			ok = false
		case slices.Contains(out, s.Value):
			p.add(s, ipath, "%q is listed twice", s.Value)
			ok = false
		default:
			out = append(out, s.Value)
		}
	}
	if len(items) == 0 {
		p.add(n, path, "must name at least one role (operator, admin)")
		ok = false
	}
	return out, ok
}

// deadline converts how long a question stays open, what happens then
// and whom to tell into a; it reports whether every one of those fields
// is valid.
func (c *approvalConfig) deadline(p *parser, path string, a *ApprovalPolicy) bool {
	okTimeout := true
	if d, ok := p.longDuration(&c.Timeout, join(path, "timeout"), "a duration such as 24h or 2d"); ok {
		if d < time.Second || d > maxApprovalTimeout {
			p.add(&c.Timeout, join(path, "timeout"), "%q is outside 1s..%s", c.Timeout.Value, FormatDuration(maxApprovalTimeout))
			okTimeout = false
		} else {
			a.Timeout = d
		}
	} else if set(&c.Timeout) {
		okTimeout = false
	}
	okOnTimeout := !set(&c.OnTimeout)
	if s, ok := p.str(&c.OnTimeout, join(path, "on_timeout")); ok {
		switch s {
		case opjournal.ApprovalTimeoutReject, opjournal.ApprovalTimeoutEscalate:
			a.OnTimeout, okOnTimeout = s, true
		default:
			p.add(&c.OnTimeout, join(path, "on_timeout"), "%q is not one of %s, %s", s, opjournal.ApprovalTimeoutReject, opjournal.ApprovalTimeoutEscalate)
		}
	}
	okNotify := !set(&c.Notify)
	if s, ok := p.str(&c.Notify, join(path, "notify")); ok && p.notifyURL(&c.Notify, join(path, "notify"), s) {
		a.Notify, okNotify = s, true
	}
	return okTimeout && okOnTimeout && okNotify
}

// rule checks that the block has exactly one of when and required: true,
// and compiles when; n is the block's mapping.
func (c *approvalConfig) rule(p *parser, n *yaml.Node, path string, a *ApprovalPolicy, schema *PayloadSchema) *ApprovalPolicy {
	switch {
	case a.Required && set(&c.When):
		p.add(&c.When, join(path, "when"), "is not allowed with required: true (one or the other)")
		return nil
	case !a.Required && !set(&c.When):
		at := n
		if set(&c.Required) {
			at = &c.Required
		}
		p.add(at, path, "needs when (a CEL expression over payload) or required: true")
		return nil
	case a.Required:
		return a
	}
	prg, problem := compileWhen(a.When, schema)
	if problem != "" {
		p.add(&c.When, join(path, "when"), "%s", problem)
		return nil
	}
	a.program = prg
	return a
}

// compileWhen compiles a when expression: it must be a boolean CEL
// expression over payload and refs and, for an action whose schema lists
// properties, read only those, with their types. problem says what is
// wrong ("" when nothing is).
func compileWhen(when string, schema *PayloadSchema) (cel.Program, string) {
	if strings.TrimSpace(when) == "" {
		return nil, "must not be empty"
	}
	if len(when) > maxWhenLen {
		return nil, fmt.Sprintf("is %d bytes; the limit is %d", len(when), maxWhenLen)
	}
	if props, ok := schemaProperties(schema); ok {
		env, err := schemaEnv(props)
		if err != nil {
			return nil, "cannot be checked against payload_schema: " + err.Error()
		}
		ast, iss := env.Compile(when)
		if iss != nil && iss.Err() != nil {
			return nil, "does not fit payload_schema (its properties: " + strings.Join(slices.Sorted(mapsKeys(props)), ", ") + "): " + celIssues(iss)
		}
		if !ast.OutputType().IsExactType(cel.BoolType) {
			return nil, "must be a boolean expression, is " + ast.OutputType().String()
		}
	}
	ast, iss := whenEnv.Compile(when)
	if iss != nil && iss.Err() != nil {
		return nil, "is not a valid CEL expression over payload and refs: " + celIssues(iss)
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, "must be a boolean expression, is " + t.String()
	}
	prg, err := whenEnv.Program(ast, cel.CostLimit(whenCostLimit))
	if err != nil {
		return nil, "cannot be evaluated: " + err.Error()
	}
	return prg, ""
}

// celIssues is CEL's report in one line: each error with its column in
// the expression.
func celIssues(iss *cel.Issues) string {
	var parts []string
	for _, e := range iss.Errors() {
		msg := e.Message
		if strings.HasPrefix(msg, "undeclared reference to 'payload'") {
			msg = "reads a member of payload that payload_schema does not list"
		}
		parts = append(parts, fmt.Sprintf("column %d: %s", e.Location.Column()+1, msg))
	}
	if len(parts) == 0 {
		return oneLine.Replace(iss.Err().Error())
	}
	return strings.Join(parts, "; ")
}

// notifyURL checks an approval webhook: an absolute http(s) URL without
// credentials in it (a secret belongs in the notifier's configuration,
// not in a policy file anybody may read through GetPolicy).
func (p *parser) notifyURL(n *yaml.Node, path, s string) bool {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		p.add(n, path, "must be an absolute http(s) URL, got %s", literal(s))
		return false
	case u.User != nil:
		p.add(n, path, "must not carry credentials (user:password@): the policy is readable through GetPolicy")
		return false
	}
	return true
}

// BudgetApproval is how a person is asked when one of the action's
// budgets with on_exceed: approval would be passed: the action's approval
// block (its approvers, two_person, timeout and on_timeout), or without
// one the defaults (operator or admin, 24h, then rejected).
func (a *Action) BudgetApproval() *ApprovalPolicy {
	if a.Approval != nil {
		return a.Approval
	}
	return &ApprovalPolicy{Approvers: slices.Clone(approverRoles), Timeout: defaultApprovalTimeout, OnTimeout: opjournal.ApprovalTimeoutReject}
}
