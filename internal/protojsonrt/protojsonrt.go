// Package protojsonrt holds what the generated AppendProtoJSON methods
// (proto/opjournal/v1/*_restjson.pb.go, written by
// internal/cmd/protoc-gen-opjournal-json) call to write a value as
// protojson does with UseProtoNames and EmitUnpopulated: JSON strings with
// protojson's escapes, 64-bit integers as strings, bytes in standard
// base64, Timestamps in RFC 3339 and Structs with their members sorted.
//
// The output is byte for byte protojson's compact form (protojson may add
// a space after a colon or comma at random, which is not part of the
// value). Every function that can meet a value protojson refuses or that
// it does not write (invalid UTF-8, a time out of range, a NaN in a
// Struct, a Value with no kind, a nil element) returns false instead, and
// the caller hands the message to protojson, so that protojson's errors
// are the ones a client sees.
package protojsonrt

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// plainASCII marks the bytes AppendString copies as they are: ASCII from
// the space up, except the quote and the backslash.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// AppendString appends s as a JSON string with protojson's escapes (\b,
// \f, \n, \r, \t, \" and \\ by name, other control characters as \u00XX,
// everything else as is). It returns false if s is not valid UTF-8.
func AppendString(b []byte, s string) ([]byte, bool) {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Runs of plain ASCII, most of every answer, take one table load
		// per byte.
		for i < len(s) && plainASCII[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			// Checked while escaping, so the string is read once.
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return b, false
			}
			i += n
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}

// AppendInt64 appends v as protojson writes a 64-bit integer: a decimal
// in a JSON string, since a JSON number loses precision beyond 2^53.
func AppendInt64(b []byte, v int64) []byte {
	b = append(b, '"')
	return append(strconv.AppendInt(b, v, 10), '"')
}

// AppendUint64 appends v as a decimal in a JSON string, as AppendInt64.
func AppendUint64(b []byte, v uint64) []byte {
	b = append(b, '"')
	return append(strconv.AppendUint(b, v, 10), '"')
}

// AppendBytes appends v in standard base64 with padding, as a JSON
// string.
func AppendBytes(b []byte, v []byte) []byte {
	b = append(b, '"')
	return append(base64.StdEncoding.AppendEncode(b, v), '"')
}

// Range of a Timestamp protojson writes: 0001-01-01T00:00:00Z to
// 9999-12-31T23:59:59.999999999Z.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// AppendTimestamp appends t as protojson does: RFC 3339 in UTC with 0, 3,
// 6 or 9 fractional digits. It returns false for a nil t and for a time
// protojson refuses (seconds outside years 1 to 9999, nanos outside
// 0..999999999).
func AppendTimestamp(b []byte, t *timestamppb.Timestamp) ([]byte, bool) {
	if t == nil {
		return b, false
	}
	secs, nanos := t.GetSeconds(), t.GetNanos()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos > 999999999 {
		return b, false
	}
	// The digits are written by hand: time.Time.AppendFormat parses its
	// layout on every call, which was most of a Timestamp's cost.
	tm := time.Unix(secs, 0).UTC()
	year, month, day := tm.Date()
	hour, minute, sec := tm.Clock()
	b = append(b, '"')
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	switch {
	case nanos == 0:
	case nanos%1e6 == 0:
		b = append(b, '.')
		b = appendDigits(b, int(nanos/1e6), 3)
	case nanos%1e3 == 0:
		b = append(b, '.')
		b = appendDigits(b, int(nanos/1e3), 6)
	default:
		b = append(b, '.')
		b = appendDigits(b, int(nanos), 9)
	}
	return append(b, 'Z', '"'), true
}

// appendDigits appends v (not negative) in decimal, zero-padded to width
// digits.
func appendDigits(b []byte, v, width int) []byte {
	var buf [9]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, buf[:width]...)
}

// maxDepth bounds the nesting of Structs and lists AppendStruct writes (the
// outermost Struct at depth 0), which bounds its recursion; deeper values,
// which the journal never stores (canonjson.MaxDepth is the same 64), are
// left to protojson.
const maxDepth = 64

// AppendStruct appends st as protojson writes a google.protobuf.Struct: a
// JSON object with its members sorted by name. It returns false for a nil
// st and for what protojson refuses or AppendValue declines.
func AppendStruct(b []byte, st *structpb.Struct) ([]byte, bool) {
	if st == nil {
		return b, false
	}
	return appendStruct(b, st, 0)
}

// AppendListValue appends l as protojson writes a
// google.protobuf.ListValue: a JSON array. It returns false for a nil l
// and for what AppendValue declines.
func AppendListValue(b []byte, l *structpb.ListValue) ([]byte, bool) {
	if l == nil {
		return b, false
	}
	return appendList(b, l, 0)
}

// AppendValue appends v as protojson writes a google.protobuf.Value. It
// returns false for a nil v, a Value with no kind, a NaN or infinite
// number, a string or name that is not UTF-8, and for containers nested
// more than 64 deep.
func AppendValue(b []byte, v *structpb.Value) ([]byte, bool) {
	return appendValue(b, v, 0)
}

func appendStruct(b []byte, st *structpb.Struct, depth int) ([]byte, bool) {
	if depth > maxDepth {
		return b, false
	}
	fields := st.GetFields() // a nil Struct inside a Value is {}, as in protojson
	b = append(b, '{')
	var ok bool
	var buf [16]string
	for i, k := range SortedKeys(fields, buf[:0]) {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = AppendString(b, k); !ok {
			return b, false
		}
		b = append(b, ':')
		if b, ok = appendValue(b, fields[k], depth+1); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendList(b []byte, l *structpb.ListValue, depth int) ([]byte, bool) {
	if depth > maxDepth {
		return b, false
	}
	b = append(b, '[')
	var ok bool
	for i, v := range l.GetValues() { // a nil ListValue inside a Value is []
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = appendValue(b, v, depth+1); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

func appendValue(b []byte, v *structpb.Value, depth int) ([]byte, bool) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return append(b, "null"...), true // whatever the enum number, as protojson does
	case *structpb.Value_NumberValue:
		return appendNumber(b, k.NumberValue)
	case *structpb.Value_StringValue:
		return AppendString(b, k.StringValue)
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(b, k.BoolValue), true
	case *structpb.Value_StructValue:
		return appendStruct(b, k.StructValue, depth)
	case *structpb.Value_ListValue:
		return appendList(b, k.ListValue, depth)
	}
	return b, false // no kind, or a nil *Value: protojson's error
}

// appendNumber appends a Struct's number in protojson's form (that of
// encoding/json: exponent notation below 1e-6 and from 1e21, with a
// one-digit negative exponent unpadded). NaN and infinities, which
// protojson refuses in a Value, return false.
func appendNumber(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-07 becomes e-7.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// SortedKeys returns m's keys in protojson's order for a map with string
// keys (sorted by byte value), appended to buf: a caller that passes a
// small array's slice keeps small maps off the heap.
func SortedKeys[V any](m map[string]V, buf []string) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}
