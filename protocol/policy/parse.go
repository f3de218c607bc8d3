package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"
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
// was expected. It checks a section's keys before section decodes them,
// and walks the mappings whose keys the file chooses (actions, headers).
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

// A section of the policy file (an action, its retry block, its gateway's
// http route, ...) is declared as a struct whose fields are yaml.Node
// values tagged with their keys, in the order error messages list them,
// and decoded by go-yaml. Its validate method then converts each field,
// naming the field's line. The fields are nodes rather than Go values
// because go-yaml never calls a custom yaml.Unmarshaler for a null value:
// only a yaml.Node field keeps "lease_seconds:" (null, which must be
// refused with its line) apart from a field that was not written (the zero
// Node, see set).

// set reports whether the section field n was written in the file.
func set(n *yaml.Node) bool { return n.Kind != 0 }

// skip reports whether the value n has nothing to check: it was not
// written, or it is an alias (already reported by checkNoAnchors).
func skip(n *yaml.Node) bool { return n.Kind == 0 || n.Kind == yaml.AliasNode }

// refuser is a section with keys that are refused for a reason of their
// own rather than as unknown fields.
type refuser interface {
	// refused says why key is refused, "" if it is merely unknown.
	refused(key string) string
}

// section decodes the mapping n into dst, a pointer to a section struct,
// strictly: a key that is not one of dst's fields is reported, naming the
// known fields, and so are the keys fields rejects. ok is false if n is
// not a mapping (reported with want, unless n is an alias or was not
// written); allKnown is false if some key was not one of dst's fields.
func (p *parser) section(n *yaml.Node, path, want string, dst any) (ok, allKnown bool) {
	if n.Kind == 0 {
		return false, true
	}
	known := knownFields(reflect.TypeOf(dst).Elem())
	clean := *n // the mapping without the keys reported here
	clean.Content = nil
	allKnown = true
	ok = p.fields(n, path, want, func(key string, k, v *yaml.Node) {
		if !slices.Contains(known, key) {
			p.unknownField(k, path, known, dst)
			allKnown = false
			return
		}
		clean.Content = append(clean.Content, k, v)
	})
	if !ok {
		return false, allKnown
	}
	// Every field is a yaml.Node, which takes any value: the library has
	// nothing left to refuse, but its strictness stays on.
	if err := clean.Load(dst, yaml.WithKnownFields()); err != nil {
		p.add(n, path, "cannot be decoded: %v", err)
	}
	return true, allKnown
}

// knownFields returns the keys of the section struct t, from its yaml
// tags, in declaration order.
func knownFields(t reflect.Type) []string {
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// unknownField reports key k of the section at path as unknown (or as
// refused, if the section says why).
func (p *parser) unknownField(k *yaml.Node, path string, known []string, section any) {
	if r, ok := section.(refuser); ok {
		if why := r.refused(k.Value); why != "" {
			p.add(k, join(path, k.Value), "%s", why)
			return
		}
	}
	p.add(k, join(path, k.Value), "unknown field (known fields: %s)", strings.Join(known, ", "))
}

// intIn returns the integer value of n if it is within lo..hi, and
// reports it otherwise.
func (p *parser) intIn(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	i, ok := p.integer(n, path)
	if ok && (i < lo || i > hi) {
		p.add(n, path, "%d is out of range %d..%d", i, lo, hi)
		return 0, false
	}
	return i, ok
}

// longDuration parses a Go duration ("24h") or whole days ("7d").
func (p *parser) longDuration(n *yaml.Node, path, want string) (time.Duration, bool) {
	if skip(n) {
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

// stringList returns the items of the sequence n if it is a sequence of
// strings; otherwise it reports the problems and returns ok == false.
func (p *parser) stringList(n *yaml.Node, path string) (items []*yaml.Node, ok bool) {
	if skip(n) {
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
	if skip(n) {
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
	if skip(n) {
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
	if skip(n) {
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
	if skip(n) {
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
