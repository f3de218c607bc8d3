package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// A budget caps what an action's operations may add up to within a
// rolling window: a sum of an integer payload member (money in minor
// units) or a count of operations, per scope (always the tenant, plus the
// dimensions per lists). The journal reserves an operation's amount when
// it registers it and gives it back only on a definitive "did not
// happen" (failed_final), so no retry, split or race gets past the limit.

// BudgetPolicy is one budget of an action (an item of budgets), validated.
// It is immutable and safe for concurrent use.
type BudgetPolicy struct {
	// Name identifies the budget (name; [a-z0-9-], unique within the
	// action). Actions that declare a budget of the same name share its
	// counters where their scopes meet; they must then agree on per,
	// window and limit.
	Name string
	// Sum is the top-level payload member added up (sum); "" with Count.
	Sum string `json:",omitempty"`
	// Count: each operation counts as 1 (count: true).
	Count bool `json:",omitempty"`
	// Per lists the scope's dimensions beyond the tenant, normalised and
	// in the order written: BudgetPrincipal, BudgetAction, "payload.NAME"
	// or "refs.NAME". Empty: one budget for the whole tenant.
	Per []string
	// Window is the rolling window over registration times (window).
	Window time.Duration
	// Limit is the most the window may hold, in Sum's unit or a count
	// (limit; at least 1).
	Limit int64
	// OnExceed is what a registration that would pass the limit gets:
	// BudgetExceedReject or BudgetExceedApproval (on_exceed).
	OnExceed string
}

// The budgets' fixed words and bounds.
const (
	// BudgetPrincipal in per scopes a budget to the authenticated caller.
	BudgetPrincipal = "principal"
	// BudgetAction in per scopes a budget to the action type.
	BudgetAction = "action"
	// BudgetExceedReject refuses a registration past the limit.
	BudgetExceedReject = "reject"
	// BudgetExceedApproval holds a registration past the limit for a
	// person's approval.
	BudgetExceedApproval = "approval"

	maxBudgets       = 16
	maxBudgetPer     = 8
	maxBudgetWindow  = 366 * day
	minBudgetWindow  = time.Second
	maxBudgetNameLen = 63
)

var budgetNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// memberNameRE is a payload or refs member a budget may name: the
// characters of a ref name, so that a scope prints plainly.
var memberNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// budgetConfig is one item of budgets as written.
type budgetConfig struct {
	Name     yaml.Node `yaml:"name"`
	Sum      yaml.Node `yaml:"sum"`
	Count    yaml.Node `yaml:"count"`
	Per      yaml.Node `yaml:"per"`
	Window   yaml.Node `yaml:"window"`
	Limit    yaml.Node `yaml:"limit"`
	OnExceed yaml.Node `yaml:"on_exceed"`
}

// budgets validates an action's budgets list; schema is the action's
// payload_schema (nil for none), which a summed member is checked against.
func (p *parser) budgets(n *yaml.Node, path string, schema *PayloadSchema) []*BudgetPolicy {
	if skip(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.add(n, path, "must be a list of budgets (each with name, sum or count: true, per, window, limit and on_exceed), got %s", describe(n))
		return nil
	}
	if len(n.Content) > maxBudgets {
		p.add(n, path, "lists %d budgets; the limit is %d", len(n.Content), maxBudgets)
		return nil
	}
	var out []*BudgetPolicy
	seen := map[string]int{}
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		var c budgetConfig
		ok, allKnown := p.section(item, ipath, "a mapping with name, sum or count, per, window, limit and on_exceed", &c)
		if !ok {
			continue
		}
		b := c.validate(p, item, ipath, schema)
		if b == nil || !allKnown {
			continue
		}
		if first, dup := seen[b.Name]; dup {
			p.add(&c.Name, join(ipath, "name"), "%q is already the name of a budget of this action (line %d)", b.Name, first)
			continue
		}
		seen[b.Name] = c.Name.Line
		out = append(out, b)
	}
	return out
}

