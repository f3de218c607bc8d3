package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"

	"github.com/opjournal/opjournal"
)

// actionNameRE is the syntax of an action name.
var actionNameRE = regexp.MustCompile(`^[a-z][a-z0-9_.:-]{0,79}$`)

// Known fields, in the order they are listed in error messages.
var (
	topFields    = []string{"actions"}
	actionFields = []string{
		"operation_key", "lease_seconds", "retry", "terminal_states",
		"unknown_after_seconds", "on_unresolved", "retention", "integer_fields", "redact_fields",
		"reconcile", "max_attempt_seconds", "payload_schema", "refs", "gateway", "provider_link", "approval",
	}
	retryFields = []string{"reuse_operation_key", "on_timeout", "provider_dedup_window"}
	refsFields  = []string{"required", "forbidden"}
)

// Parse parses and validates a policy document; source names it in errors
// (usually a file path).
//
// Parsing is strict: unknown fields, wrong types, duplicate keys, invalid
// values, a missing or empty actions map, an action name that is not 1–80
// characters of [a-z0-9_.:-] starting with a letter, YAML anchors, aliases
// and merge keys, more than one YAML document, an empty document and input
// larger than 1 MiB are errors. On failure Parse returns nil and an error
// listing every problem found, one per line in line order, each starting
// with "SOURCE:LINE: " and naming the field path, e.g.
//
//	policy.yaml:7: actions.create_payment.retry.on_timeout: "retry_maybe" is not one of reconcile_before_retry, retry_same_key
func Parse(data []byte, source string) (*Policy, error) {
	p := &parser{source: source, dir: filepath.Dir(source)}
	if len(data) > maxPolicyBytes {
		p.addLine(1, 0, "", "policy file is larger than 1 MiB (%d bytes read); policy files are small, so this is probably the wrong file", len(data))
		return nil, p.err()
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.addLine(1, 0, "", "policy file is empty; it must define actions")
		} else {
			p.addYAMLError(err, data)
		}
		return nil, p.err()
	}
	// A policy file holds exactly one document. Look for a second one
	// before validating, so that all problems are reported together.
	var extra yaml.Node
	switch err := decode(dec, &extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.addYAMLError(err, data)
	default:
		p.addLine(extra.Line, extra.Column, "", "a policy file must contain exactly one YAML document, but another document starts here")
	}

	p.checkNoAnchors(&doc, "")
	actions := p.document(&doc)
	if len(p.problems) > 0 {
		return nil, p.err()
	}
	pol := &Policy{actions: make(map[string]*Action, len(actions)), source: bytes.Clone(data)}
	for _, a := range actions {
		pol.actions[a.Name] = a
		pol.names = append(pol.names, a.Name)
	}
	slices.Sort(pol.names)
	return pol, nil
}

// decode decodes the next document from dec into n. go-yaml reports its own
// failures as errors, but a bug in it could still panic; a policy file must
// not be able to crash the server, so such a panic becomes an error.
func decode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: internal error in the YAML parser: %v", r)
		}
	}()
	return dec.Decode(n)
}

// problem is one thing wrong with a policy document.
type problem struct {
	line, col int
	path      string // field path, "" if none applies
	msg       string
}

func (e *problem) String() string {
	if e.path == "" {
		return fmt.Sprintf("%d: %s", e.line, e.msg)
	}
	return fmt.Sprintf("%d: %s: %s", e.line, e.path, e.msg)
}

// lineError is one problem, rendered with its source.
type lineError struct {
	source string
	p      problem
}

func (e *lineError) Error() string { return e.source + ":" + e.p.String() }

// parser collects the problems found while validating one document.
type parser struct {
	source   string
	dir      string // relative schema files are found here
	problems []problem
}

func (p *parser) addLine(line, col int, path, format string, args ...any) {
	if line < 1 {
		line = 1
	}
	msg := oneLine.Replace(fmt.Sprintf(format, args...))
	p.problems = append(p.problems, problem{line: line, col: col, path: oneLine.Replace(path), msg: msg})
}

// oneLine escapes line breaks, so that every problem is one line of the
// error. Values from the document are quoted where they are formatted;
// this is a backstop for text that is not (such as go-yaml's messages).
var oneLine = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\u0085", `\u0085`, "\u2028", `\u2028`, "\u2029", `\u2029`)

// add records a problem at node n.
func (p *parser) add(n *yaml.Node, path, format string, args ...any) {
	p.addLine(n.Line, n.Column, path, format, args...)
}

