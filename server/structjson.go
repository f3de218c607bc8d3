package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// This file converts between JSON text and google.protobuf.Struct without
// protojson. protojson goes through protoreflect for every value and
// recurses once per nesting level (several Go frames each), which made
// operationPB one of the largest CPU costs of a response and grew goroutine
// stacks on every RPC. The converters here walk jsontext tokens and build
// or read structpb messages directly. Tests hold them to protojson's
// results (structjson_test.go).

// storedJSONMaxDepth bounds the nesting structFromJSON accepts. Everything
// the journal stores passed canonjson, so it nests at most
// canonjson.MaxDepth levels; the headroom keeps rows written under a larger
// limit readable should MaxDepth ever be lowered, while still refusing
// (instead of building) an absurd tree from a corrupt row.
const storedJSONMaxDepth = 2 * canonjson.MaxDepth

// errNoKind mirrors protojson's refusal of a Value whose kind is unset (a
// nil *Value included): such a value has no JSON form.
var errNoKind = errors.New("google.protobuf.Value: none of the oneof fields is set")

// The value types below allocate a Value together with its oneof wrapper
// (and, for containers, the Struct or ListValue it points to) in one
// object: building a Struct is dominated by allocation, and this makes one
// allocation per JSON value instead of two or three. Only interior
// pointers are handed out, so the Go collector keeps the whole object alive
// for as long as the Value is reachable; nothing is copied, so the
// messages' no-copy rule holds.

type numberValue struct {
	v structpb.Value
	k structpb.Value_NumberValue
}

type stringValue struct {
	v structpb.Value
	k structpb.Value_StringValue
}

type boolValue struct {
	v structpb.Value
	k structpb.Value_BoolValue
}

type nullValue struct {
	v structpb.Value
	k structpb.Value_NullValue
}

type structValue struct {
	v structpb.Value
	k structpb.Value_StructValue
	s structpb.Struct
}

type listValue struct {
	v structpb.Value
	k structpb.Value_ListValue
	l structpb.ListValue
}

// decodeFrame is one open container on structDecoder's explicit stack:
// exactly one of st and list is set. A list's elements collect on
// structDecoder.elems from index start until the list closes.
type decodeFrame struct {
	st    *structpb.Struct
	list  *structpb.ListValue
	start int
}

// structDecoder holds what one structFromJSON call needs, pooled so that
// the jsontext decoder's state (its token and name stacks) and the frame
// stack are reused rather than allocated per response.
type structDecoder struct {
	src     bytes.Buffer // aliases the input: jsontext parses a *bytes.Buffer in place, without copying
	dec     jsontext.Decoder
	stack   []decodeFrame
	unquote []byte // scratch for strings with escapes

	// elems holds the elements of the open lists, innermost last. A list
	// gets its Values slice, of exactly the right size, when it closes,
	// instead of growing one by appending (an allocation per doubling).
	elems []*structpb.Value

	// names interns member names across calls: the same few names
	// ("amount_minor", "currency", "sku"...) recur in every operation of
	// an action and in every element of a list, and a map key has to be a
	// string of its own, so without this each occurrence costs an
	// allocation. Strings are immutable, so sharing them between
	// responses is safe.
	names map[string]string
}

// Bounds of structDecoder.names: an operation with unusual member names
// (ids used as keys, say) must not grow a pooled decoder without limit.
const (
	maxInternedNames   = 512
	maxInternedNameLen = 64
)

// maxPooledScratch is the largest scratch buffer a pooled decoder or
// encoder keeps; a rare larger one is left to the collector.
const maxPooledScratch = 256 << 10

var structDecoders = sync.Pool{New: func() any { return new(structDecoder) }}