// validate converts one budget; it returns nil if any field is wrong
// (each problem reported with its line).
func (c *budgetConfig) validate(p *parser, n *yaml.Node, path string, schema *PayloadSchema) *BudgetPolicy {
	b := &BudgetPolicy{}
	ok := true
	if !set(&c.Name) {
		p.add(n, path, "needs a name ([a-z0-9-], unique within the action)")
		ok = false
	} else if s, good := p.str(&c.Name, join(path, "name")); !good {
		ok = false
	} else if len(s) > maxBudgetNameLen || !budgetNameRE.MatchString(s) {
		p.add(&c.Name, join(path, "name"), "%s is not a budget name: 1-%d characters of a-z, 0-9 and '-', starting with a letter or digit", literal(s), maxBudgetNameLen)
		ok = false
	} else {
		b.Name = s
	}
	ok = c.amount(p, n, path, b, schema) && ok
	ok = c.scope(p, path, b) && ok
	ok = c.bounds(p, n, path, b) && ok
	if !ok {
		return nil
	}
	return b
}

// amount converts sum and count: exactly one, and a summed member must be
// an integer wherever the payload_schema says what it is.
func (c *budgetConfig) amount(p *parser, n *yaml.Node, path string, b *BudgetPolicy, schema *PayloadSchema) bool {
	count, okCount := p.boolean(&c.Count, join(path, "count"))
	if set(&c.Count) && !okCount {
		return false
	}
	switch {
	case set(&c.Sum) && set(&c.Count):
		p.add(&c.Count, join(path, "count"), "is not allowed with sum (a budget adds up a member or counts operations, not both)")
		return false
	case set(&c.Count) && !count:
		p.add(&c.Count, join(path, "count"), "false is not a budget: write count: true, or sum: MEMBER")
		return false
	case set(&c.Count):
		b.Count = true
		return true
	case !set(&c.Sum):
		p.add(n, path, "needs sum (an integer payload member to add up, such as amount_minor) or count: true")
		return false
	}
	s, ok := p.str(&c.Sum, join(path, "sum"))
	if !ok {
		return false
	}
	if !memberNameRE.MatchString(s) || strings.Contains(s, ".") {
		p.add(&c.Sum, join(path, "sum"), "%s is not a top-level payload member name", literal(s))
		return false
	}
	if props, ok := schemaProperties(schema); ok {
		t, listed := props[s]
		switch {
		case !listed:
			p.add(&c.Sum, join(path, "sum"), "%q is not a property of payload_schema (its properties: %s)", s, strings.Join(slices.Sorted(mapsKeys(props)), ", "))
			return false
		case t.String() != "int":
			p.add(&c.Sum, join(path, "sum"), "%q must be an integer in payload_schema (type: integer), so that every amount adds up exactly; it is %s", s, t.String())
			return false
		}
	}
	b.Sum = s
	return true
}

// scope converts per: principal, action, payload members (NAME or
// payload.NAME) and refs members (refs.NAME), each once.
func (c *budgetConfig) scope(p *parser, path string, b *BudgetPolicy) bool {
	if !set(&c.Per) {
		b.Per = []string{}
		return true
	}
	fpath := join(path, "per")
	items, ok := p.stringList(&c.Per, fpath)
	if !ok {
		return false
	}
	if len(items) > maxBudgetPer {
		p.add(&c.Per, fpath, "lists %d dimensions; the limit is %d", len(items), maxBudgetPer)
		return false
	}
	b.Per = []string{}
	for i, s := range items {
		ipath := fmt.Sprintf("%s[%d]", fpath, i)
		dim, problem := budgetDimension(s.Value)
		switch {
		case problem != "":
			p.add(s, ipath, "%s", problem)
			ok = false
		case slices.Contains(b.Per, dim):
			p.add(s, ipath, "%q is listed twice", s.Value)
			ok = false
		default:
			b.Per = append(b.Per, dim)
		}
	}
	return ok
}

