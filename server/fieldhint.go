package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The REST bodies are checked against their request message before the
// gateway decodes them (protojson), so that every refusal names its field
// and teaches: a misspelt field suggests the nearest field of that message
// ("unknown field \"key\"; did you mean \"operation_key\"?"), and a value
// of the wrong JSON type says what the field takes ("result: must be a
// JSON object, not a string"), where protojson would say "proto: syntax
// error (line 1:43): unexpected token". The check accepts exactly what
// protojson accepts as to names and JSON types; protojson still decodes
// (and refuses, say, an int32 out of range).

// requestMessage returns the request message of a JournalService method.
func requestMessage(method string) protoreflect.MessageDescriptor {
	svc := pb.File_opjournal_v1_journal_proto.Services().ByName("JournalService")
	if svc == nil {
		return nil
	}
	m := svc.Methods().ByName(protoreflect.Name(method))
	if m == nil {
		return nil
	}
	return m.Input()
}

// checkBody checks a REST body (one JSON object) against the request of
// method, returning an INVALID_ARGUMENT *opjournal.Error naming the field
// (a dotted path for nested ones), or nil.
func checkBody(method string, body []byte) error {
	md := requestMessage(method)
	if md == nil {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil // checkJSONObject has said what is wrong
	}
	return checkMessage(md, obj, "")
}

// checkMembers is checkBody on a body's members already parsed (the REST
// guard parses a body once).
func checkMembers(method string, members map[string]json.RawMessage) error {
	md := requestMessage(method)
	if md == nil {
		return nil
	}
	return checkMessage(md, members, "")
}

func checkMessage(md protoreflect.MessageDescriptor, obj map[string]json.RawMessage, prefix string) error {
	fds := md.Fields()
	for _, name := range sortedKeys(obj) {
		fd := fds.ByName(protoreflect.Name(name))
		if fd == nil {
			fd = fds.ByJSONName(name)
		}
		if fd == nil {
			msg := fmt.Sprintf("unknown field %q", name)
			if s := nearestField(md, name); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else {
				msg += fmt.Sprintf(" (the fields of %s: %s)", md.Name(), strings.Join(fieldNames(md), ", "))
			}
			return opjournal.Errorf(opjournal.CodeInvalidArgument, prefix+name, "%s", msg)
		}
		if err := checkValue(fd, obj[name], prefix+string(fd.Name())); err != nil {
			return err
		}
	}
	return nil
}

