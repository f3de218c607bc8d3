package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// Keys. An operation key made by the gateway is
//
//	http:ACTION:SCOPE:CLIENT-KEY          from the client's Idempotency-Key
//	http:ACTION:SCOPE:f:HASH              derived from the route's key_fields
//	mcp:ACTION:SCOPE:f:HASH               derived from the tool's key_fields
//
// SCOPE says whose key it is: the caller's principal (identity.go), never
// a credential. So two callers' "1" are two intents, and one caller's
// rotated or refreshed credential is the same caller. HASH is 32 hex digits of SHA-256
// over the key fields and their values as canonical JSON: the same intent
// gives the same key whatever else the call says (never the model's
// wording or the JSON-RPC id, which change when a model retries). A key
// longer than the journal allows is shortened to a hash of the client's
// key.

// maxClientKeyLen bounds the client's Idempotency-Key (as Stripe).
const maxClientKeyLen = 255

// clientKey makes the operation key of a client's idempotency key, or
// says what is wrong with it (never quoting it).
func clientKey(door, action, scope, key string) (string, error) {
	if key == "" || len(key) > maxClientKeyLen {
		return "", fmt.Errorf("must be 1-%d characters", maxClientKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", fmt.Errorf("has a byte 0x%02x at offset %d; only visible ASCII characters are allowed", key[i], i)
		}
	}
	k := door + ":" + action + ":" + scope + ":" + key
	if len(k) > opjournal.MaxKeyLen {
		sum := sha256.Sum256([]byte(key))
		k = door + ":" + action + ":" + scope + ":h:" + hex.EncodeToString(sum[:20])
	}
	return k, nil
}

// fieldsKey derives the operation key from the values of fields in obj.
// It returns the name of the first missing field instead when one is.
func fieldsKey(door, action, scope string, fields []string, obj map[string]any) (key, missing string) {
	picked := map[string]any{}
	for _, f := range fields {
		v, ok := obj[f]
		if !ok || v == nil {
			return "", f
		}
		picked[f] = v
	}
	b, err := json.Marshal(picked)
	if err != nil {
		return "", fields[0]
	}
	// The same RFC 8785 form as the request hash: 817, 817.0 and 8.17e2
	// are one number, so one key (json.Number alone keeps each text).
	if b, err = canonjson.Canonicalize(b, canonjson.Options{}); err != nil {
		return "", fields[0]
	}
	sum := sha256.Sum256(b)
	return door + ":" + action + ":" + scope + ":f:" + hex.EncodeToString(sum[:16]), ""
}

// refsOf returns the key fields whose name and value make valid refs
// (strings and numbers), so operators find the operation by them.
func refsOf(fields []string, obj map[string]any) map[string]string {
	refs := map[string]string{}
	for _, f := range fields {
		var v string
		switch x := obj[f].(type) {
		case string:
			v = x
		case json.Number:
			// The canonical text, as in the key: the journal binds refs
			// to the operation, so 817.0 must read as 817 here too.
			c, err := canonjson.Canonicalize([]byte(x), canonjson.Options{})
			if err != nil {
				continue
			}
			v = string(c)
		default:
			continue
		}
		if opjournal.ValidRefName(f) {
			refs[f] = v
		}
	}
	if len(refs) == 0 || opjournal.CheckRefs(refs) != nil {
		return nil
	}
	return refs
}

// decodeObject parses a JSON object keeping numbers exact; ok is false
// when body is not one object.
func decodeObject(body []byte) (map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil || dec.More() {
		return nil, false
	}
	return obj, true
}

// pick returns the members of obj as a JSON object: the request hash
// covers all of them, since all of them are sent.
func pick(obj map[string]any) (json.RawMessage, error) {
	return json.Marshal(obj)
}
