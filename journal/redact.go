package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/canonjson"
	"github.com/opjournal/opjournal/policy"
)

// Redacted replaces the value of every redact_fields member in what the
// journal stores.
const Redacted = "[redacted]"

// redact returns canonical JSON with the values of members named in fields
// (at any depth) replaced by Redacted. The input is canonical JSON the
// journal produced, so it decodes; the output is canonical again.
func redact(canonical json.RawMessage, fields []string) (json.RawMessage, error) {
	if len(fields) == 0 || canonical == nil {
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

// anyRedaction reports whether any action of pol redacts anything, so the
// journal pays for looking up an operation's action only when it matters.
func anyRedaction(pol *policy.Policy) bool {
	for _, name := range pol.Names() {
		if a, ok := pol.Action(name); ok && len(a.RedactFields) > 0 {
			return true
		}
	}
	return false
}

// redactResult applies the redact_fields of key's action to a result.
func (s *Service) redactResult(ctx context.Context, tenant, key string, result json.RawMessage) (json.RawMessage, error) {
	if result == nil || !s.redacts {
		return result, nil
	}
	op, err := s.store.Get(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	act, ok := s.policy.Action(op.Action)
	if !ok {
		return nil, opjournal.Errorf(opjournal.CodeUnknownAction, "action_type", "%q has no policy on this server", op.Action)
	}
	return redact(result, act.RedactFields)
}
