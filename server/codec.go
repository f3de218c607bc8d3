package server

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is grpc-go's protobuf codec with a higher recursion limit.
//
// grpc-go turns any decoding failure into codes.Internal, so a payload
// nested past protobuf's default limit (10,000 message levels: 5,000 JSON
// levels of google.protobuf.Value) came back as an internal error. The
// message size limit already bounds nesting (every level costs bytes), so
// we decode it and let the journal refuse anything deeper than
// canonjson.MaxDepth with INVALID_ARGUMENT and the field's name.
type codec struct{}

// recursionLimit comfortably exceeds what a MaxRequestBytes message can
// nest (two bytes per level at the very least).
const recursionLimit = 1 << 20

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
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return proto.UnmarshalOptions{RecursionLimit: recursionLimit}.Unmarshal(buf.ReadOnlyData(), m)
}
