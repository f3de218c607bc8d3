// Package protocodec encodes and decodes the journal's protobuf messages
// with the code vtprotobuf generates (MarshalVT, UnmarshalVT, SizeVT in
// proto/opjournal/v1/journal_vtproto.pb.go) instead of protobuf-go's
// reflection, with the guarantees protobuf-go gives that the generated
// code does not:
//
//   - strings are valid UTF-8 (proto3 requires it; UnmarshalVT copies any
//     bytes): a wire walk checks every string field before decoding, and
//     its error names the field;
//   - nesting is bounded (UnmarshalVT recurses without a limit; protobuf-go
//     stops at its recursion limit): the same walk refuses a message nested
//     deeper than RecursionLimit, so a decode never grows a goroutine stack
//     past what that depth costs.
//
// Messages without generated code (grpc's health and reflection services)
// go through protobuf-go as before. Codec is the grpc codec for clients;
// the server wraps Marshal and Unmarshal in its own codec, which keeps
// requests undecoded until the caller is authenticated.
package protocodec

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// RecursionLimit is the deepest message nesting decoded. It comfortably
// exceeds what a MaxRequestBytes message can nest (two bytes per level at
// the very least), so the journal sees any deep payload and refuses it
// past canonjson.MaxDepth with the field's name; it still bounds the
// stack a decode may use when the request limit is configured very high.
const RecursionLimit = 1 << 20

// vtMessage is what vtprotobuf generates for a message (features
// marshal, unmarshal and size).
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
	UnmarshalVT([]byte) error
}

// Marshal encodes v, a proto.Message, into buffers for grpc: with
// MarshalVT when v has generated code, protobuf-go otherwise. Messages
// above grpc's pooling threshold are written into a pooled buffer, as
// grpc's own codec does. It returns an error for a v that is not a
// proto.Message, or protobuf-go's error.
func Marshal(v any) (mem.BufferSlice, error) {
	return encode(v, false)
}

// MarshalSorted is Marshal, except that a message holding a Struct with
// members goes through protobuf-go with sorted map keys. MarshalVT writes
// a Struct's members in Go's random map order, so one stored result would
// reach a client in a different member order on every replay (a
// JavaScript or Python client keeps the order it reads), where the REST
// mirror and the canonical form sort them. The server's answers use it;
// a client's requests need not (the journal canonicalizes them).
func MarshalSorted(v any) (mem.BufferSlice, error) { return encode(v, true) }

func encode(v any, sorted bool) (mem.BufferSlice, error) {
	vt, ok := v.(vtMessage)
	if !ok || sorted && holdsMembers(v) {
		m, ok := v.(proto.Message)
		if !ok {
			return nil, fmt.Errorf("protocodec: %T is not a proto.Message", v)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	size := vt.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		b := make([]byte, size)
		if _, err := vt.MarshalToSizedBufferVT(b); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := vt.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes b into m, which must be empty (grpc hands the codec
// new messages): with UnmarshalVT after the UTF-8 and depth walk when m
// has generated code, protobuf-go with RecursionLimit otherwise. Strings
// and bytes are copied out of b, so b may be reused afterwards. It
// returns an error that names the field for invalid UTF-8, and the
// decoder's error for bytes that are not the message.
func Unmarshal(b []byte, m proto.Message) error {
	vt, ok := m.(vtMessage)
	if !ok {
		return proto.UnmarshalOptions{RecursionLimit: RecursionLimit}.Unmarshal(b, m)
	}
	if err := check(b, planOf(m.ProtoReflect().Descriptor()), RecursionLimit); err != nil {
		return err
	}
	return vt.UnmarshalVT(b)
}

// Codec is the grpc codec (named "proto", as grpc's own) of Marshal and
// Unmarshal, for clients: grpc.ForceCodecV2(protocodec.Codec{}).
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name returns "proto": the content subtype grpc's protobuf codec uses.
func (Codec) Name() string { return "proto" }

// Marshal encodes v (see the package's Marshal).
func (Codec) Marshal(v any) (mem.BufferSlice, error) { return Marshal(v) }

// Unmarshal decodes data into v, a proto.Message (see the package's
// Unmarshal). It returns an error for a v that is not a proto.Message.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("protocodec: %T is not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return Unmarshal(buf.ReadOnlyData(), m)
}

// plan is what the walk needs of a message: for each field number, whether
// it is a string (checked) or a message (walked), and its name for errors.
type plan struct {
	fields []planField // by field number; the journal's numbers are small
}

type planField struct {
	name string
	str  bool
	msg  *plan // nil for a scalar
}

// field returns the plan of field num, or false for one the walk skips.
func (p *plan) field(num protowire.Number) (planField, bool) {
	if num < 0 || int(num) >= len(p.fields) {
		return planField{}, false
	}
	f := p.fields[num]
	return f, f.str || f.msg != nil
}

// plans holds one plan per message descriptor, built on first use.
var plans sync.Map // protoreflect.FullName → *plan

func planOf(md protoreflect.MessageDescriptor) *plan {
	if p, ok := plans.Load(md.FullName()); ok {
		return p.(*plan)
	}
	building := map[protoreflect.FullName]*plan{}
	p := buildPlan(md, building)
	for name, bp := range building {
		plans.LoadOrStore(name, bp)
	}
	return p
}

// buildPlan makes md's plan and those of the messages it holds (building
// keeps the ones under way: Struct and Value hold each other).
func buildPlan(md protoreflect.MessageDescriptor, building map[protoreflect.FullName]*plan) *plan {
	if p, ok := building[md.FullName()]; ok {
		return p
	}
	p := &plan{}
	building[md.FullName()] = p
	fds := md.Fields()
	for i := range fds.Len() {
		if n := int(fds.Get(i).Number()); n >= len(p.fields) {
			p.fields = append(p.fields, make([]planField, n+1-len(p.fields))...)
		}
	}
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := planField{name: string(fd.Name())}
		switch fd.Kind() {
		case protoreflect.StringKind:
			// proto2 strings need not be UTF-8; every file here is proto3.
			f.str = fd.Syntax() == protoreflect.Proto3 || fd.Syntax() == protoreflect.Editions
		case protoreflect.MessageKind:
			f.msg = buildPlan(fd.Message(), building)
		default:
			continue
		}
		p.fields[fd.Number()] = f
	}
	return p
}

// errMalformed is the walk's answer to bytes that are not a message,
// in protobuf-go's words.
var errMalformed = errors.New("cannot parse invalid wire-format data")

// errTooDeep is the walk's answer to nesting past RecursionLimit.
var errTooDeep = errors.New("exceeded maximum recursion depth")

// fieldError is invalid UTF-8 in a string field; path grows from the
// field outwards as the walk returns, so the error costs nothing on the
// way in.
type fieldError struct{ path []string }

func (e *fieldError) Error() string {
	var sb strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		sb.WriteString(e.path[i])
		if i > 0 {
			sb.WriteByte('.')
		}
	}
	return "string field " + sb.String() + " contains invalid UTF-8"
}

// check walks b as a message of plan p: every string field must be valid
// UTF-8 and nesting stay within depth levels. Fields of the wrong wire
// type are left to the decoder, which refuses them.
func check(b []byte, p *plan, depth int) error {
	if depth <= 0 {
		return errTooDeep
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		// ConsumeTag takes numbers up to MaxInt32; protobuf-go (and the
		// protocol) stop at MaxValidNumber, the generated code does not.
		if n < 0 || num > protowire.MaxValidNumber {
			return errMalformed
		}
		b = b[n:]
		f, known := p.field(num)
		if !known || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errMalformed
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if f.str {
			if !utf8.Valid(v) {
				return &fieldError{path: []string{f.name}}
			}
			continue
		}
		if err := check(v, f.msg, depth-1); err != nil {
			if fe, ok := err.(*fieldError); ok {
				fe.path = append(fe.path, f.name)
			}
			return err
		}
	}
	return nil
}

// DialOption makes Codec the codec of every call on a connection: the
// option client.Dial and the project's harnesses pass to grpc.NewClient.
func DialOption() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{}))
}

