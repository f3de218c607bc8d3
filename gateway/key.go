package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"

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

// maxClientKeyLen bounds the client's Idempotency-Key (as Stripe): the
// characters of the key itself, without the quotes of a structured-field
// string.
const maxClientKeyLen = 255

// The client's key header is read as draft-ietf-httpapi-idempotency-key-header
// defines it: an Item Structured Header Field (RFC 8941/9651) whose value is
// a String, such as
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// Clients written for Stripe and its imitators send the key bare, without
// quotes (stripe-node, stripe-python), and the gateway fronts exactly those
// APIs, so a value that does not start with a quote is read as it always
// was: its visible ASCII characters are the key. A value that starts with
// a quote is a structured-field string and nothing else: an unterminated
// quote, an escape other than \" and \\, parameters (";a=1") or anything
// after the string is refused, never taken for a bare key.
//
// The key's text in the operation key is the field value as sent, quotes
// included: "abc" and abc are two keys. A quoted key was read as its
// bytes, quotes and all, before the header was parsed as a structured
// field, and a retry that spans an upgrade of the gateway must keep its
// operation key (or it would be sent again); an sf-string without
// parameters has one spelling, so its bytes are its serialization.

// readClientKey reads the client's key from the header's field lines
// (http.Header.Values) and returns its text for the operation key, or
// says what is wrong with it (never quoting it).
func readClientKey(lines []string) (string, error) {
	if len(lines) != 1 {
		// Several field lines are one value joined by commas: a list, never
		// an Item (and clients must send one field).
		return "", fmt.Errorf("was sent %d times; send it once", len(lines))
	}
	v := strings.Trim(lines[0], " \t") // HTTP's optional whitespace, which net/http mostly trims already
	if !strings.HasPrefix(v, `"`) {
		return v, checkBareKey(v)
	}
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err != nil {
		return "", errors.New("starts with a quote but is not one structured-field string (RFC 8941 sf-string: printable ASCII between two quotes, \\\" and \\\\ as the only escapes, nothing after it)")
	}
	s, ok := item.Value.(string)
	if !ok {
		return "", errors.New("is not a structured-field string")
	}
	if len(item.Params.Names()) > 0 {
		return "", errors.New("has parameters (;name=value) after the string; the key is the string alone")
	}
	if s == "" || len(s) > maxClientKeyLen {
		return "", fmt.Errorf("must hold 1-%d characters between its quotes", maxClientKeyLen)
	}
	text, err := httpsfv.Marshal(httpsfv.NewItem(s))
	if err != nil { // unreachable: the string was just parsed
		return "", errors.New("is not a structured-field string")
	}
	return text, nil
}

// checkBareKey checks a key sent without quotes: 1-255 visible ASCII
// characters.
func checkBareKey(key string) error {
	if key == "" || len(key) > maxClientKeyLen {
		return fmt.Errorf("must be 1-%d characters", maxClientKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return fmt.Errorf("has a byte 0x%02x at offset %d; only visible ASCII characters are allowed, or a quoted structured-field string", key[i], i)
		}
	}
	return nil
}

// clientKey makes the operation key of a client's key text
// (readClientKey). A key the journal cannot hold as it is (longer than
// its keys, or a quoted key with a space, which the journal's keys never
// have) is shortened to a hash of the client's key.
func clientKey(door, action, scope, key string) string {
	k := door + ":" + action + ":" + scope + ":" + key
	if len(k) > opjournal.MaxKeyLen || strings.ContainsRune(key, ' ') {
		sum := sha256.Sum256([]byte(key))
		k = door + ":" + action + ":" + scope + ":h:" + hex.EncodeToString(sum[:20])
	}
	return k
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