// structFromJSON decodes JSON text holding exactly one object into a
// Struct, as protojson.Unmarshal does, without reflection or recursion.
// Numbers become float64 by strconv.ParseFloat, as in protojson (so a
// number out of float64 range is an error, and one below its precision
// becomes 0); the grammar, escapes and UTF-8 are checked by jsontext with
// its defaults, which refuse what protojson refuses, and a duplicate member
// name is refused here, as protojson refuses it.
// Malformed input, or nesting deeper than storedJSONMaxDepth, is an error.
// raw is only read.
func structFromJSON(raw []byte) (*structpb.Struct, error) {
	d := structDecoders.Get().(*structDecoder)
	st, err := d.decode(raw)
	// Drop the references to raw and to the tree before pooling, so a
	// pooled decoder pins neither.
	d.src = bytes.Buffer{}
	d.dec.Reset(&d.src)
	clear(d.stack)
	d.stack = d.stack[:0]
	clear(d.elems)
	d.elems = d.elems[:0]
	if cap(d.unquote) > maxPooledScratch {
		d.unquote = nil // one huge escaped string must not stay pooled
	}
	if cap(d.elems) > maxPooledScratch/8 {
		d.elems = nil
	}
	structDecoders.Put(d)
	return st, err
}

// decode is structFromJSON on a decoder taken from the pool. It walks the
// tokens in a loop, keeping the open containers on d.stack instead of the
// goroutine stack.
func (d *structDecoder) decode(raw []byte) (*structpb.Struct, error) {
	d.src = *bytes.NewBuffer(raw)
	// Duplicate names are caught below, by the map they go into, at no
	// cost; jsontext's own check would keep a second set of the names.
	d.dec.Reset(&d.src, jsontext.AllowDuplicateNames(true))
	dec := &d.dec

	if k := dec.PeekKind(); k != '{' {
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("want a JSON object, got %v", k)
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, err
	}
	root := &structpb.Struct{Fields: make(map[string]*structpb.Value)}
	// d.stack keeps its grown storage for the next call.
	d.stack = append(d.stack[:0], decodeFrame{st: root})

	for len(d.stack) > 0 {
		top := d.stack[len(d.stack)-1]
		var name string
		if top.st != nil {
			if dec.PeekKind() == '}' {
				if _, err := dec.ReadToken(); err != nil {
					return nil, err
				}
				d.stack = d.stack[:len(d.stack)-1]
				continue
			}
			// Inside an object jsontext accepts only a string here.
			raw, err := dec.ReadValue()
			if err != nil {
				return nil, err
			}
			b, err := d.unquoted(raw)
			if err != nil {
				return nil, err
			}
			name = d.intern(b)
		} else if dec.PeekKind() == ']' {
			if _, err := dec.ReadToken(); err != nil {
				return nil, err
			}
			if elems := d.elems[top.start:]; len(elems) > 0 {
				top.list.Values = append([]*structpb.Value(nil), elems...)
				clear(elems) // the scratch must not pin the tree
				d.elems = d.elems[:top.start]
			}
			d.stack = d.stack[:len(d.stack)-1]
			continue
		}

		v, child, err := d.readValue()
		if err != nil {
			return nil, err
		}
		if top.st != nil {
			n := len(top.st.Fields)
			top.st.Fields[name] = v
			if len(top.st.Fields) == n {
				return nil, fmt.Errorf("duplicate member name %q at %s", name, dec.StackPointer())
			}
		} else {
			d.elems = append(d.elems, v)
		}
		if child.st != nil || child.list != nil {
			child.start = len(d.elems)
			if len(d.stack) >= storedJSONMaxDepth {
				return nil, fmt.Errorf("nesting exceeds %d levels at %s", storedJSONMaxDepth, dec.StackPointer())
			}
			d.stack = append(d.stack, child)
		}
	}

	// Exactly one value, as protojson requires.
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("unexpected data after the JSON object, at byte offset %d", dec.InputOffset())
		}
		return nil, err
	}
	return root, nil
}

