package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// The REST hot path parses a body once. The guard (restGuard) reads it
// with one jsontext pass into its top-level members, which also validates
// the whole text: syntax, UTF-8, duplicate names at every depth, trailing
// data. After the field checks (fieldhint.go) it fills the request message
// from those members (decodeREST), and the gateway's decoder
// (restMarshaler) hands that message over instead of running protojson
// over the body again. Each google.protobuf.Struct field (payload, result)
// stays the JSON text it came as: the journal canonicalises that text
// once, which is also the check that no number was rounded (a Struct, made
// of doubles, would have lost that), instead of text → Struct → text →
// canonical JSON.
//
// The fast path takes only what it decodes exactly as protojson would:
// strings without escapes, booleans, enum names and numbers, plain whole
// numbers, padded base64, nested messages and string maps. Anything else
// (an escape in a string, a number in exponent form, a field spelt two
// ways, a well-known type other than Struct, a list) sends the body down
// the old path: protojson decodes it and every refusal is worded as
// before. TestRESTDecodeMatchesProtojson and FuzzRESTDecode hold the fast
// path to protojson's results.

// restBody is a REST body the guard decoded on the fast path. It replaces
// the request's Body, so that the gateway's decoder finds the message, and
// rides in the context, so that the journal server finds the Struct
// fields' text.
type restBody struct {
	*bytes.Reader
	msg proto.Message
	// structs holds the text of the top-level Struct fields, by proto
	// name; they are not set in msg.
	structs map[string]json.RawMessage
}

// Close lets a restBody be a request body.
func (*restBody) Close() error { return nil }

type restBodyKey struct{}

// restBodyOf returns the fast-path REST body of ctx's request, if any.
func restBodyOf(ctx context.Context) *restBody {
	b, _ := ctx.Value(restBodyKey{}).(*restBody)
	return b
}

// restText is the JSON text a REST body carried for the Struct field
// named (payload, result), or nil.
func restText(ctx context.Context, field string) json.RawMessage {
	if b := restBodyOf(ctx); b != nil {
		return b.structs[field]
	}
	return nil
}

// structTexts are the JSON texts of the top-level google.protobuf.Struct
// fields (payload, result) among a body's members, by proto name, under
// either of a field's spellings; nil if there are none. A value that is
// not an object is left to protojson, which refuses it.
func structTexts(method string, members map[string]json.RawMessage) map[string]json.RawMessage {
	mt, ok := requestTypes[method]
	if !ok {
		return nil
	}
	fds := mt.Descriptor().Fields()
	var out map[string]json.RawMessage
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() || fd.Message().FullName() != "google.protobuf.Struct" {
			continue
		}
		for _, spelling := range []string{string(fd.Name()), fd.JSONName()} {
			if raw, ok := members[spelling]; ok && len(raw) > 0 && raw[0] == '{' {
				if out == nil {
					out = map[string]json.RawMessage{}
				}
				out[string(fd.Name())] = raw
			}
		}
	}
	return out
}

// checkStructTexts refuses a Struct field's text that is not valid JSON
// as canonjson reads it (a name given twice, at any depth), with the
// value's path, before protojson would refuse it without one. Valid text
// costs one pass of jsontext's validation and is made canonical at the
// edge only.
func checkStructTexts(texts map[string]json.RawMessage) error {
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		text := texts[name]
		if jsontext.Value(text).IsValid() {
			continue
		}
		if _, err := canonjson.Canonicalize(text, canonjson.Options{}); err != nil {
			return journal.JSONError(name, err)
		}
	}
	return nil
}

// decodeREST decodes the members of a body into a new request of method
// on the fast path; ok is false when some value is outside it.
func decodeREST(method string, body []byte, members map[string]json.RawMessage) (*restBody, bool) {
	mt, ok := requestTypes[method]
	if !ok {
		return nil, false
	}
	m := mt.New()
	structs := map[string]json.RawMessage{}
	if !decodeFast(m, members, structs) {
		return nil, false
	}
	return &restBody{Reader: bytes.NewReader(body), msg: m.Interface(), structs: structs}, true
}

// requestTypes maps each JournalService method to its request type.
var requestTypes = func() map[string]protoreflect.MessageType {
	out := map[string]protoreflect.MessageType{}
	methods := pb.File_opjournal_v1_journal_proto.Services().ByName("JournalService").Methods()
	for i := 0; i < methods.Len(); i++ {
		md := methods.Get(i)
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			panic("server: no Go type for " + string(md.Input().FullName()))
		}
		out[string(md.Name())] = mt
	}
	return out
}()

// parseMembers reads a body that is one JSON object into its top-level
// members, refusing what protojson would refuse anywhere in the text
// (invalid UTF-8, a name given twice at any depth). ok is false for any
// body that is not exactly that; the caller then takes the old path,
// which names the problem.
func parseMembers(body []byte) (members map[string]json.RawMessage, ok bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil, false
	}
	members = map[string]json.RawMessage{}
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		name := tok.String() // the token is void after the next read
		v, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		end := dec.InputOffset()
		members[name] = body[end-int64(len(v)) : end : end]
	}
	if _, err := dec.ReadToken(); err != nil { // the closing brace
		return nil, false
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, false // data after the object
	}
	return members, true
}

