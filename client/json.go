package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
)

// maxSafeInteger is 2^53−1, the largest integer every JSON library carries
// exactly; the journal refuses numbers beyond ±maxSafeInteger.
const maxSafeInteger = 1<<53 - 1

// encodeObject turns v (a map, a struct, a json.RawMessage…) into a Struct
// through its JSON encoding, so numbers keep their JSON value (490000 stays
// 490000, never an int64 cast or a float format). v must encode as a JSON
// object, and every number in it must be within ±(2^53−1): a larger one
// would be rounded on the way, which the journal refuses anyway. Errors are
// *opjournal.Error with CodeInvalidArgument, naming the field.
func encodeObject(field string, v any) (*structpb.Struct, error) {
	if _, ok := v.([]byte); ok {
		return nil, invalid(field, "is a []byte, which encodes as a JSON string; pass json.RawMessage(b) for JSON bytes")
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, invalid(field, "cannot be encoded as JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, invalid(field, "is not valid JSON: %v", err)
	}
	if _, ok := tree.(map[string]any); !ok {
		return nil, invalid(field, "must be a JSON object (a map, a struct or a json.RawMessage holding {...}); %T encodes as %s",
			v, jsonKind(tree))
	}
	if err := checkNumbers(field, tree); err != nil {
		return nil, err
	}
	// Built from the tree just decoded: a second parse (protojson) cost
	// as much as everything else the SDK does per call.
	return toStruct(tree.(map[string]any)), nil
}

// toStruct builds a Struct from a decoded JSON object whose numbers
// checkNumbers has accepted (so float64 holds them exactly).
func toStruct(m map[string]any) *structpb.Struct {
	st := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(m))}
	for k, v := range m {
		st.Fields[k] = toValue(v)
	}
	return st
}

func toValue(v any) *structpb.Value {
	switch x := v.(type) {
	case map[string]any:
		return structpb.NewStructValue(toStruct(x))
	case []any:
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(x))}
		for i, e := range x {
			l.Values[i] = toValue(e)
		}
		return structpb.NewListValue(l)
	case json.Number:
		f, _ := strconv.ParseFloat(string(x), 64)
		return structpb.NewNumberValue(f)
	case string:
		return structpb.NewStringValue(x)
	case bool:
		return structpb.NewBoolValue(x)
	}
	return structpb.NewNullValue()
}

// invalid is a client-side CodeInvalidArgument error for field. The
// message says everything (the cause's text included), so Err stays nil.
func invalid(field, format string, args ...any) error {
	return &opjournal.Error{Code: opjournal.CodeInvalidArgument, Field: field, Message: fmt.Sprintf(format, args...)}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

// checkNumbers refuses numbers beyond ±(2^53−1), naming their path
// ("payload/items/0/amount_minor") the way the journal does.
func checkNumbers(path string, v any) error {
	switch v := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			if i > maxSafeInteger || i < -maxSafeInteger {
				return invalid(path, "is beyond ±(2^53−1) and would be rounded; send it as a string")
			}
			return nil
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || f > maxSafeInteger || f < -maxSafeInteger {
			return invalid(path, "is beyond ±(2^53−1) and would be rounded; send it as a string")
		}
	case map[string]any:
		for k, e := range v {
			if err := checkNumbers(path+"/"+k, e); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := checkNumbers(path+"/"+strconv.Itoa(i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// decodeObject renders a Struct as compact JSON with sorted keys (nil for nil).
func decodeObject(st *structpb.Struct) json.RawMessage {
	if st == nil {
		return nil
	}
	b, err := protojson.Marshal(st)
	if err != nil {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil
	}
	return buf.Bytes()
}
