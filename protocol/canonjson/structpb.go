package canonjson

import (
	"bytes"
	"cmp"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"google.golang.org/protobuf/types/known/structpb"
)

// This file canonicalises a google.protobuf.Struct (what a gRPC client
// sends as a payload or result) straight into RFC 8785 bytes. Rendering the
// Struct as JSON text and handing the text to Canonicalize gives the same
// bytes, but parses everything a second time; here each value is written
// once, in its final form. The rules are Canonicalize's, applied to the
// JSON text the Struct stands for, and the refusals carry the same Path and
// Msg (structpb_test.go holds the two paths to byte equality on the fuzz
// corpus and under fuzzing):
//
//   - members sorted by their UTF-16 code units (compareUTF16), null-valued
//     members dropped at any depth, null list elements kept;
//   - numbers printed by jsontext.AppendFloat, the ES6 formatter jsontext's
//     own Canonicalize applies to every number, with -0 written as 0, as
//     Canonicalize does;
//   - strings quoted by jsontext.AppendQuote (RFC 8785 escaping), refused
//     when not UTF-8;
//   - numbers beyond ±MaxSafeInteger, IntegerFields members that are not
//     exact integers, and nesting deeper than MaxDepth refused by the
//     checks and messages Canonicalize uses (numberProblem, notAnInteger,
//     tooDeep).
//
// What JSON text cannot hold is refused too: a NaN or infinity, a Value
// with no kind (a nil *Value included). A Struct cannot repeat a member
// name (it is a map), so there is no duplicate to find.

// Messages for what only a Struct can hold. They never quote a value: it
// may be a secret, and errors reach logs.
const (
	msgNotFinite   = "is not a finite number (NaN and infinities are not JSON)"
	msgNoKind      = "is a google.protobuf.Value with none of its kinds set, which has no JSON form"
	msgBadUTF8     = "invalid UTF-8 in a string"
	msgBadUTF8Name = "invalid UTF-8 in a member name"
)

// CanonicalizeStruct returns the canonical form of st: the bytes
// [Canonicalize] returns, with the same opts, for the JSON text st stands
// for (protojson's rendering of it), without making that text. A nil
// Struct is {}, as protobuf's accessors treat it. On failure it returns a
// nil slice and an [*Error] whose Path points at the offending value: the
// Path and Msg Canonicalize gives for the same problem in the text, or,
// for what JSON text cannot hold (a NaN or infinity, a Value with no kind,
// a string or member name that is not UTF-8), a Msg of its own.
func CanonicalizeStruct(st *structpb.Struct, opts Options) ([]byte, error) {
	w := getStructWriter(opts)
	defer putStructWriter(w)
	if p := w.writeStruct(st, 1); p != nil {
		return nil, p.err()
	}
	return bytes.Clone(w.buf), nil
}

// CanonicalizeValue is [CanonicalizeStruct] for any Value (an object, a
// list, a scalar). A nil Value has no kind and is an [*Error].
func CanonicalizeValue(v *structpb.Value, opts Options) ([]byte, error) {
	w := getStructWriter(opts)
	defer putStructWriter(w)
	if p := w.writeValue(v, 1, false); p != nil {
		return nil, p.err()
	}
	return bytes.Clone(w.buf), nil
}

// StructRequest is [Request] for a payload held as a Struct: it returns
// the canonical JSON of {"action": action, "payload": <st without nulls>},
// byte for byte what Request returns for st's JSON text, and the canonical
// payload, which shares the envelope's memory (one allocation for both;
// the payload's capacity ends with it, so appending to it copies). A nil
// Struct is {}. On failure it returns nil slices and an [*Error]: the
// payload's, as from [CanonicalizeStruct], or Path "" and Msg "action is
// not valid UTF-8", the errors Request gives and in its order.
func StructRequest(action string, st *structpb.Struct, opts Options) (envelope, canonicalPayload []byte, err error) {
	w := getStructWriter(opts)
	defer putStructWriter(w)
	w.foldNames = true // a request: no two names equal under case folding (fold.go)
	// "action" sorts before "payload" (RFC 8785 §3.2.3), so the envelope
	// is written in its canonical order directly; AppendQuote escapes the
	// action as Request's canonicalisation of the envelope does.
	w.buf = append(w.buf, `{"action":`...)
	var actionErr error
	w.buf, actionErr = jsontext.AppendQuote(w.buf, action)
	w.buf = append(w.buf, `,"payload":`...)
	start := len(w.buf)
	if p := w.writeStruct(st, 1); p != nil {
		return nil, nil, p.err()
	}
	if actionErr != nil {
		return nil, nil, &Error{Msg: "action is not valid UTF-8"}
	}
	end := len(w.buf)
	w.buf = append(w.buf, '}')
	envelope = bytes.Clone(w.buf)
	return envelope, envelope[start:end:end], nil
}