// budgetDimension normalises an item of per, or says what is wrong with
// it.
func budgetDimension(s string) (dim, problem string) {
	const want = "a scope dimension is principal, action, a payload member (NAME or payload.NAME) or a refs member (refs.NAME)"
	switch s {
	case BudgetPrincipal, BudgetAction:
		return s, ""
	case "tenant":
		return "", "tenant is always part of a budget's scope; leave it out"
	}
	prefix, name := "payload.", s
	if rest, ok := strings.CutPrefix(s, "refs."); ok {
		prefix, name = "refs.", rest
	} else if rest, ok := strings.CutPrefix(s, "payload."); ok {
		name = rest
	}
	if !memberNameRE.MatchString(name) || prefix == "payload." && strings.Contains(name, ".") {
		return "", fmt.Sprintf("%s is not one: %s", literal(s), want)
	}
	return prefix + name, ""
}

// bounds converts window, limit and on_exceed, all required.
func (c *budgetConfig) bounds(p *parser, n *yaml.Node, path string, b *BudgetPolicy) bool {
	ok := true
	if !set(&c.Window) {
		p.add(n, path, "needs window (a duration such as 24h or 30d)")
		ok = false
	} else if d, good := p.longDuration(&c.Window, join(path, "window"), "a duration such as 24h or 30d"); !good {
		ok = false
	} else if d < minBudgetWindow || d > maxBudgetWindow {
		p.add(&c.Window, join(path, "window"), "%q is outside 1s..%s", c.Window.Value, FormatDuration(maxBudgetWindow))
		ok = false
	} else {
		b.Window = d
	}
	if !set(&c.Limit) {
		p.add(n, path, "needs limit (the most the window may hold, in the summed member's unit or a count)")
		ok = false
	} else if l, good := p.intIn(&c.Limit, join(path, "limit"), 1, math.MaxInt64); !good {
		ok = false
	} else {
		b.Limit = l
	}
	if !set(&c.OnExceed) {
		p.add(n, path, "needs on_exceed (%s or %s)", BudgetExceedReject, BudgetExceedApproval)
		return false
	}
	s, good := p.str(&c.OnExceed, join(path, "on_exceed"))
	switch {
	case !good:
		return false
	case s != BudgetExceedReject && s != BudgetExceedApproval:
		p.add(&c.OnExceed, join(path, "on_exceed"), "%q is not one of %s, %s", s, BudgetExceedReject, BudgetExceedApproval)
		return false
	}
	b.OnExceed = s
	return ok
}

// checkBudgetRetention checks that the action keeps its operations at
// least as long as its longest budget window: an operation's amount counts
// until the window passes it, and a purged operation could no longer be
// counted.
func (c *actionConfig) checkBudgetRetention(p *parser, path string, a *Action, lim actionLimits) {
	if !lim.retentionValid {
		return
	}
	for i, b := range a.Budgets {
		if b.Window > a.Retention {
			at, fpath := &c.Retention, join(path, "retention")
			if !set(at) {
				at, fpath = &c.Budgets, fmt.Sprintf("%s[%d].window", join(path, "budgets"), i)
			}
			p.add(at, fpath, "retention %s is shorter than budget %s's window (%s): an operation counts against a budget until its window passes, so it must be kept that long",
				FormatDuration(a.Retention), b.Name, FormatDuration(b.Window))
			return
		}
	}
}

// checkBudgetRedaction refuses a budget that would store a redacted
// member: its scope's values and its amount are kept in clear with every
// hold (and shown by opjournal budgets), which redact_fields promises no
// redacted value ever is.
func (c *actionConfig) checkBudgetRedaction(p *parser, path string, a *Action) {
	for i, b := range a.Budgets {
		members := []string{b.Sum}
		for _, dim := range b.Per {
			if m, ok := strings.CutPrefix(dim, "payload."); ok {
				members = append(members, m)
			}
		}
		for _, m := range members {
			if m != "" && slices.Contains(a.RedactFields, m) {
				p.add(&c.Budgets, fmt.Sprintf("%s[%d]", join(path, "budgets"), i),
					"budget %s reads payload.%s, which is in redact_fields: a budget keeps its amount and its scope's values in clear with every hold, so a redacted member cannot be one", b.Name, m)
				break
			}
		}
	}
}