// readValue reads the next value. For an object or array it reads only the
// opening token and returns, besides the Value, the frame its members or
// elements are to be read into.
func (d *structDecoder) readValue() (*structpb.Value, decodeFrame, error) {
	dec := &d.dec
	switch kind := dec.PeekKind(); kind {
	case '{':
		if _, err := dec.ReadToken(); err != nil {
			return nil, decodeFrame{}, err
		}
		sv := &structValue{}
		sv.s.Fields = make(map[string]*structpb.Value)
		sv.k.StructValue = &sv.s
		sv.v.Kind = &sv.k
		return &sv.v, decodeFrame{st: &sv.s}, nil
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return nil, decodeFrame{}, err
		}
		lv := &listValue{}
		lv.k.ListValue = &lv.l
		lv.v.Kind = &lv.k
		return &lv.v, decodeFrame{list: &lv.l}, nil
	case '"':
		raw, err := dec.ReadValue()
		if err != nil {
			return nil, decodeFrame{}, err
		}
		b, err := d.unquoted(raw)
		if err != nil {
			return nil, decodeFrame{}, err
		}
		sv := &stringValue{}
		sv.k.StringValue = string(b)
		sv.v.Kind = &sv.k
		return &sv.v, decodeFrame{}, nil
	case '0':
		// ReadValue hands out the number's text without allocating; the
		// grammar is already checked, so ParseFloat fails only on range.
		num, err := dec.ReadValue()
		if err != nil {
			return nil, decodeFrame{}, err
		}
		f, err := strconv.ParseFloat(string(num), 64)
		if err != nil {
			return nil, decodeFrame{}, err
		}
		nv := &numberValue{}
		nv.k.NumberValue = f
		nv.v.Kind = &nv.k
		return &nv.v, decodeFrame{}, nil
	case 't', 'f':
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, decodeFrame{}, err
		}
		bv := &boolValue{}
		bv.k.BoolValue = tok.Kind() == 't'
		bv.v.Kind = &bv.k
		return &bv.v, decodeFrame{}, nil
	case 'n':
		if _, err := dec.ReadToken(); err != nil {
			return nil, decodeFrame{}, err
		}
		nv := &nullValue{}
		nv.v.Kind = &nv.k
		return &nv.v, decodeFrame{}, nil
	default:
		// An invalid kind carries the decoder's error, which ReadToken
		// reports. Anything else (a closing delimiter where a value must
		// be) is refused here rather than trusted.
		if _, err := dec.ReadToken(); err != nil {
			return nil, decodeFrame{}, err
		}
		return nil, decodeFrame{}, fmt.Errorf("unexpected %v where a value must be", kind)
	}
}

// unquoted returns the text of the JSON string raw (as read, so already
// checked by jsontext). The result aliases raw or scratch space and is
// valid until the next read.
func (d *structDecoder) unquoted(raw jsontext.Value) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, fmt.Errorf("want a JSON string, got %.20q", raw)
	}
	if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 {
		return body, nil // no escapes: the text is the string
	}
	var err error
	d.unquote, err = jsontext.AppendUnquote(d.unquote[:0], raw)
	return d.unquote, err
}

// intern returns b as a string, shared with earlier calls that met the
// same name.
func (d *structDecoder) intern(b []byte) string {
	if s, ok := d.names[string(b)]; ok { // the conversion does not allocate
		return s
	}
	s := string(b)
	if len(b) <= maxInternedNameLen {
		if d.names == nil || len(d.names) >= maxInternedNames {
			d.names = make(map[string]string)
		}
		d.names[s] = s
	}
	return s
}

// structEncoder holds what one structJSON call needs, pooled so that the
// jsontext encoder's state and the output buffer are reused.
type structEncoder struct {
	buf bytes.Buffer
	enc jsontext.Encoder
}

var structEncoders = sync.Pool{New: func() any { return new(structEncoder) }}

// valueProblem is a value structJSON refuses (what badValue reports). The
// path is collected while the recursion unwinds, innermost segment first,
// so nothing is spent on paths unless a value is refused.
type valueProblem struct {
	rev []string // path segments below the field, innermost first
	msg string
}

// renderError is a value with no JSON form that badValue does not look
// for: a Value with no kind, or a string or name that is not UTF-8. It is
// reported only if badValue finds nothing, as before.
type renderError struct{ err error }

func (e *renderError) Error() string { return e.err.Error() }

// Unwrap returns the underlying cause.
func (e *renderError) Unwrap() error { return e.err }