// sortedKeys returns a map's keys in order, so that the first problem
// reported does not depend on map iteration.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// jsonKind names the JSON type of a raw value.
func jsonKind(raw json.RawMessage) string {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	if s == "" {
		return ""
	}
	switch s[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// checkValue checks one field's value; null is accepted everywhere, as
// protojson takes it for "not set".
func checkValue(fd protoreflect.FieldDescriptor, raw json.RawMessage, path string) error {
	kind := jsonKind(raw)
	if kind == "null" {
		return nil
	}
	switch {
	case fd.IsMap():
		if kind != "an object" {
			return wrongType(path, "a JSON object of "+fd.MapValue().Kind().String()+" values", kind)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		for _, k := range sortedKeys(m) {
			if err := checkSingle(fd.MapValue(), m[k], path+"."+k); err != nil {
				return err
			}
		}
		return nil
	case fd.IsList():
		if kind != "an array" {
			return wrongType(path, "a JSON array", kind)
		}
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return nil
		}
		for i, item := range items {
			if jsonKind(item) == "null" {
				return opjournal.Errorf(opjournal.CodeInvalidArgument, fmt.Sprintf("%s[%d]", path, i), "must not be null")
			}
			if err := checkSingle(fd, item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return checkSingle(fd, raw, path)
}

// checkSingle checks one value of fd's type (an element, for a list or map).
func checkSingle(fd protoreflect.FieldDescriptor, raw json.RawMessage, path string) error {
	kind := jsonKind(raw)
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		switch md.FullName() {
		case "google.protobuf.Struct":
			if kind != "an object" {
				return wrongType(path, "a JSON object", kind)
			}
			return nil
		case "google.protobuf.Value":
			return nil
		case "google.protobuf.ListValue":
			if kind != "an array" {
				return wrongType(path, "a JSON array", kind)
			}
			return nil
		case "google.protobuf.Timestamp":
			if kind != "a string" {
				return wrongType(path, `an RFC 3339 time string ("2026-01-02T15:04:05Z")`, kind)
			}
			return nil
		case "google.protobuf.Duration":
			if kind != "a string" {
				return wrongType(path, `a duration string ("1.5s")`, kind)
			}
			return nil
		}
		if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
			return nil // wrappers and the rest: protojson decides
		}
		if kind != "an object" {
			return wrongType(path, "a JSON object", kind)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		return checkMessage(md, obj, path+".")
	case protoreflect.StringKind:
		if kind != "a string" {
			return wrongType(path, "a string", kind)
		}
	case protoreflect.BytesKind:
		if kind != "a string" {
			return wrongType(path, "a base64 string", kind)
		}
	case protoreflect.BoolKind:
		if kind != "a boolean" {
			return wrongType(path, "true or false", kind)
		}
	case protoreflect.EnumKind:
		switch kind {
		case "a number":
		case "a string":
			var s string
			if json.Unmarshal(raw, &s) != nil {
				return nil
			}
			values := fd.Enum().Values()
			if values.ByName(protoreflect.Name(s)) != nil {
				return nil
			}
			var names []string
			for i := 0; i < values.Len(); i++ {
				if n := values.Get(i).Name(); !strings.HasSuffix(string(n), "_UNSPECIFIED") {
					names = append(names, string(n))
				}
			}
			msg := fmt.Sprintf("%q is not one of %s", s, strings.Join(names, ", "))
			if best := nearest(s, names); best != "" {
				msg += fmt.Sprintf("; did you mean %q?", best)
			}
			return opjournal.Errorf(opjournal.CodeInvalidArgument, path, "%s", msg)
		default:
			return wrongType(path, "one of the names of "+string(fd.Enum().Name()), kind)
		}
	default: // numbers: protojson also takes them quoted
		if kind != "a number" && kind != "a string" {
			return wrongType(path, "a number", kind)
		}
		return checkRange(fd.Kind(), raw, path)
	}
	return nil
}

// checkRange refuses a whole number that does not fit a 32-bit field
// (other forms, and 64-bit fields, are protojson's to judge).
func checkRange(k protoreflect.Kind, raw json.RawMessage, path string) error {
	text := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	var lo, hi int64
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		lo, hi = math.MinInt32, math.MaxInt32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		lo, hi = 0, math.MaxUint32
	default:
		return nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	var numErr *strconv.NumError
	if errors.As(err, &numErr) && numErr.Err == strconv.ErrRange {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, path, "must be a whole number from %d to %d", lo, hi)
	}
	if err == nil && (n < lo || n > hi) {
		return opjournal.Errorf(opjournal.CodeInvalidArgument, path, "must be a whole number from %d to %d", lo, hi)
	}
	return nil
}

func wrongType(path, want, got string) error {
	return opjournal.Errorf(opjournal.CodeInvalidArgument, path, "must be %s, not %s", want, got)
}

// fieldNames lists a message's fields by proto name, in declaration order.
func fieldNames(md protoreflect.MessageDescriptor) []string {
	names := make([]string, md.Fields().Len())
	for i := range names {
		names[i] = string(md.Fields().Get(i).Name())
	}
	return names
}

// nearestField is the field of md that a misspelt name most likely meant.
func nearestField(md protoreflect.MessageDescriptor, name string) string {
	return nearest(name, fieldNames(md))
}

// nearest returns the candidate that name most likely meant, or "" if
// none is close. In order: the same name but for case, underscores and
// dashes ("OperationKey", "operation-key"); then the fewest edits, at most
// one per four letters (at least one, at most three): "opertion_key";
// then a candidate of which name is a whole word or a prefix ("key" →
// "operation_key", "lease" → "lease_seconds"). Ties go to the candidate
// listed first (a message's first fields are its main ones).
func nearest(name string, candidates []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	n := norm(name)
	if n == "" {
		return ""
	}
	for _, c := range candidates {
		if norm(c) == n {
			return c
		}
	}
	best, bestDist := "", 0
	limit := min(max(len(n)/4, 1), 3)
	for _, c := range candidates {
		if d := editDistance(n, norm(c)); d <= limit && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	if best != "" {
		return best
	}
	if len(n) < 3 {
		return ""
	}
	lower := strings.ToLower(name)
	for _, c := range candidates {
		lc := strings.ToLower(c)
		if strings.HasPrefix(lc, lower) {
			return c
		}
		for _, word := range strings.FieldsFunc(lc, func(r rune) bool { return r == '_' }) {
			if word == lower {
				return c
			}
		}
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
