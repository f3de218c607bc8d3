package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"github.com/opjournal/opjournal/protocol/policy"
)

// Redacted replaces the value of every redact_fields member in what the
// journal stores.
const Redacted = "[redacted]"

// redact returns canonical JSON with the values of members named in fields
// (at any depth) replaced by Redacted. The input is canonical JSON the
// journal produced, so it decodes; the output is canonical again.
func redact(canonical json.RawMessage, fields []string) (json.RawMessage, error) {
	if len(fields) == 0 || canonical == nil || !mayName(canonical, fields) {
		return canonical, nil
	}
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber() // keep numbers' canonical text exactly
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("redact: %w", err)
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, val := range t {
				if slices.Contains(fields, k) {
					t[k] = Redacted
				} else {
					t[k] = walk(val)
				}
			}
		case []any:
			for i, val := range t {
				t[i] = walk(val)
			}
		}
		return x
	}
	b, err := json.Marshal(walk(v))
	if err != nil {
		return nil, fmt.Errorf("redact: %w", err)
	}
	return canonjson.Canonicalize(b, canonjson.Options{})
}

// mayName reports whether canonical JSON may hold a member with one of
// names: false when no name's quoted text occurs in it at all, which
// spares decoding and re-encoding payloads that hold no secret (the usual
// case). A name that canonical JSON would escape (a quote, a backslash or
// a control character) or any non-ASCII one always counts as possibly
// there.
func mayName(canonical json.RawMessage, names []string) bool {
	for _, n := range names {
		if strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' || r == '\\' }) {
			return true
		}
		i := 0
		for {
			j := bytes.Index(canonical[i:], []byte(n))
			if j < 0 {
				break
			}
			at := i + j
			if at > 0 && canonical[at-1] == '"' && at+len(n) < len(canonical) && canonical[at+len(n)] == '"' {
				return true
			}
			i = at + 1
		}
	}
	return false
}

// redactNames returns every member name some action of pol redacts, once
// each.
func redactNames(pol *policy.Policy) []string {
	var names []string
	for _, name := range pol.Names() {
		if a, ok := pol.Action(name); ok {
			for _, f := range a.RedactFields {
				if !slices.Contains(names, f) {
					names = append(names, f)
				}
			}
		}
	}
	return names
}

// hasMember reports whether canonical JSON holds an object member (at any
// depth) with one of names.
func hasMember(canonical json.RawMessage, names []string) bool {
	// The byte scan first: most results name no redacted member at all,
	// and then nothing needs decoding.
	if !mayName(canonical, names) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(canonical))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		// In an object, keys and values alternate; a string token that is a
		// key comes right after '{' or a value. Checking every string is
		// simpler and only errs towards looking the action up.
		if str, ok := tok.(string); ok && slices.Contains(names, str) {
			return true
		}
	}
}

// redactResult applies the redact_fields of key's action to a result. A
// result holding no member that any action redacts is returned as it is,
// without looking the operation's action up: MarkSucceeded then stays one
// statement.
func (s *Service) redactResult(ctx context.Context, tenant, key string, result json.RawMessage) (json.RawMessage, error) {
	if result == nil || len(s.redacts) == 0 || !hasMember(result, s.redacts) {
		return result, nil
	}
	op, err := s.store.Get(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	act, ok := s.actionPolicy(op.Action)
	if !ok {
		return nil, opjournal.Errorf(opjournal.CodeUnknownAction, "action_type", "%q has no policy on this server", op.Action)
	}
	return redact(result, act.RedactFields)
}