// EnvelopePayload returns the canonical payload inside envelope, an
// envelope [Request] or [StructRequest] made for action, and true; or nil
// and false when envelope is not of that shape for action. It checks the
// frame around the payload, not the payload: it lets a caller that is
// handed an envelope confirm which action it names before hashing it.
func EnvelopePayload(envelope []byte, action string) ([]byte, bool) {
	const head, mid = `{"action":`, `,"payload":`
	rest, ok := bytes.CutPrefix(envelope, []byte(head))
	if !ok {
		return nil, false
	}
	quoted, err := jsontext.AppendQuote(make([]byte, 0, len(action)+2), action)
	if err != nil {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, quoted); !ok {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(mid)); !ok || len(rest) < 3 || rest[0] != '{' || rest[len(rest)-1] != '}' {
		return nil, false
	}
	payload := rest[:len(rest)-1]
	return payload[:len(payload):len(payload)], true
}

// structMember is an object member awaiting its turn in canonical order.
type structMember struct {
	name string
	v    *structpb.Value
}

// structWriter holds what one call needs, pooled so that the output
// buffer and the member scratch are reused rather than grown per call.
type structWriter struct {
	buf []byte
	// members holds the members of the open objects, innermost last;
	// each object sorts its own stretch of it.
	members   []structMember
	intFields []string
	// foldNames refuses member names equal under case folding (requests).
	foldNames bool
}

var structWriters = sync.Pool{New: func() any { return new(structWriter) }}

// maxPooledScratch is the largest buffer a pooled writer keeps; a rare
// larger one is left to the collector.
const maxPooledScratch = 256 << 10

// getStructWriter takes a writer from the pool, set up for opts.
func getStructWriter(opts Options) *structWriter {
	w := structWriters.Get().(*structWriter)
	w.buf = w.buf[:0]
	w.intFields = opts.IntegerFields
	w.foldNames = false
	return w
}

// putStructWriter returns w to the pool. Each object clears its stretch
// of w.members as it closes, error or not, so nothing of the caller's tree
// stays reachable from the pool.
func putStructWriter(w *structWriter) {
	w.intFields = nil
	if cap(w.buf) > maxPooledScratch || cap(w.members) > maxPooledScratch/16 {
		return
	}
	structWriters.Put(w)
}

// isIntField reports whether name is one of Options.IntegerFields. A
// policy names one or two such members, so a scan beats building a map
// (which Canonicalize can afford, as it allocates per token anyway).
func (w *structWriter) isIntField(name string) bool {
	return slices.Contains(w.intFields, name)
}

// structProblem is a refused value. Its path is collected while the
// recursion unwinds, innermost segment first, so nothing is spent on
// paths unless a value is refused.
type structProblem struct {
	rev []string
	msg string
	dup bool // a name equal to another under case folding
}

// err returns the problem as Canonicalize reports it: an *Error whose Path
// is the RFC 6901 pointer of the value.
func (p *structProblem) err() *Error {
	var ptr jsontext.Pointer
	for _, seg := range slices.Backward(p.rev) {
		ptr = ptr.AppendToken(seg)
	}
	e := &Error{Path: string(ptr), Msg: p.msg}
	if p.dup {
		e.cause = ErrDuplicateName
	}
	return e
}

// writeValue appends v, whose depth is depth if it is an object or a list
// (the root container being at depth 1, as in Canonicalize). intField
// says v is the value of a member named in Options.IntegerFields. The
// checks come in Canonicalize's order, so that a value with two problems
// is refused for the same one. Recursion is bounded by MaxDepth.
func (w *structWriter) writeValue(v *structpb.Value, depth int, intField bool) *structProblem {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return &structProblem{msg: msgNotFinite}
		}
		// A double is an integer exactly when its shortest decimal
		// spelling (what the JSON text would hold) is, within ±2^53.
		if msg := numberProblem(f, intField && f != math.Trunc(f)); msg != "" {
			return &structProblem{msg: msg}
		}
		if f == 0 {
			f = 0 // -0 is 0 in canonical JSON; AppendFloat would write -0
		}
		w.buf = jsontext.AppendFloat(w.buf, f, 64)
	case *structpb.Value_StringValue:
		if intField {
			return &structProblem{msg: notAnInteger('"')}
		}
		var err error
		if w.buf, err = jsontext.AppendQuote(w.buf, k.StringValue); err != nil {
			return &structProblem{msg: msgBadUTF8}
		}
	case *structpb.Value_BoolValue:
		if intField {
			return &structProblem{msg: notAnInteger('t')}
		}
		w.buf = strconv.AppendBool(w.buf, k.BoolValue)
	case *structpb.Value_NullValue:
		// Only list elements get here (writeStruct drops null members
		// first, integer fields included), whatever the enum number.
		w.buf = append(w.buf, "null"...)
	case *structpb.Value_StructValue:
		if intField {
			return &structProblem{msg: notAnInteger('{')}
		}
		if depth > MaxDepth {
			return &structProblem{msg: tooDeep}
		}
		return w.writeStruct(k.StructValue, depth) // a nil Struct is {}
	case *structpb.Value_ListValue:
		if intField {
			return &structProblem{msg: notAnInteger('[')}
		}
		if depth > MaxDepth {
			return &structProblem{msg: tooDeep}
		}
		return w.writeList(k.ListValue, depth) // a nil ListValue is []
	default: // no kind, or a nil *Value
		return &structProblem{msg: msgNoKind}
	}
	return nil
}

