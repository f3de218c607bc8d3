package server

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// This file decodes the JSON text the journal stores (payloads, results)
// into google.protobuf.Struct for an answer, without protojson. protojson
// goes through protoreflect for every value and recurses once per nesting
// level (several Go frames each), which made operationPB one of the largest
// CPU costs of a response and grew goroutine stacks on every RPC. The
// decoder here walks jsontext tokens and builds structpb messages directly
// (an A/B in harness/bench/ANALYSIS.md); tests hold it to protojson's
// results (structdecode_test.go).

// storedJSONMaxDepth bounds the nesting structFromJSON accepts. Everything
// the journal stores passed canonjson, so it nests at most
// canonjson.MaxDepth levels; the headroom keeps rows written under a larger
// limit readable should MaxDepth ever be lowered, while still refusing
// (instead of building) an absurd tree from a corrupt row.
const storedJSONMaxDepth = 2 * canonjson.MaxDepth

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
