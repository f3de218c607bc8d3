package opjournal

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
)

// Operation keys. The advice of docs/spec.md: in production an operation key is
// opaque and random, made ONCE per business intent by orchestrator code
// (never by the model) and stored with the intent, so that every retry
// sends the same key; the business links (order, customer) go in refs,
// beside the key. A side effect inside a handler (the receipt email of a
// payment, an analytics event, a webhook) is an operation of its own with
// a key derived from its parent's, so that a retry of the parent derives
// the same child key and the child is not sent twice.
//
// Every SDK derives keys the same way; protocol/testdata/keys.json holds vectors
// that the Go, Python and TypeScript suites check.

// KeyPrefix starts every key NewKey and ChildKey make.
const KeyPrefix = "op_"

// keyEncoding is lowercase base32 (RFC 4648) without padding: 26
// characters for 128 bits, safe in URLs and headers, case-insensitive.
var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// childKeyDomain separates child-key hashes from every other use of SHA-256.
const childKeyDomain = "opjournal child key v1"

// NewKey returns a new opaque operation key: "op_" and 128 random bits in
// lowercase base32 (29 characters). Make it once per business intent and
// store it with the intent; a retry must send the same key, so never make
// a new one for a retry.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return KeyPrefix + keyEncoding.EncodeToString(b[:])
}

// ChildKey derives the key of a side effect of the operation parent: the
// same parent and name always give the same key, so a retried handler
// registers the same child instead of a second one. name says which side
// effect ("receipt_email"): 1–64 characters of [a-z0-9_.-]. The key is
// "op_" and the first 128 bits of SHA-256 over a domain tag, the parent
// key and the name, in lowercase base32; record the parent with the child
// (Register's parent_key) to find it again.
func ChildKey(parent, name string) (string, error) {
	if parent == "" || len(parent) > MaxKeyLen {
		return "", Errorf(CodeInvalidArgument, "parent_key", "must be 1–%d characters", MaxKeyLen)
	}
	if err := checkChildName(name); err != nil {
		return "", err
	}
	h := sha256.New()
	// Length-prefixed, so that no other (parent, name) split of the same
	// bytes gives the same key.
	fmt.Fprintf(h, "%s\x00%d:%s\x00%d:%s", childKeyDomain, len(parent), parent, len(name), name)
	return KeyPrefix + keyEncoding.EncodeToString(h.Sum(nil)[:16]), nil
}

func checkChildName(name string) error {
	ok := name != "" && len(name) <= MaxChildNameLen
	for i := 0; ok && i < len(name); i++ {
		ok = isNameChar(name[i])
	}
	if !ok {
		return Errorf(CodeInvalidArgument, "name", "must be 1–%d characters of a-z, 0-9, '_', '.' and '-'", MaxChildNameLen)
	}
	return nil
}