// renderStruct renders st as compact JSON text in one walk that also makes
// badValue's checks: a NaN or infinity, or a container nested deeper than
// canonjson.MaxDepth (the root being depth 0, as in badValue), is returned
// as a *valueProblem; a value that cannot be rendered as a *renderError.
// Members are written in map order: the journal canonicalises the text
// before it hashes or stores it. Recursion is bounded by MaxDepth.
func renderStruct(st *structpb.Struct) ([]byte, error) {
	e := structEncoders.Get().(*structEncoder)
	e.buf.Reset()
	// Map keys are unique, so jsontext's duplicate-name check would find
	// nothing and only cost time; UTF-8 stays checked, as protojson does.
	e.enc.Reset(&e.buf, jsontext.AllowDuplicateNames(true))
	err := e.encodeStruct(st, 0)
	var out []byte
	if err == nil {
		// The encoder ends each top-level value with a newline; the bytes
		// are copied out because the buffer goes back to the pool.
		out = bytes.Clone(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
	}
	if e.buf.Cap() <= maxPooledScratch {
		e.enc.Reset(io.Discard) // drop the encoder's alias of buf's storage
		structEncoders.Put(e)
	}
	return out, err
}

// encodeStruct writes st, which is a container at the given depth.
func (e *structEncoder) encodeStruct(st *structpb.Struct, depth int) error {
	if err := e.enc.WriteToken(jsontext.BeginObject); err != nil {
		return &renderError{err}
	}
	for name, v := range st.GetFields() {
		if err := e.enc.WriteToken(jsontext.String(name)); err != nil {
			return &renderError{err}
		}
		if err := e.encodeValue(v, depth+1); err != nil {
			if p, ok := err.(*valueProblem); ok {
				p.rev = append(p.rev, name)
			}
			return err
		}
	}
	if err := e.enc.WriteToken(jsontext.EndObject); err != nil {
		return &renderError{err}
	}
	return nil
}

// encodeList writes l, which is a container at the given depth.
func (e *structEncoder) encodeList(l *structpb.ListValue, depth int) error {
	if err := e.enc.WriteToken(jsontext.BeginArray); err != nil {
		return &renderError{err}
	}
	for i, v := range l.GetValues() {
		if err := e.encodeValue(v, depth+1); err != nil {
			if p, ok := err.(*valueProblem); ok {
				p.rev = append(p.rev, strconv.Itoa(i))
			}
			return err
		}
	}
	if err := e.enc.WriteToken(jsontext.EndArray); err != nil {
		return &renderError{err}
	}
	return nil
}

// encodeValue writes v, found at the given depth.
func (e *structEncoder) encodeValue(v *structpb.Value, depth int) error {
	var tok jsontext.Token
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0) {
			return &valueProblem{msg: "is not a finite number (NaN and infinities are not JSON)"}
		}
		tok = jsontext.Float(k.NumberValue)
	case *structpb.Value_StringValue:
		tok = jsontext.String(k.StringValue)
	case *structpb.Value_BoolValue:
		tok = jsontext.Bool(k.BoolValue)
	case *structpb.Value_NullValue:
		tok = jsontext.Null // whatever the enum number, as protojson does
	case *structpb.Value_StructValue:
		if depth >= canonjson.MaxDepth {
			return &valueProblem{msg: fmt.Sprintf("nests deeper than %d levels", canonjson.MaxDepth)}
		}
		return e.encodeStruct(k.StructValue, depth) // a nil Struct is {}, as in protojson
	case *structpb.Value_ListValue:
		if depth >= canonjson.MaxDepth {
			return &valueProblem{msg: fmt.Sprintf("nests deeper than %d levels", canonjson.MaxDepth)}
		}
		return e.encodeList(k.ListValue, depth) // a nil ListValue is []
	default: // no kind, or a nil *Value
		return &renderError{errNoKind}
	}
	if err := e.enc.WriteToken(tok); err != nil {
		return &renderError{err}
	}
	return nil
}

func (p *valueProblem) Error() string { return p.path("") + ": " + p.msg }

// path is badValue's path of the refused value: field, then each member
// name or list index from the outside in, joined by "/" (names are not
// escaped).
func (p *valueProblem) path(field string) string {
	n := len(field)
	for _, s := range p.rev {
		n += 1 + len(s)
	}
	b := make([]byte, 0, n)
	b = append(b, field...)
	for i := len(p.rev) - 1; i >= 0; i-- {
		b = append(b, '/')
		b = append(b, p.rev[i]...)
	}
	return string(b)
}
