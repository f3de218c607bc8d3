package server

import (
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// REST answers are written by appendMessage rather than protojson: the
// gateway's protojson marshalling was the largest share of a REST call's
// server CPU after the journal itself (it goes through protoreflect and
// its generic encoder for every value, Timestamps and Structs included).
// The output is the same JSON as protojson's with the gateway's options
// (proto field names, unpopulated fields shown): the same members with the
// same values, in declaration order. TestRESTAnswerMatchesProtojson holds
// it to protojson on every response message. A message holding anything
// it does not write (a float, a well-known type other than Timestamp and
// Struct, an invalid string or time) makes it decline, and protojson
// writes that answer instead, errors included.

// errDecline says appendMessage does not write this message.
var errDecline = errors.New("server: not written by the REST encoder")

// Marshal writes proto messages with appendMessage, falling back to
// protojson (and anything else to the gateway's marshaler).
func (m restMarshaler) Marshal(v any) ([]byte, error) {
	if msg, ok := v.(proto.Message); ok {
		if b, err := appendMessage(make([]byte, 0, 1024), msg.ProtoReflect()); err == nil {
			return b, nil
		}
	}
	return m.JSONPb.Marshal(v)
}

// appendMessage appends m as protojson would write it with UseProtoNames
// and EmitUnpopulated.
func appendMessage(b []byte, m protoreflect.Message) ([]byte, error) {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		return appendTimestamp(b, m)
	case "google.protobuf.Struct":
		st, ok := m.Interface().(*structpb.Struct)
		if !ok {
			return nil, errDecline
		}
		text, err := renderStruct(st)
		if err != nil {
			return nil, errDecline
		}
		return append(b, text...), nil
	}
	if m.Descriptor().FullName().Parent() == "google.protobuf" {
		return nil, errDecline
	}
	fds := m.Descriptor().Fields()
	b = append(b, '{')
	first := true
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.ContainingOneof() != nil && !m.Has(fd) {
			continue // protojson leaves unset oneof (and proto3 optional) fields out
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, string(fd.Name()))
		b = append(b, ':')
		var err error
		switch {
		case fd.IsMap():
			b, err = appendMap(b, fd, m.Get(fd).Map())
		case fd.IsList():
			l := m.Get(fd).List()
			b = append(b, '[')
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					b = append(b, ',')
				}
				if b, err = appendValue(b, fd, l.Get(j)); err != nil {
					return nil, err
				}
			}
			b = append(b, ']')
		case fd.HasPresence() && !m.Has(fd):
			b = append(b, "null"...)
		default:
			b, err = appendValue(b, fd, m.Get(fd))
		}
		if err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendMap appends a map with its keys in protojson's order (sorted).
func appendMap(b []byte, fd protoreflect.FieldDescriptor, mp protoreflect.Map) ([]byte, error) {
	if fd.MapKey().Kind() != protoreflect.StringKind {
		return nil, errDecline
	}
	keys := make([]string, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k.String())
		return true
	})
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		if !utf8.ValidString(k) {
			return nil, errDecline
		}
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = appendValue(b, fd.MapValue(), mp.Get(protoreflect.ValueOfString(k).MapKey())); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendValue appends one value of fd's kind (an element, for lists and
// maps).
func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return nil, errDecline
		}
		return appendString(b, v.String()), nil
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(b, v.Uint(), 10), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendInt(b, v.Int(), 10), '"'), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendUint(b, v.Uint(), 10), '"'), nil
	case protoreflect.BytesKind:
		b = append(b, '"')
		return append(base64.StdEncoding.AppendEncode(b, v.Bytes()), '"'), nil
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return nil, errDecline
		}
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(b, string(ev.Name())), nil
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10), nil
	case protoreflect.MessageKind:
		return appendMessage(b, v.Message())
	}
	return nil, errDecline // floats and groups: protojson's
}

// appendTimestamp writes RFC 3339 in UTC with 0, 3, 6 or 9 fractional
// digits, protojson's form; a time outside its range declines.
func appendTimestamp(b []byte, m protoreflect.Message) ([]byte, error) {
	fds := m.Descriptor().Fields()
	secs, nanos := m.Get(fds.ByName("seconds")).Int(), m.Get(fds.ByName("nanos")).Int()
	const minSecs, maxSecs = -62135596800, 253402300799 // 0001-01-01, 9999-12-31
	if secs < minSecs || secs > maxSecs || nanos < 0 || nanos > 999999999 {
		return nil, errDecline
	}
	b = append(b, '"')
	b = time.Unix(secs, nanos).UTC().AppendFormat(b, "2006-01-02T15:04:05.000000000")
	// Drop zero groups of three digits, and the point if none is left.
	for range 3 {
		if n := len(b); string(b[n-3:]) == "000" {
			b = b[:n-3]
		}
	}
	if b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	return append(b, 'Z', '"'), nil
}

// appendString appends s (valid UTF-8) as a JSON string.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