// addYAMLError records a YAML library error at the position the library
// gives for it (yaml.LoadError's Mark, 1-based), with the library's own
// description: no message text is parsed. A problem at the end of the
// input can be placed one past the last line; it is moved to the last line.
func (p *parser) addYAMLError(err error, data []byte) {
	var le *yaml.LoadError
	if !errors.As(err, &le) {
		p.addLine(1, 0, "", "invalid YAML: %s", err.Error())
		return
	}
	msg := le.Message
	if le.ContextMsg != "" {
		msg = le.ContextMsg + ": " + msg // "while parsing a block mapping: did not find expected key"
	}
	p.addLine(min(max(le.Mark.Line, 1), countLines(data)), le.Mark.Column, "", "invalid YAML: %s", msg)
}

// countLines returns the number of lines in data as YAML counts them: line
// breaks are CRLF, CR, LF, NEL, LS and PS, and a last line without a break
// counts.
func countLines(data []byte) int {
	lines := 0
	lineHasText := false
	for i := 0; i < len(data); {
		switch {
		case data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n':
			i += 2
		case data[i] == '\r' || data[i] == '\n':
			i++
		case bytes.HasPrefix(data[i:], []byte("\u0085")),
			bytes.HasPrefix(data[i:], []byte("\u2028")),
			bytes.HasPrefix(data[i:], []byte("\u2029")):
			_, size := utf8.DecodeRune(data[i:])
			i += size
		default:
			i++
			lineHasText = true
			continue
		}
		lines++
		lineHasText = false
	}
	if lineHasText {
		lines++
	}
	return lines
}

// err returns all problems, sorted by position, as one error (nil if none).
func (p *parser) err() error {
	if len(p.problems) == 0 {
		return nil
	}
	slices.SortStableFunc(p.problems, func(a, b problem) int {
		return cmp.Or(cmp.Compare(a.line, b.line), cmp.Compare(a.col, b.col))
	})
	errs := make([]error, len(p.problems))
	for i := range p.problems {
		errs[i] = &lineError{source: p.source, p: p.problems[i]}
	}
	return errors.Join(errs...)
}

// checkNoAnchors reports every anchor and alias in the tree under n.
// Aliases would let a small file describe a huge tree (a "billion laughs")
// and make it hard to see which value a field really has; a policy file
// is short enough to spell out.
func (p *parser) checkNoAnchors(n *yaml.Node, path string) {
	if n.Anchor != "" {
		p.add(n, path, "YAML anchors (&%s) are not allowed in a policy file; write each value out", literal(n.Anchor))
	}
	switch n.Kind {
	case yaml.AliasNode:
		p.add(n, path, "YAML aliases (*%s) are not allowed in a policy file; write each value out", literal(n.Value))
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := path
			if k.Kind == yaml.ScalarNode {
				kp = join(path, k.Value)
			}
			p.checkNoAnchors(k, kp)
			p.checkNoAnchors(v, kp)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p.checkNoAnchors(c, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.DocumentNode:
		for _, c := range n.Content {
			p.checkNoAnchors(c, path)
		}
	}
}

// join appends a mapping key to a field path. Keys that are not made of
// the characters allowed in action names (plus upper case, so that a
// misspelt name reads naturally) are quoted: actions["create payment"].
func join(path, key string) string {
	if !plainKeyRE.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

var plainKeyRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// describe says what kind of value n is, for "got ..." in messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		switch tag := n.ShortTag(); tag {
		case "!!str":
			return "string " + strconv.Quote(v)
		case "!!int":
			return "integer " + literal(v)
		case "!!float":
			return "number " + literal(v)
		case "!!bool":
			return "boolean " + literal(v)
		case "!!null":
			return "null"
		default:
			return fmt.Sprintf("value %s tagged %s", strconv.Quote(v), literal(tag))
		}
	}
	return "an unknown kind of node"
}