// checkSharedBudgets checks that the budgets of one name agree across
// actions on what they share: the scope's dimensions, the window and the
// limit (each action may add up its own member).
func (p *parser) checkSharedBudgets(actions []*Action, nodes map[string]*yaml.Node) {
	first := map[string]*Action{}
	for _, a := range actions {
		for _, b := range a.Budgets {
			f, ok := first[b.Name]
			if !ok {
				first[b.Name] = a
				continue
			}
			fb := f.Budget(b.Name)
			if strings.Join(fb.Per, ",") != strings.Join(b.Per, ",") || fb.Window != b.Window || fb.Limit != b.Limit {
				p.add(nodes[a.Name], join(join("actions", a.Name), "budgets"),
					"budget %q is also declared by action %s with another per, window or limit; budgets of one name share their counters, so they must agree on all three", b.Name, f.Name)
			}
		}
	}
}

// Budget returns the action's budget of that name, or nil.
func (a *Action) Budget(name string) *BudgetPolicy {
	for _, b := range a.Budgets {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// ErrBudgetAmount is the class of errors Amount returns: the payload does
// not carry an amount the budget can add up.
var ErrBudgetAmount = errors.New("budget amount")

// Amount returns what one operation with this canonical payload adds to
// the budget: 1 for a count, else the summed member, which must be a
// whole number from 0 up to the limit's range. The error names the member
// and the budget, never the value.
func (b *BudgetPolicy) Amount(payload json.RawMessage) (int64, error) {
	if b.Count {
		return 1, nil
	}
	raw, found, err := topMember(payload, b.Sum)
	if err != nil {
		return 0, fmt.Errorf("%w: payload: %w", ErrBudgetAmount, err)
	}
	if !found {
		return 0, fmt.Errorf("%w: payload.%s is required by budget %s (an integer to add up)", ErrBudgetAmount, b.Sum, b.Name)
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	// json.Number also takes a string that spells a number: "1200" is
	// text, not an amount.
	if raw[0] == '"' || dec.Decode(&n) != nil {
		return 0, fmt.Errorf("%w: payload.%s must be an integer for budget %s", ErrBudgetAmount, b.Sum, b.Name)
	}
	i, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf("%w: payload.%s must be a whole number within ±9223372036854775807 for budget %s", ErrBudgetAmount, b.Sum, b.Name)
	}
	if i < 0 {
		return 0, fmt.Errorf("%w: payload.%s must not be negative for budget %s (an amount never gives budget back)", ErrBudgetAmount, b.Sum, b.Name)
	}
	return i, nil
}

// Scope returns the budget's scope for one registration beyond the tenant:
// the RFC 8785 canonical JSON of an object from each dimension of Per to
// its value (the principal, the action, a ref's value, a payload member's
// JSON value; a missing or null member is left out, as the request hash
// leaves it out). Registrations with equal scopes share one counter.
func (b *BudgetPolicy) Scope(principal, action string, payload json.RawMessage, refs map[string]string) (string, error) {
	obj := make(map[string]any, len(b.Per))
	for _, dim := range b.Per {
		switch {
		case dim == BudgetPrincipal:
			obj[dim] = principal
		case dim == BudgetAction:
			obj[dim] = action
		case strings.HasPrefix(dim, "refs."):
			if v, ok := refs[strings.TrimPrefix(dim, "refs.")]; ok {
				obj[dim] = v
			}
		default:
			raw, found, err := topMember(payload, strings.TrimPrefix(dim, "payload."))
			if err != nil {
				return "", fmt.Errorf("%w: payload: %w", ErrBudgetAmount, err)
			}
			if found {
				obj[dim] = raw
			}
		}
	}
	text, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	canon, err := canonjson.Canonicalize(text, canonjson.Options{})
	if err != nil {
		return "", err
	}
	return string(canon), nil
}

// topMember returns the raw JSON of payload's top-level member name.
func topMember(payload json.RawMessage, name string) (json.RawMessage, bool, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return nil, false, errors.New("is not a JSON object")
	}
	raw, ok := obj[name]
	if !ok || string(raw) == "null" {
		return nil, false, nil
	}
	return raw, true, nil
}
