package server

import (
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is grpc-go's protobuf codec with two changes.
//
// It does not decode JournalService requests: it keeps their bytes, and
// the interceptor decodes them after it has authenticated the caller
// (decodeRequest). So nobody without a valid token makes the server parse
// anything, and a message that does not decode (garbage, invalid UTF-8 in
// a string) is answered INVALID_ARGUMENT naming the problem, where
// grpc-go would answer INTERNAL for any codec failure.
//
// And it decodes with a higher recursion limit: a payload nested past
// protobuf's default (10,000 message levels: 5,000 JSON levels of
// google.protobuf.Value) would fail to decode; the message size limit
// already bounds nesting (every level costs bytes), so the journal refuses
// anything deeper than canonjson.MaxDepth with INVALID_ARGUMENT and the
// field's name.
type codec struct{}

// recursionLimit comfortably exceeds what a MaxRequestBytes message can
// nest (two bytes per level at the very least).
const recursionLimit = 1 << 20

// journalPackage prefixes the messages decoded after authentication.
const journalPackage = "opjournal.v1."

// pending holds the bytes of requests not decoded yet, by message.
var pending sync.Map // proto.Message → []byte

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("codec: %T is not a proto.Message", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("codec: %T is not a proto.Message", v)
	}
	if strings.HasPrefix(string(m.ProtoReflect().Descriptor().FullName()), journalPackage) {
		pending.Store(m, data.Materialize())
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return unmarshal(buf.ReadOnlyData(), m)
}

func unmarshal(b []byte, m proto.Message) error {
	return proto.UnmarshalOptions{RecursionLimit: recursionLimit}.Unmarshal(b, m)
}

// decodeRequest decodes a request the codec kept (nothing to do for one
// that arrived decoded, from the REST gateway). It returns the decoding
// error, which names the field but never quotes its value.
func decodeRequest(req any) error {
	b, ok := pending.LoadAndDelete(req)
	if !ok {
		return nil
	}
	return unmarshal(b.([]byte), req.(proto.Message))
}