// literal returns s as is if it is short printable ASCII without spaces,
// and quoted otherwise, so that text copied from the document cannot
// break an error message across lines or make it ambiguous.
func literal(s string) string {
	if s == "" || len(s) > 80 {
		return strconv.Quote(s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == '"' || s[i] == '\\' {
			return strconv.Quote(s)
		}
	}
	return s
}

// fields calls fn for each key/value pair of the mapping n, in order. It
// reports keys that are not plain strings, merge keys and duplicate keys,
// and skips them. A non-mapping n is reported with want describing what
// was expected.
func (p *parser) fields(n *yaml.Node, path, want string, fn func(key string, k, v *yaml.Node)) bool {
	if n.Kind == yaml.AliasNode {
		return false // already reported by checkNoAnchors
	}
	if n.Kind != yaml.MappingNode {
		p.add(n, path, "must be %s, got %s", want, describe(n))
		return false
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind == yaml.AliasNode:
			continue // already reported
		case k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge":
			p.add(k, path, "merge keys (<<) are not allowed in a policy file; write each field out")
			continue
		case k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str":
			p.add(k, path, "keys must be strings, got %s", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.add(k, join(path, k.Value), "duplicate key (first defined at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		fn(k.Value, k, v)
	}
	return true
}

// unknownField reports key k of the mapping at path as unknown.
func (p *parser) unknownField(k *yaml.Node, path string, known []string) {
	p.add(k, join(path, k.Value), "unknown field (known fields: %s)", strings.Join(known, ", "))
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
	var actions []*Action
	var actionsNode *yaml.Node
	ok := p.fields(root, "", "a mapping with an actions field", func(key string, k, v *yaml.Node) {
		switch key {
		case "actions":
			actionsNode = k
			actions = p.actions(v)
		default:
			p.unknownField(k, "", topFields)
		}
	})
	if ok && actionsNode == nil {
		p.add(root, "actions", "missing: a policy file must define at least one action under actions")
	}
	return actions
}

// actions validates the actions mapping.
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
		if a := p.action(v, apath, name); a != nil {
			a.Name = name
			out = append(out, a)
			nodes[name] = k
		}
	})
	p.checkGatewayRoutes(out, nodes)
	return out
}

