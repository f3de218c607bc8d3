package policy

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/opjournal/opjournal"
)

// actionNameRE is the syntax of an action name.
var actionNameRE = regexp.MustCompile(`^[a-z][a-z0-9_.:-]{0,79}$`)

// policyFile is the top level of a policy file.
type policyFile struct {
	Actions yaml.Node `yaml:"actions"`
}

// document validates the whole document and returns its actions in the
// order they appear. The result is meaningful only if no problem was
// recorded.
func (p *parser) document(doc *yaml.Node) []*Action {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		p.add(doc, "", "policy file is not a single YAML document")
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		p.add(root, "", "policy file is empty; it must define actions")
		return nil
	}
	var f policyFile
	if ok, _ := p.section(root, "", "a mapping with an actions field", &f); !ok {
		return nil
	}
	if !set(&f.Actions) {
		p.add(root, "actions", "missing: a policy file must define at least one action under actions")
		return nil
	}
	return p.actions(&f.Actions)
}

// actions validates the actions mapping: action names are keys of the
// file's choosing, so it is walked rather than decoded into a struct.
func (p *parser) actions(n *yaml.Node) []*Action {
	const path = "actions"
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" || n.Kind == yaml.MappingNode && len(n.Content) == 0 {
		p.add(n, path, "must define at least one action; the server refuses every action type the policy does not define")
		return nil
	}
	var out []*Action
	nodes := map[string]*yaml.Node{}
	p.fields(n, path, "a mapping from action name to action policy", func(name string, k, v *yaml.Node) {
		apath := join(path, name)
		if !actionNameRE.MatchString(name) {
			p.add(k, apath, "invalid action name: it must be 1-80 characters of a-z, 0-9, '_', '.', ':' and '-', starting with a lowercase letter")
		}
		var c actionConfig
		if ok, _ := p.section(v, apath, "a mapping of policy fields (use {} to accept every default)", &c); ok {
			a := c.validate(p, apath, name)
			out = append(out, a)
			nodes[name] = k
		}
	})
	p.checkGatewayRoutes(out, nodes)
	p.checkSharedBudgets(out, nodes)
	return out
}

// actionConfig is one action's policy as written (actions.NAME).
type actionConfig struct {
	OperationKey        yaml.Node `yaml:"operation_key"`
	LeaseSeconds        yaml.Node `yaml:"lease_seconds"`
	Retry               yaml.Node `yaml:"retry"`
	TerminalStates      yaml.Node `yaml:"terminal_states"`
	UnknownAfterSeconds yaml.Node `yaml:"unknown_after_seconds"`
	OnUnresolved        yaml.Node `yaml:"on_unresolved"`
	Retention           yaml.Node `yaml:"retention"`
	IntegerFields       yaml.Node `yaml:"integer_fields"`
	RedactFields        yaml.Node `yaml:"redact_fields"`
	Reconcile           yaml.Node `yaml:"reconcile"`
	MaxAttemptSeconds   yaml.Node `yaml:"max_attempt_seconds"`
	PayloadSchema       yaml.Node `yaml:"payload_schema"`
	Refs                yaml.Node `yaml:"refs"`
	Gateway             yaml.Node `yaml:"gateway"`
	ProviderLink        yaml.Node `yaml:"provider_link"`
	Approval            yaml.Node `yaml:"approval"`
	Budgets             yaml.Node `yaml:"budgets"`
}

// actionLimits is what the checks across an action's fields need to know
// of its numeric fields: whether unknown_after_seconds and retention are
// usable (valid, or defaulted), and max_attempt_seconds (0: not written).
type actionLimits struct {
	unknownAfterValid, retentionValid bool
	maxAttempt                        int64
}

