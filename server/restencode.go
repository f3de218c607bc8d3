package server

// REST answers are written by their messages' generated AppendProtoJSON
// methods (proto/opjournal/v1/journal_restjson.pb.go, from
// internal/cmd/protoc-gen-opjournal-json) rather than by protojson: the
// gateway's protojson marshalling was the largest share of a REST call's
// server CPU after the journal itself (it goes through protoreflect and
// its generic encoder for every value, Timestamps and Structs included),
// and a walk of the message by protoreflect that wrote the same JSON still
// spent most of its time in protoreflect. The generated methods read the
// Go fields directly and write protojson's compact output with the
// gateway's options (proto field names, unpopulated fields shown), byte
// for byte; TestRESTAnswerMatchesProtojson holds them to it on every
// response message. What a method does not write (invalid UTF-8, a time
// out of range, a Struct value protojson refuses) makes it decline, and
// protojson writes that answer instead, errors included.

// protoJSONAppender is a message with a generated AppendProtoJSON.
type protoJSONAppender interface {
	AppendProtoJSON(b []byte) ([]byte, bool)
}

// Marshal writes a message with its generated AppendProtoJSON, falling
// back to protojson (and anything else to the gateway's marshaler).
func (m restMarshaler) Marshal(v any) ([]byte, error) {
	if a, ok := v.(protoJSONAppender); ok {
		if b, ok := a.AppendProtoJSON(make([]byte, 0, 1024)); ok {
			return b, nil
		}
	}
	return m.JSONPb.Marshal(v)
}