// restMarshaler is the gateway's JSON marshaler with a decoder that fills
// a request from a restBody's members.
type restMarshaler struct {
	*runtime.JSONPb
}

// NewDecoder hands over a restBody's message, and decodes anything else
// with protojson.
func (m restMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	b, ok := r.(*restBody)
	if !ok {
		return m.JSONPb.NewDecoder(r)
	}
	return runtime.DecoderFunc(func(v any) error {
		msg, ok := v.(proto.Message)
		if !ok || msg.ProtoReflect().Descriptor() != b.msg.ProtoReflect().Descriptor() {
			return fmt.Errorf("server: REST body decoded as %T, wanted as %T", b.msg, v)
		}
		proto.Merge(msg, b.msg)
		return nil
	})
}

// decodeFast sets m's fields from members. It reports false, having
// perhaps set some fields, when a value is outside the forms it decodes
// exactly as protojson does. structs, when not nil, receives the text of
// Struct fields instead of their decoding (top level only).
func decodeFast(m protoreflect.Message, members map[string]json.RawMessage, structs map[string]json.RawMessage) bool {
	fds := m.Descriptor().Fields()
	seen := make(map[protoreflect.FieldNumber]bool, len(members))
	for name, raw := range members {
		fd := fds.ByName(protoreflect.Name(name))
		if fd == nil {
			fd = fds.ByJSONName(name)
		}
		if fd == nil || seen[fd.Number()] || fd.ContainingOneof() != nil {
			return false
		}
		seen[fd.Number()] = true
		if string(raw) == "null" {
			continue // protojson: not set
		}
		switch {
		case fd.IsMap():
			if !decodeMap(m, fd, raw) {
				return false
			}
		case fd.IsList():
			return false
		case fd.Kind() == protoreflect.MessageKind:
			md := fd.Message()
			if md.FullName() == "google.protobuf.Struct" && structs != nil {
				if raw[0] != '{' {
					return false
				}
				structs[string(fd.Name())] = raw
				continue
			}
			if md.FullName().Parent() == "google.protobuf" {
				return false
			}
			sub, ok := parseMembers(raw)
			if !ok || !decodeFast(m.Mutable(fd).Message(), sub, nil) {
				return false
			}
		default:
			v, ok := scalar(fd, raw)
			if !ok {
				return false
			}
			m.Set(fd, v)
		}
	}
	return true
}

// decodeMap decodes a map with string keys and string values.
func decodeMap(m protoreflect.Message, fd protoreflect.FieldDescriptor, raw json.RawMessage) bool {
	if fd.MapKey().Kind() != protoreflect.StringKind || fd.MapValue().Kind() != protoreflect.StringKind {
		return false
	}
	entries, ok := parseMembers(raw)
	if !ok {
		return false
	}
	mp := m.Mutable(fd).Map()
	for k, v := range entries {
		s, ok := plainString(v)
		if !ok || !utf8.ValidString(k) {
			return false
		}
		mp.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(s))
	}
	return true
}

// scalar decodes one scalar value in the forms the fast path takes.
func scalar(fd protoreflect.FieldDescriptor, raw json.RawMessage) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		s, ok := plainString(raw)
		return protoreflect.ValueOfString(s), ok
	case protoreflect.BoolKind:
		switch string(raw) {
		case "true":
			return protoreflect.ValueOfBool(true), true
		case "false":
			return protoreflect.ValueOfBool(false), true
		}
	case protoreflect.EnumKind:
		if s, ok := plainString(raw); ok {
			if ev := fd.Enum().Values().ByName(protoreflect.Name(s)); ev != nil {
				return protoreflect.ValueOfEnum(ev.Number()), true
			}
			return protoreflect.Value{}, false
		}
		if n, err := strconv.ParseInt(string(raw), 10, 32); err == nil {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n)), true
		}
	case protoreflect.BytesKind:
		if s, ok := plainString(raw); ok {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				return protoreflect.ValueOfBytes(b), true
			}
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if n, err := strconv.ParseInt(wholeNumber(raw), 10, 32); err == nil {
			return protoreflect.ValueOfInt32(int32(n)), true
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if n, err := strconv.ParseInt(wholeNumber(raw), 10, 64); err == nil {
			return protoreflect.ValueOfInt64(n), true
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if n, err := strconv.ParseUint(wholeNumber(raw), 10, 32); err == nil {
			return protoreflect.ValueOfUint32(uint32(n)), true
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if n, err := strconv.ParseUint(wholeNumber(raw), 10, 64); err == nil {
			return protoreflect.ValueOfUint64(n), true
		}
	}
	return protoreflect.Value{}, false
}

// plainString returns the content of a JSON string without escapes (the
// text was validated as UTF-8 by parseMembers); ok is false for anything
// else.
func plainString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') >= 0 {
		return "", false
	}
	return string(in), true
}

// wholeNumber returns the text of a JSON number, or of a quoted one (both
// protojson forms of an integer field), if it is a plain whole number: an
// optional minus sign and digits, without leading zeros. That is the fast
// path's subset; anything else ("1e3", "1.0", "+7", "007") comes back as
// "x", which strconv refuses, and so goes to protojson.
func wholeNumber(raw json.RawMessage) string {
	s := string(raw)
	if q, ok := plainString(raw); ok {
		s = q
	}
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') || strings.TrimLeft(digits, "0123456789") != "" {
		return "x"
	}
	return s
}