// validate returns the action's policy with every default filled in. The
// result is meaningful only if no problem was recorded.
func (c *actionConfig) validate(p *parser, path, name string) *Action {
	a := &Action{
		Name:              name,
		LeaseSeconds:      defaultLeaseSeconds,
		ReuseOperationKey: true,
		OnTimeout:         ReconcileBeforeRetry,
		UnknownAfter:      defaultUnknownAfter,
		OnUnresolved:      requireHumanReview,
		Retention:         defaultRetention,
		IntegerFields:     []string{},
		RedactFields:      []string{},
		Reconcile:         defaultReconcile(),
	}
	c.checkFixed(p, path)
	lim := c.limits(p, path, a)
	if set(&c.IntegerFields) {
		a.IntegerFields = p.integerFields(&c.IntegerFields, join(path, "integer_fields"))
	}
	if set(&c.RedactFields) {
		a.RedactFields = p.integerFields(&c.RedactFields, join(path, "redact_fields")) // the same rules: unique, non-empty names
	}
	c.sections(p, path, a)
	c.checkAttempt(p, path, a, lim.maxAttempt)
	c.checkRetention(p, path, a, lim)
	c.checkBudgetRetention(p, path, a, lim)
	c.checkBudgetRedaction(p, path, a)
	return a
}

// checkFixed checks the fields whose only accepted value is the
// journal's own rule.
func (c *actionConfig) checkFixed(p *parser, path string) {
	if s, ok := p.str(&c.OperationKey, join(path, "operation_key")); ok && s != operationKeyRequired {
		p.add(&c.OperationKey, join(path, "operation_key"), "%q is not allowed: the only accepted value is %s (the operation key is what lets the journal recognise a retry as the same operation)", s, operationKeyRequired)
	}
	p.terminalStates(&c.TerminalStates, join(path, "terminal_states"))
	if s, ok := p.str(&c.OnUnresolved, join(path, "on_unresolved")); ok && s != requireHumanReview {
		p.add(&c.OnUnresolved, join(path, "on_unresolved"), "%q is not allowed: the only accepted value is %s (an operation whose outcome cannot be determined is never retried or dropped silently)", s, requireHumanReview)
	}
}

// limits converts the numeric fields into a.
func (c *actionConfig) limits(p *parser, path string, a *Action) actionLimits {
	lim := actionLimits{unknownAfterValid: !set(&c.UnknownAfterSeconds), retentionValid: !set(&c.Retention)}
	if i, ok := p.intIn(&c.LeaseSeconds, join(path, "lease_seconds"), minLeaseSeconds, maxLeaseSeconds); ok {
		a.LeaseSeconds = int(i)
	}
	if i, ok := p.intIn(&c.UnknownAfterSeconds, join(path, "unknown_after_seconds"), 1, maxUnknownAfterSeconds); ok {
		a.UnknownAfter = time.Duration(i) * time.Second
		lim.unknownAfterValid = true
	}
	if d, ok := p.retention(&c.Retention, join(path, "retention")); ok {
		a.Retention = d
		lim.retentionValid = true
	}
	if i, ok := p.intIn(&c.MaxAttemptSeconds, join(path, "max_attempt_seconds"), 1, maxMaxAttemptSeconds); ok {
		lim.maxAttempt = i
	}
	return lim
}

// sections validates the action's blocks into a. approval and budgets
// come after payload_schema, wherever each is written: when and a summed
// member are checked against the schema.
func (c *actionConfig) sections(p *parser, path string, a *Action) {
	p.retry(&c.Retry, join(path, "retry"), a)
	p.reconcile(&c.Reconcile, join(path, "reconcile"), &a.Reconcile)
	if set(&c.PayloadSchema) {
		a.PayloadSchema = p.payloadSchema(&c.PayloadSchema, join(path, "payload_schema"), a.Name)
	}
	p.refs(&c.Refs, join(path, "refs"), &a.Refs)
	if set(&c.Gateway) {
		a.Gateway = p.gateway(&c.Gateway, join(path, "gateway"))
	}
	if tmpl, ok := p.str(&c.ProviderLink, join(path, "provider_link")); ok && p.providerLink(&c.ProviderLink, join(path, "provider_link"), tmpl) {
		a.ProviderLink = tmpl
	}
	if set(&c.Approval) {
		a.Approval = p.approval(&c.Approval, join(path, "approval"), a.PayloadSchema)
	}
	a.Budgets = p.budgets(&c.Budgets, join(path, "budgets"), a.PayloadSchema)
}

