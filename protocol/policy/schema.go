package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.yaml.in/yaml/v4"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// english prints the library's messages about a bad schema.
var english = message.NewPrinter(language.English)

// PayloadSchema is the JSON Schema (draft 2020-12) an action's payload must
// match (payload_schema), compiled once when the policy is loaded. Agents
// produce tool arguments from a model; the schema stops a malformed call
// before anything is stored or sent. It is immutable and safe for
// concurrent use.
type PayloadSchema struct {
	source json.RawMessage // the schema document as JSON (the policy's fingerprint covers it)
	schema *jsonschema.Schema
}

// MarshalJSON returns the schema document, so that a policy's fingerprint
// and diff cover it.
func (s *PayloadSchema) MarshalJSON() ([]byte, error) { return s.source, nil }

// Source returns the schema document as JSON.
func (s *PayloadSchema) Source() json.RawMessage { return bytes.Clone(s.source) }

// Violation is one way a payload fails its schema: where (a JSON pointer
// into the payload, "" for the payload itself) and what is wrong. Message
// never quotes a value of the payload (it may be a card number); it says
// what the schema wants.
type Violation struct {
	Pointer string
	Message string
}

// maxViolations bounds the violations Validate reports.
const maxViolations = 5

// Validate checks a payload (JSON text of an object) against the schema
// and returns its violations, nil if it matches: at most five, the
// shallowest and then the first in pointer order.
func (s *PayloadSchema) Validate(payload []byte) []Violation {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return []Violation{{Message: "is not valid JSON"}}
	}
	err = s.schema.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Violation{{Message: "cannot be checked against the schema"}}
	}
	var out []Violation
	collectViolations(ve, &out)
	slices.SortFunc(out, func(a, b Violation) int {
		if d := strings.Count(a.Pointer, "/") - strings.Count(b.Pointer, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.Pointer, b.Pointer)
	})
	out = slices.CompactFunc(out, func(a, b Violation) bool { return a == b })
	if len(out) > maxViolations {
		out = out[:maxViolations]
	}
	return out
}

// collectViolations gathers the leaves of a validation error tree: the
// causes are where the payload really differs from the schema.
func collectViolations(ve *jsonschema.ValidationError, out *[]Violation) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectViolations(c, out)
		}
		return
	}
	ptr := pointer(ve.InstanceLocation)
	if req, ok := ve.ErrorKind.(*kind.Required); ok {
		for _, m := range req.Missing {
			*out = append(*out, Violation{Pointer: ptr + "/" + escapePointer(m), Message: "is required"})
		}
		return
	}
	*out = append(*out, Violation{Pointer: ptr, Message: describeKind(ve.ErrorKind)})
}

