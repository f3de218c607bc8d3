package server

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// A request's payload and result become canonical JSON (RFC 8785) once,
// here, at the edge of the service, whichever door they came through:
// from the JSON text of a REST body (restdecode.go), which a Struct of
// doubles could not hold exactly, or from the google.protobuf.Struct a
// gRPC call carries.
// The journal takes the canonical bytes without parsing them again. A
// value that cannot be canonical JSON (a NaN, a rounded integer, nesting
// past canonjson.MaxDepth) is refused by canonjson with the value's path,
// and that refusal rides with the request, so that the journal reports it
// in its own order of checks: a request wrong in several ways hears the
// same first problem through every door.

// canonicalPayload is a Register's payload as the request envelope its
// hash covers (canonjson.StructRequest or canonjson.Request, with the
// action's options), or the refusal; both nil when the call has none.
func (s *journalServer) canonicalPayload(ctx context.Context, action string, st *structpb.Struct) (envelope json.RawMessage, refused error) {
	opts := s.svc.PayloadOptions(action)
	var err error
	if text := restText(ctx, "payload"); text != nil {
		envelope, _, err = canonjson.Request(action, text, opts)
	} else if st != nil {
		envelope, _, err = canonjson.StructRequest(action, st, opts)
	}
	if err != nil {
		return nil, err
	}
	return envelope, nil
}

// canonicalResult is a result (MarkSucceeded, MarkFailedFinal, Resolve)
// as canonical JSON, or the refusal; both nil when the call has none.
func canonicalResult(ctx context.Context, st *structpb.Struct) (result json.RawMessage, refused error) {
	var err error
	if text := restText(ctx, "result"); text != nil {
		result, err = canonjson.Canonicalize(text, canonjson.Options{})
	} else if st != nil {
		result, err = canonjson.CanonicalizeStruct(st, canonjson.Options{})
	}
	if err != nil {
		return nil, err
	}
	return result, nil
}