// checkAttempt sets a.MaxAttempt and checks what depends on how long an
// attempt may last.
func (c *actionConfig) checkAttempt(p *parser, path string, a *Action, maxAttempt int64) {
	a.MaxAttempt = time.Duration(defaultMaxAttemptLeases*a.LeaseSeconds) * time.Second
	if maxAttempt > 0 {
		a.MaxAttempt = time.Duration(maxAttempt) * time.Second
		if maxAttempt < int64(a.LeaseSeconds) {
			p.add(&c.MaxAttemptSeconds, join(path, "max_attempt_seconds"), "%d is shorter than lease_seconds (%d): an attempt holds at least one lease", maxAttempt, a.LeaseSeconds)
		}
	}
	if rc := a.Reconcile; rc.DefinitiveAbsence && rc.InFlightWindow <= 0 && set(&c.Reconcile) {
		// Proving absence releases the operation for a retry that calls
		// the provider again. A provider that received the first request
		// may still carry it out after our attempt ended (we gave up
		// waiting; it did not), so "not found" proves nothing until that
		// window has passed too. Without it the numbers cannot be safe.
		p.add(&c.Reconcile, join(path, "reconcile.in_flight_window"),
			"is required with definitive_absence: true: how long the provider may still carry out a request after the attempt ended (its own processing timeout, e.g. 60s); a release before that can make a second effect")
	}
	for _, r := range a.Refs.Required {
		if slices.Contains(a.RedactFields, r) {
			p.add(&c.Refs, join(path, "refs.required"), "%q is also in redact_fields: a ref is stored in clear and searchable, so a redacted member cannot be one", r)
		}
	}
}

// checkRetention checks that records are kept as long as the other
// fields need them.
func (c *actionConfig) checkRetention(p *parser, path string, a *Action, lim actionLimits) {
	if w := a.ProviderDedupWindow; w > 0 {
		if a.OnTimeout != RetrySameKey {
			p.add(&c.Retry, join(path, "retry.provider_dedup_window"),
				"is only for on_timeout: retry_same_key (a reconcile_before_retry action never retries blindly, whatever the provider remembers)")
		}
		if lim.retentionValid && a.Retention < w {
			at, fpath := &c.Retention, join(path, "retention")
			if !set(at) {
				at, fpath = &c.Retry, join(path, "retry.provider_dedup_window")
			}
			p.add(at, fpath, "retention %s is shorter than retry.provider_dedup_window (%s): keep an operation's records at least as long as the provider remembers its key",
				FormatDuration(a.Retention), FormatDuration(w))
		}
	}
	if lim.unknownAfterValid && lim.retentionValid && a.Retention < a.UnknownAfter {
		// Blame the field that was written down; if both were, blame
		// retention.
		at, fpath := &c.Retention, join(path, "retention")
		if !set(at) {
			at, fpath = &c.UnknownAfterSeconds, join(path, "unknown_after_seconds")
		}
		p.add(at, fpath, "retention %s is shorter than unknown_after_seconds (%s): records must be kept at least until an operation's outcome can be declared unknown and reconciled",
			FormatDuration(a.Retention), FormatDuration(a.UnknownAfter))
	}
}

// retryConfig is an action's retry block as written.
type retryConfig struct {
	ReuseOperationKey   yaml.Node `yaml:"reuse_operation_key"`
	OnTimeout           yaml.Node `yaml:"on_timeout"`
	ProviderDedupWindow yaml.Node `yaml:"provider_dedup_window"`
}

// retry validates the retry block n (if written) into a.
func (p *parser) retry(n *yaml.Node, path string, a *Action) {
	var c retryConfig
	if ok, _ := p.section(n, path, "a mapping with reuse_operation_key and on_timeout", &c); ok {
		c.validate(p, path, a)
	}
}

