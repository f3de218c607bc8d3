package opjournal

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// Refs are an operation's business references: short name → value pairs
// (order_id → 817) stored beside the key, searchable, and part of neither
// the key nor the request hash. The advice of docs/spec.md is an opaque key
// (NewKey) with the business links "in separate fields": these are them.

// CheckRefs validates refs: at most MaxRefs entries; names of 1–64
// characters of [a-z0-9_.-] starting with a letter or digit; values of
// 1–200 bytes of UTF-8 without control characters. Errors name the ref
// (names are safe to show) but never quote a value.
func CheckRefs(refs map[string]string) error {
	if len(refs) > MaxRefs {
		return Errorf(CodeInvalidArgument, "refs", "has %d entries; the limit is %d", len(refs), MaxRefs)
	}
	names := make([]string, 0, len(refs))
	for n := range refs {
		names = append(names, n)
	}
	slices.Sort(names) // report the same problem first every time
	for _, n := range names {
		if !ValidRefName(n) {
			return Errorf(CodeInvalidArgument, "refs", "a name is not 1–%d characters of a-z, 0-9, '_', '.' and '-' starting with a letter or digit", MaxRefNameLen)
		}
		v := refs[n]
		field := "refs/" + n
		switch {
		case v == "":
			return Errorf(CodeInvalidArgument, field, "is empty; leave out a ref that has no value")
		case len(v) > MaxRefValueLen:
			return Errorf(CodeInvalidArgument, field, "is %d bytes; the limit is %d", len(v), MaxRefValueLen)
		case !utf8.ValidString(v):
			return Errorf(CodeInvalidArgument, field, "is not valid UTF-8")
		}
		for i, r := range v {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				return Errorf(CodeInvalidArgument, field, "has a control character at offset %d", i)
			}
		}
	}
	return nil
}

// ValidRefName reports whether n is a ref name: 1–64 characters of
// [a-z0-9_.-] starting with a letter or digit.
func ValidRefName(n string) bool {
	if n == "" || len(n) > MaxRefNameLen || n[0] == '_' || n[0] == '.' || n[0] == '-' {
		return false
	}
	for i := 0; i < len(n); i++ {
		if !isNameChar(n[i]) {
			return false
		}
	}
	return true
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// RefsJSON is refs as the JSON object stores keep (names sorted), nil for
// no refs.
func RefsJSON(refs map[string]string) json.RawMessage {
	if len(refs) == 0 {
		return nil
	}
	b, err := json.Marshal(refs)
	if err != nil {
		panic("opjournal: refs do not encode: " + err.Error()) // a map of strings always does
	}
	return b
}

// ParseRefs decodes a stored refs object (nil or "null" for none).
func ParseRefs(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" || string(b) == "{}" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}