// action validates one action's policy and fills in defaults.
func (p *parser) action(n *yaml.Node, path, name string) *Action {
	a := &Action{
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
	// The nodes of the two fields compared with each other, if present and
	// individually valid.
	var unknownAfterNode, retentionNode, maxAttemptNode, reconcileNode, retryNode, refsNode, approvalNode *yaml.Node
	unknownAfterValid, retentionValid := true, true
	maxAttempt := int64(0)

	ok := p.fields(n, path, "a mapping of policy fields (use {} to accept every default)", func(key string, k, v *yaml.Node) {
		fpath := join(path, key)
		switch key {
		case "operation_key":
			if s, ok := p.str(v, fpath); ok && s != operationKeyRequired {
				p.add(v, fpath, "%q is not allowed: the only accepted value is %s (the operation key is what lets the journal recognise a retry as the same operation)", s, operationKeyRequired)
			}
		case "lease_seconds":
			if i, ok := p.integer(v, fpath); ok {
				if i < minLeaseSeconds || i > maxLeaseSeconds {
					p.add(v, fpath, "%d is out of range %d..%d", i, minLeaseSeconds, maxLeaseSeconds)
				} else {
					a.LeaseSeconds = int(i)
				}
			}
		case "retry":
			retryNode = v
			p.retry(v, fpath, a)
		case "terminal_states":
			p.terminalStates(v, fpath)
		case "unknown_after_seconds":
			unknownAfterNode = v
			unknownAfterValid = false
			if i, ok := p.integer(v, fpath); ok {
				if i < 1 || i > maxUnknownAfterSeconds {
					p.add(v, fpath, "%d is out of range 1..%d", i, maxUnknownAfterSeconds)
				} else {
					a.UnknownAfter = time.Duration(i) * time.Second
					unknownAfterValid = true
				}
			}
		case "on_unresolved":
			if s, ok := p.str(v, fpath); ok && s != requireHumanReview {
				p.add(v, fpath, "%q is not allowed: the only accepted value is %s (an operation whose outcome cannot be determined is never retried or dropped silently)", s, requireHumanReview)
			}
		case "retention":
			retentionNode = v
			retentionValid = false
			if d, ok := p.retention(v, fpath); ok {
				a.Retention = d
				retentionValid = true
			}
		case "integer_fields":
			a.IntegerFields = p.integerFields(v, fpath)
		case "redact_fields":
			a.RedactFields = p.integerFields(v, fpath) // the same rules: unique, non-empty names
		case "reconcile":
			reconcileNode = v
			p.reconcile(v, fpath, &a.Reconcile)
		case "payload_schema":
			a.PayloadSchema = p.payloadSchema(v, fpath, name)
		case "refs":
			refsNode = v
			p.refs(v, fpath, &a.Refs)
		case "gateway":
			a.Gateway = p.gateway(v, fpath)
		case "approval":
			approvalNode = v // checked after the loop, against payload_schema wherever it is written
		case "provider_link":
			if tmpl, ok := p.str(v, fpath); ok && p.providerLink(v, fpath, tmpl) {
				a.ProviderLink = tmpl
			}
		case "max_attempt_seconds":
			maxAttemptNode = v
			if i, ok := p.integer(v, fpath); ok {
				if i < 1 || i > maxMaxAttemptSeconds {
					p.add(v, fpath, "%d is out of range 1..%d", i, maxMaxAttemptSeconds)
				} else {
					maxAttempt = i
				}
			}
		default:
			p.unknownField(k, path, actionFields)
		}
	})
	if !ok {
		return nil
	}
	if approvalNode != nil {
		a.Approval = p.approval(approvalNode, join(path, "approval"), a.PayloadSchema)
	}
	a.MaxAttempt = time.Duration(defaultMaxAttemptLeases*a.LeaseSeconds) * time.Second
	if maxAttempt > 0 {
		a.MaxAttempt = time.Duration(maxAttempt) * time.Second
		if maxAttempt < int64(a.LeaseSeconds) {
			p.add(maxAttemptNode, join(path, "max_attempt_seconds"), "%d is shorter than lease_seconds (%d): an attempt holds at least one lease", maxAttempt, a.LeaseSeconds)
		}
	}
	if rc := a.Reconcile; rc.DefinitiveAbsence && rc.InFlightWindow <= 0 && reconcileNode != nil {
		// Proving absence releases the operation for a retry that calls
		// the provider again. A provider that received the first request
		// may still carry it out after our attempt ended (we gave up
		// waiting; it did not), so "not found" proves nothing until that
		// window has passed too. Without it the numbers cannot be safe.
		p.add(reconcileNode, join(path, "reconcile.in_flight_window"),
			"is required with definitive_absence: true: how long the provider may still carry out a request after the attempt ended (its own processing timeout, e.g. 60s); a release before that can make a second effect")
	}
	if w := a.ProviderDedupWindow; w > 0 {
		if a.OnTimeout != RetrySameKey {
			p.add(retryNode, join(path, "retry.provider_dedup_window"),
				"is only for on_timeout: retry_same_key (a reconcile_before_retry action never retries blindly, whatever the provider remembers)")
		}
		if retentionValid && a.Retention < w {
			at, fpath := retentionNode, join(path, "retention")
			if at == nil {
				at, fpath = retryNode, join(path, "retry.provider_dedup_window")
			}
			p.add(at, fpath, "retention %s is shorter than retry.provider_dedup_window (%s): keep an operation's records at least as long as the provider remembers its key",
				FormatDuration(a.Retention), FormatDuration(w))
		}
	}
	for _, r := range a.Refs.Required {
		if slices.Contains(a.RedactFields, r) {
			p.add(refsNode, join(path, "refs.required"), "%q is also in redact_fields: a ref is stored in clear and searchable, so a redacted member cannot be one", r)
		}
	}
	if unknownAfterValid && retentionValid && a.Retention < a.UnknownAfter {
		// Blame the field that was written down; if both were, blame
		// retention.
		at, fpath := retentionNode, join(path, "retention")
		if at == nil {
			at, fpath = unknownAfterNode, join(path, "unknown_after_seconds")
		}
		p.add(at, fpath, "retention %s is shorter than unknown_after_seconds (%s): records must be kept at least until an operation's outcome can be declared unknown and reconciled",
			FormatDuration(a.Retention), FormatDuration(a.UnknownAfter))
	}
	return a
}

// retry validates the retry mapping into a.
func (p *parser) retry(n *yaml.Node, path string, a *Action) {
	p.fields(n, path, "a mapping with reuse_operation_key and on_timeout", func(key string, k, v *yaml.Node) {
		fpath := join(path, key)
		switch key {
		case "reuse_operation_key":
			if b, ok := p.boolean(v, fpath); ok && !b {
				p.add(v, fpath, "false is not allowed: the journal exists so that every retry of an operation reuses its operation key; "+
					"a fresh key per retry would let a timed-out side effect (a payment, an email) happen twice")
			}
		case "provider_dedup_window":
			if d, ok := p.longDuration(v, fpath, "a duration such as 24h or 7d"); ok {
				if d <= 0 {
					p.add(v, fpath, "must be positive (leave it out if the provider never forgets a key)")
				} else {
					a.ProviderDedupWindow = d
				}
			}
		case "on_timeout":
			if s, ok := p.str(v, fpath); ok {
				switch OnTimeout(s) {
				case ReconcileBeforeRetry, RetrySameKey:
					a.OnTimeout = OnTimeout(s)
				default:
					p.add(v, fpath, "%q is not one of %s, %s", s, ReconcileBeforeRetry, RetrySameKey)
				}
			}
		default:
			p.unknownField(k, path, retryFields)
		}
	})
}

// refs validates the refs mapping into rp.
func (p *parser) refs(n *yaml.Node, path string, rp *RefsPolicy) {
	seen := map[string]string{}
	p.fields(n, path, "a mapping with required and forbidden", func(key string, k, v *yaml.Node) {
		fpath := join(path, key)
		var dst *[]string
		switch key {
		case "required":
			dst = &rp.Required
		case "forbidden":
			dst = &rp.Forbidden
		default:
			p.unknownField(k, path, refsFields)
			return
		}
		items, ok := p.stringList(v, fpath)
		if !ok {
			return
		}
		for i, s := range items {
			ipath := fmt.Sprintf("%s[%d]", fpath, i)
			switch {
			case !opjournal.ValidRefName(s.Value):
				p.add(s, ipath, "%s is not a ref name: 1-%d characters of a-z, 0-9, '_', '.' and '-', starting with a letter or digit", literal(s.Value), opjournal.MaxRefNameLen)
			case seen[s.Value] != "":
				p.add(s, ipath, "%q is already listed under refs.%s", s.Value, seen[s.Value])
			default:
				seen[s.Value] = key
				*dst = append(*dst, s.Value)
			}
		}
	})
}

// longDuration parses a Go duration ("24h") or whole days ("7d").
func (p *parser) longDuration(n *yaml.Node, path, want string) (time.Duration, bool) {
	if n.Kind == yaml.AliasNode {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.add(n, path, "must be %s, got %s", want, describe(n))
		return 0, false
	}
	d, err := parseRetention(n.Value)
	if err != nil {
		p.add(n, path, "%q %v", n.Value, err)
		return 0, false
	}
	return d, true
}

// terminalStates checks that n lists exactly the fixed terminal states.
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

// stringList returns the items of the sequence n if it is a sequence of
// strings; otherwise it reports the problems and returns ok == false.
func (p *parser) stringList(n *yaml.Node, path string) (items []*yaml.Node, ok bool) {
	if n.Kind == yaml.AliasNode {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		p.add(n, path, "must be a list of strings, got %s", describe(n))
		return nil, false
	}
	ok = true
	for i, c := range n.Content {
		if _, good := p.str(c, fmt.Sprintf("%s[%d]", path, i)); !good {
			ok = false
		}
	}
	return n.Content, ok
}

// str returns the string value of n, or reports that it is not a string.
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind == yaml.AliasNode {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.add(n, path, "must be a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// integer returns the integer value of n, or reports that it is not one.
func (p *parser) integer(n *yaml.Node, path string) (int64, bool) {
	if n.Kind == yaml.AliasNode {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.add(n, path, "must be an integer, got %s", describe(n))
		return 0, false
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		p.add(n, path, "must be an integer, got %s", strconv.Quote(n.Value))
		return 0, false
	}
	return i, true
}

// boolean returns the boolean value of n, or reports that it is not one.
func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind == yaml.AliasNode {
		return false, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		p.add(n, path, "must be true or false, got %s", describe(n))
		return false, false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		p.add(n, path, "must be true or false, got %s", strconv.Quote(n.Value))
		return false, false
	}
	return b, true
}

// retention parses a retention period: a Go duration ("720h") or a whole
// number of days ("30d"), at least minRetention.
func (p *parser) retention(n *yaml.Node, path string) (time.Duration, bool) {
	if n.Kind == yaml.AliasNode {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.add(n, path, "must be a duration such as 720h or 30d, got %s", describe(n))
		return 0, false
	}
	d, err := parseRetention(n.Value)
	if err != nil {
		p.add(n, path, "%q %v", n.Value, err)
		return 0, false
	}
	if d < minRetention {
		p.add(n, path, "%q is shorter than the minimum of %s", n.Value, FormatDuration(minRetention))
		return 0, false
	}
	return d, true
}

var daysRE = regexp.MustCompile(`^[0-9]+d$`)

const day = 24 * time.Hour

func parseRetention(s string) (time.Duration, error) {
	if daysRE.MatchString(s) {
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if err != nil || n > int64(1<<63-1)/int64(day) {
			return 0, errors.New("is too long")
		}
		return time.Duration(n) * day, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("is not a duration: write a Go duration such as 720h or a whole number of days such as 30d")
	}
	return d, nil
}

// FormatDuration formats d without trailing zero units ("720h", not
// "720h0m0s").
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