// toStructs caches, by message, the fields through which it can hold a
// google.protobuf.Struct, Value or ListValue at any depth
// ([]protoreflect.FieldDescriptor; empty for none).
var toStructs sync.Map // protoreflect.MessageDescriptor → []protoreflect.FieldDescriptor

// structFields returns md's fields that can lead to a Struct, Value or
// ListValue.
func structFields(md protoreflect.MessageDescriptor) []protoreflect.FieldDescriptor {
	if fs, ok := toStructs.Load(md); ok {
		return fs.([]protoreflect.FieldDescriptor)
	}
	var fs []protoreflect.FieldDescriptor
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		vd := fd
		if fd.IsMap() {
			vd = fd.MapValue()
		}
		if vd.Message() != nil && reachesStruct(vd.Message(), map[protoreflect.FullName]bool{}) {
			fs = append(fs, fd)
		}
	}
	toStructs.Store(md, fs)
	return fs
}

// isStructValue reports whether md is one of the JSON-shaped well-known
// types, whose wire order is a map's.
func isStructValue(md protoreflect.MessageDescriptor) bool {
	if md.ParentFile().Package() != "google.protobuf" {
		return false
	}
	switch md.Name() {
	case "Struct", "Value", "ListValue":
		return true
	}
	return false
}

func reachesStruct(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if isStructValue(md) {
		return true
	}
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Message() != nil && reachesStruct(fd.Message(), seen) {
			return true
		}
	}
	return false
}

// holdsMembers reports whether v, a proto.Message, holds a Struct with a
// member, or a Value or ListValue (which may): the messages whose bytes
// depend on map order. It reads only the fields that can lead there, so
// an answer without a result costs a few field reads.
func holdsMembers(v any) bool {
	m, ok := v.(proto.Message)
	return ok && messageHoldsMembers(m.ProtoReflect())
}

func messageHoldsMembers(m protoreflect.Message) bool {
	md := m.Descriptor()
	if isStructValue(md) {
		if md.Name() == "Struct" {
			return m.Get(md.Fields().ByNumber(1)).Map().Len() > 0
		}
		return true
	}
	for _, fd := range structFields(md) {
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsMap():
			found := false
			v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
				found = messageHoldsMembers(e.Message())
				return !found
			})
			if found {
				return true
			}
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if messageHoldsMembers(l.Get(i).Message()) {
					return true
				}
			}
		default:
			if messageHoldsMembers(v.Message()) {
				return true
			}
		}
	}
	return false
}