// validate converts the retry block into a.
func (c *retryConfig) validate(p *parser, path string, a *Action) {
	if b, ok := p.boolean(&c.ReuseOperationKey, join(path, "reuse_operation_key")); ok && !b {
		p.add(&c.ReuseOperationKey, join(path, "reuse_operation_key"), "false is not allowed: the journal exists so that every retry of an operation reuses its operation key; "+
			"a fresh key per retry would let a timed-out side effect (a payment, an email) happen twice")
	}
	if d, ok := p.longDuration(&c.ProviderDedupWindow, join(path, "provider_dedup_window"), "a duration such as 24h or 7d"); ok {
		if d <= 0 {
			p.add(&c.ProviderDedupWindow, join(path, "provider_dedup_window"), "must be positive (leave it out if the provider never forgets a key)")
		} else {
			a.ProviderDedupWindow = d
		}
	}
	if s, ok := p.str(&c.OnTimeout, join(path, "on_timeout")); ok {
		switch OnTimeout(s) {
		case ReconcileBeforeRetry, RetrySameKey:
			a.OnTimeout = OnTimeout(s)
		default:
			p.add(&c.OnTimeout, join(path, "on_timeout"), "%q is not one of %s, %s", s, ReconcileBeforeRetry, RetrySameKey)
		}
	}
}

// refsConfig is an action's refs block as written.
type refsConfig struct {
	Required  yaml.Node `yaml:"required"`
	Forbidden yaml.Node `yaml:"forbidden"`
}

// refs validates the refs block n (if written) into rp.
func (p *parser) refs(n *yaml.Node, path string, rp *RefsPolicy) {
	var c refsConfig
	if ok, _ := p.section(n, path, "a mapping with required and forbidden", &c); ok {
		c.validate(p, path, rp)
	}
}

// validate converts the refs block into rp. A name listed under both
// lists is reported where it is written second.
func (c *refsConfig) validate(p *parser, path string, rp *RefsPolicy) {
	type list struct {
		key string
		n   *yaml.Node
		dst *[]string
	}
	lists := []list{{"required", &c.Required, &rp.Required}, {"forbidden", &c.Forbidden, &rp.Forbidden}}
	slices.SortStableFunc(lists, func(a, b list) int {
		return cmp.Or(cmp.Compare(a.n.Line, b.n.Line), cmp.Compare(a.n.Column, b.n.Column))
	})
	seen := map[string]string{}
	for _, l := range lists {
		fpath := join(path, l.key)
		items, ok := p.stringList(l.n, fpath)
		if !ok {
			continue
		}
		for i, s := range items {
			ipath := fmt.Sprintf("%s[%d]", fpath, i)
			switch {
			case !opjournal.ValidRefName(s.Value):
				p.add(s, ipath, "%s is not a ref name: 1-%d characters of a-z, 0-9, '_', '.' and '-', starting with a letter or digit", literal(s.Value), opjournal.MaxRefNameLen)
			case seen[s.Value] != "":
				p.add(s, ipath, "%q is already listed under refs.%s", s.Value, seen[s.Value])
			default:
				seen[s.Value] = l.key
				*l.dst = append(*l.dst, s.Value)
			}
		}
	}
}

// terminalStates checks that n (if written) lists exactly the fixed
// terminal states.
func (p *parser) terminalStates(n *yaml.Node, path string) {
	const fixed = "the terminal states are fixed by the journal's state machine: terminal_states must list exactly succeeded and failed_final, in any order"
	items, ok := p.stringList(n, path)
	if !ok {
		return
	}
	seen := map[string]bool{}
	for i, s := range items {
		switch {
		case s.Value != stateSucceeded && s.Value != stateFailedFinal:
			p.add(s, fmt.Sprintf("%s[%d]", path, i), "%q is not a terminal state; %s", s.Value, fixed)
			return
		case seen[s.Value]:
			p.add(s, fmt.Sprintf("%s[%d]", path, i), "%q is listed twice; %s", s.Value, fixed)
			return
		}
		seen[s.Value] = true
	}
	if len(seen) != 2 {
		p.add(n, path, "%s", fixed)
	}
}

// integerFields validates the integer_fields list.
func (p *parser) integerFields(n *yaml.Node, path string) []string {
	items, ok := p.stringList(n, path)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(items))
	seen := map[string]int{}
	for i, s := range items {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if s.Value == "" {
			p.add(s, ipath, "must not be empty")
			continue
		}
		if first, dup := seen[s.Value]; dup {
			p.add(s, ipath, "%q is listed twice (first at line %d)", s.Value, first)
			continue
		}
		seen[s.Value] = s.Line
		out = append(out, s.Value)
	}
	return out
}