// describeKind says what the schema wants, in words that quote the schema
// but never the payload: the library's own messages quote the value for
// some keywords (pattern, format, minimum), and a payload value may be a
// secret.
func describeKind(k jsonschema.ErrorKind) string {
	num := func(r interface{ FloatString(int) string }) string {
		return strings.TrimRight(strings.TrimRight(r.FloatString(6), "0"), ".")
	}
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be %s, not %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		return fmt.Sprintf("must be one of %s", compactJSON(k.Want))
	case *kind.Const:
		return fmt.Sprintf("must be %s", compactJSON(k.Want))
	case *kind.Format:
		return fmt.Sprintf("is not a valid %s", k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("does not match the pattern %s", strconv.Quote(k.Want))
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.Minimum:
		return "must be ≥ " + num(k.Want)
	case *kind.Maximum:
		return "must be ≤ " + num(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + num(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + num(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + num(k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d members", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d members", k.Want)
	case *kind.AdditionalProperties:
		names := make([]string, len(k.Properties))
		for i, p := range k.Properties {
			names[i] = strconv.Quote(p)
		}
		return "has members the schema does not allow: " + strings.Join(names, ", ")
	case *kind.UniqueItems:
		return fmt.Sprintf("must not repeat items (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "is not allowed here"
	case *kind.OneOf:
		return "must match exactly one of the schema's oneOf alternatives"
	case *kind.DependentRequired:
		return fmt.Sprintf("needs %q too", k.Missing)
	}
	if p := k.KeywordPath(); len(p) > 0 {
		return fmt.Sprintf("fails the schema's %s", strings.Join(p, "/"))
	}
	return "does not match the schema"
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "the schema's values"
	}
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}

// pointer renders an instance location as a JSON pointer (RFC 6901).
func pointer(loc []string) string {
	var b strings.Builder
	for _, t := range loc {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

func escapePointer(t string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(t)
}

// schemaBase is the made-up URL schemas are compiled under; references
// resolve within the document only (noLoader).
const schemaBase = "https://opjournal.invalid/policy/"

// noLoader refuses every external reference: a policy's schema must be
// self-contained ($defs), so loading a policy never reads the network or
// other files.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("references to other documents are not supported (%s); put shared definitions under $defs", strings.TrimPrefix(u, schemaBase))
}

// maxSchemaBytes bounds a schema file.
const maxSchemaBytes = 1 << 20

// payloadSchema parses the payload_schema field: an inline mapping, or the
// path of a JSON (or YAML) file, relative to the policy file's folder.
func (p *parser) payloadSchema(n *yaml.Node, path, action string) *PayloadSchema {
	switch {
	case n.Kind == yaml.MappingNode:
		return p.compileSchema(n, n, path, action, "")
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && n.Value != "":
		file := n.Value
		if !filepath.IsAbs(file) {
			file = filepath.Join(p.dir, file)
		}
		data, err := readLimited(file, maxSchemaBytes)
		if err != nil {
			p.add(n, path, "cannot read the schema file: %v", err)
			return nil
		}
		var doc yaml.Node
		if err := decode(yaml.NewDecoder(bytes.NewReader(data)), &doc); err != nil || len(doc.Content) != 1 {
			p.add(n, path, "%s is not a JSON (or YAML) document", literal(n.Value))
			return nil
		}
		return p.compileSchema(n, doc.Content[0], path, action, n.Value)
	}
	p.add(n, path, "must be a JSON Schema (a mapping) or the path of a file holding one, got %s", describe(n))
	return nil
}

func readLimited(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

// compileSchema compiles the schema document root (the field's node at,
// or a file's root, named file). Problems are reported at the line of
// the schema's offending part: in the policy for an inline schema, as
// "FILE:LINE" within the message for a file.
func (p *parser) compileSchema(at, root *yaml.Node, path, action, file string) *PayloadSchema {
	report := func(ptr, format string, args ...any) {
		n := nodeAt(root, ptr)
		msg := fmt.Sprintf(format, args...)
		if file != "" {
			p.add(at, path, "%s:%d: %s", literal(file), n.Line, msg)
			return
		}
		p.add(n, path+ptr, "%s", msg)
	}
	p.checkNoAnchors(root, path)
	if k := nonStringKey(root); k != nil {
		if file != "" {
			p.add(at, path, "%s:%d: keys of a JSON Schema must be strings, got %s", literal(file), k.Line, describe(k))
		} else {
			p.add(k, path, "keys of a JSON Schema must be strings, got %s", describe(k))
		}
		return nil
	}
	var doc any
	if err := root.Decode(&doc); err != nil {
		report("", "is not a JSON Schema: %v", err)
		return nil
	}
	src, err := json.Marshal(jsonValue(doc))
	if err != nil {
		report("", "is not a JSON Schema: it must be JSON (string keys, no YAML-only values): %v", err)
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		report("", "is not a JSON Schema: %v", err)
		return nil
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // format: email and friends are checked, not only annotations
	c.UseLoader(noLoader{})
	loc := schemaBase + url.PathEscape(action) + ".json"
	if err := c.AddResource(loc, v); err != nil {
		report("", "is not a JSON Schema: %s", strings.ReplaceAll(err.Error(), loc, ""))
		return nil
	}
	sch, err := c.Compile(loc)
	if err != nil {
		ptr, msg := explainCompileError(err, loc)
		report(ptr, "is not a valid JSON Schema (draft 2020-12): %s", msg)
		return nil
	}
	return &PayloadSchema{source: src, schema: sch}
}

// nonStringKey returns the first mapping key below n that is not a string.
func nonStringKey(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				return k
			}
		}
	}
	for _, c := range n.Content {
		if k := nonStringKey(c); k != nil {
			return k
		}
	}
	return nil
}

// jsonValue turns what YAML decoded into JSON values.
func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonValue(e)
		}
	case []any:
		for i, e := range x {
			x[i] = jsonValue(e)
		}
	}
	return v
}

// explainCompileError finds where in the schema a compile error is (a
// JSON pointer) and describes it without the made-up base URL.
func explainCompileError(err error, loc string) (ptr, msg string) {
	clean := func(s string) string {
		return strings.ReplaceAll(strings.ReplaceAll(s, loc+"#", "#"), loc, "the schema")
	}
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			var leaves []*jsonschema.ValidationError
			var walk func(*jsonschema.ValidationError)
			walk = func(v *jsonschema.ValidationError) {
				if len(v.Causes) == 0 {
					leaves = append(leaves, v)
				}
				for _, c := range v.Causes {
					walk(c)
				}
			}
			walk(ve)
			if len(leaves) > 0 {
				l := leaves[0]
				// The schema's own values may be quoted: they are no secret.
				return pointer(l.InstanceLocation), l.ErrorKind.LocalizedString(english)
			}
		}
		return "", clean(sve.Err.Error())
	}
	// Other compile errors carry the offending place as a URL with a
	// fragment (InvalidRegexError.URL = ".../x.json#/properties/id/pattern").
	rv := reflect.ValueOf(err)
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		rv = rv.Elem()
	}
	if rv.Kind() == reflect.Struct {
		if f := rv.FieldByName("URL"); f.IsValid() && f.Kind() == reflect.String {
			if _, frag, ok := strings.Cut(f.String(), "#"); ok {
				if p, err := url.PathUnescape(frag); err == nil {
					ptr = p
				}
			}
		}
	}
	return ptr, clean(err.Error())
}

// nodeAt finds the YAML node at a JSON pointer below root (the deepest
// one that exists).
func nodeAt(root *yaml.Node, ptr string) *yaml.Node {
	n := root
	if ptr == "" {
		return n
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		next := (*yaml.Node)(nil)
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					next = n.Content[i+1]
					break
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			return n
		}
		n = next
	}
	return n
}
