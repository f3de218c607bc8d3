package server

import (
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/opjournal/opjournal/internal/protocodec"
)

// codec is grpc-go's protobuf codec with three changes.
//
// It does not decode JournalService requests: it keeps their bytes, and
// the interceptor decodes them after it has authenticated the caller
// (decodeRequest). So nobody without a valid token makes the server parse
// anything, and a message that does not decode (garbage, invalid UTF-8 in
// a string) is answered INVALID_ARGUMENT naming the problem, where
// grpc-go would answer INTERNAL for any codec failure.
//
// It encodes and decodes the journal's messages with the code vtprotobuf
// generates instead of protobuf-go's reflection (internal/protocodec: the
// Struct payloads were the largest decoding cost of the fused path), with
// protobuf-go's checks kept: UTF-8 in strings, a bound on nesting.
//
// And it decodes with a higher recursion limit: a payload nested past
// protobuf's default (10,000 message levels: 5,000 JSON levels of
// google.protobuf.Value) would fail to decode; the message size limit
// already bounds nesting (every level costs bytes), so the journal refuses
// anything deeper than canonjson.MaxDepth with INVALID_ARGUMENT and the
// field's name.
type codec struct{}

// journalPackage prefixes the messages decoded after authentication.
const journalPackage = "opjournal.v1."

// pending holds the bytes of requests not decoded yet, by message.
var pending sync.Map // proto.Message → []byte

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) { return protocodec.MarshalSorted(v) }

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("codec: %T is not a proto.Message", v)
	}
	if strings.HasPrefix(string(m.ProtoReflect().Descriptor().FullName()), journalPackage) {
		// A copy: grpc reuses data's buffers once Unmarshal returns.
		pending.Store(m, data.Materialize())
		return nil
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return protocodec.Unmarshal(buf.ReadOnlyData(), m)
}

// decodeRequest decodes a request the codec kept (nothing to do for one
// that arrived decoded, from the REST gateway). It returns the decoding
// error, which names the field but never quotes its value.
func decodeRequest(req any) error {
	b, ok := pending.LoadAndDelete(req)
	if !ok {
		return nil
	}
	return protocodec.Unmarshal(b.([]byte), req.(proto.Message))
}