// writeStruct appends st, an object at the given depth, with its members
// in canonical order and its null-valued members left out.
func (w *structWriter) writeStruct(st *structpb.Struct, depth int) *structProblem {
	start := len(w.members)
	for name, v := range st.GetFields() {
		w.members = append(w.members, structMember{name, v})
	}
	end := len(w.members)
	// Only this object's stretch is sorted; nested objects append theirs
	// after it and truncate back, so indexes into it stay valid even when
	// the slice is reallocated.
	slices.SortFunc(w.members[start:end], func(a, b structMember) int { return compareUTF16(a.name, b.name) })
	p := w.writeMembers(start, end, depth)
	clear(w.members[start:end]) // the pooled scratch must not pin the caller's tree
	w.members = w.members[:start]
	return p
}

// writeMembers appends the object whose sorted members are
// w.members[start:end].
func (w *structWriter) writeMembers(start, end, depth int) *structProblem {
	w.buf = append(w.buf, '{')
	first := true
	var folded foldedNames
	for i := start; i < end; i++ {
		m := w.members[i]
		// The text would fail on the name before reaching its value, so a
		// bad name is refused even when the member is dropped as null.
		if !utf8.ValidString(m.name) {
			return &structProblem{msg: msgBadUTF8Name}
		}
		if w.foldNames && folded.seen(m.name) {
			// In the text's order (canonical, as here), Request refuses
			// the same member: the later of the two.
			return &structProblem{rev: []string{m.name}, msg: msgFoldedName, dup: true}
		}
		if _, null := m.v.GetKind().(*structpb.Value_NullValue); null {
			continue // {"memo": null} and {} are the same request
		}
		if !first {
			w.buf = append(w.buf, ',')
		}
		first = false
		w.buf, _ = jsontext.AppendQuote(w.buf, m.name) // valid UTF-8: checked above
		w.buf = append(w.buf, ':')
		if p := w.writeValue(m.v, depth+1, w.isIntField(m.name)); p != nil {
			p.rev = append(p.rev, m.name)
			return p
		}
	}
	w.buf = append(w.buf, '}')
	return nil
}

// writeList appends l, a list at the given depth; null elements are kept,
// since dropping them would shift the ones after them.
func (w *structWriter) writeList(l *structpb.ListValue, depth int) *structProblem {
	w.buf = append(w.buf, '[')
	for i, v := range l.GetValues() {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		if p := w.writeValue(v, depth+1, false); p != nil {
			p.rev = append(p.rev, strconv.Itoa(i))
			return p
		}
	}
	w.buf = append(w.buf, ']')
	return nil
}

// compareUTF16 orders member names as RFC 8785 §3.2.3 does: by their
// UTF-16 code units. UTF-8 bytes order strings by code point, which agrees
// with UTF-16 except between a character beyond U+FFFF (a surrogate pair,
// 0xD800-0xDBFF first) and one from U+E000 to U+FFFF, so the bytes decide
// until the first difference and only a non-ASCII difference is decoded.
func compareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return cmp.Compare(a[i], b[i])
	}
	// The equal prefix ends inside a character or just before one; the
	// character starts at the same offset in both.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	if (ra < 0x10000) == (rb < 0x10000) {
		return cmp.Compare(ra, rb)
	}
	return cmp.Compare(firstCodeUnit(ra), firstCodeUnit(rb))
}

// firstCodeUnit returns the first UTF-16 code unit of r: r itself within
// the Basic Multilingual Plane, its high surrogate beyond it.
func firstCodeUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}
