package canonjson

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxSafeInteger is 2^53−1, the largest integer every JSON implementation carries exactly.
// Numbers whose magnitude exceeds it are rejected by [Canonicalize] and [RequestHash].
const MaxSafeInteger = 1<<53 - 1

// MaxDepth is the deepest nesting of objects/arrays accepted: a document
// nesting more containers than this is rejected with an [*Error].
const MaxDepth = 64

// Error describes why a JSON document was rejected. Path is an RFC 6901 JSON pointer
// to the offending value relative to the document root ("" for the root, "/amount_minor",
// "/items/0/amount_minor"). Msg says what is wrong with that value.
type Error struct {
	Path string
	Msg  string
	// cause is what errors.Is finds ([ErrDuplicateName]), nil for most.
	cause error
}

// Unwrap returns the refusal's cause: [ErrDuplicateName] for a repeated
// member name, nil otherwise.
func (e *Error) Unwrap() error { return e.cause }

// Error returns "Path: Msg", e.g. `/amount_minor: 4900.5 is not an integer`,
// or Msg alone when the problem is at the document root (Path "").
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Options control validation. The zero value applies only the rules that
// hold for every document.
type Options struct {
	// IntegerFields names object members (at any depth) that must hold exact integers within ±MaxSafeInteger.
	// A null value is removed like any other null member; any other non-integer value is an [*Error].
	IntegerFields []string
}

// Canonicalize validates raw JSON as described in the package documentation,
// removes null-valued members at any depth and returns the RFC 8785 canonical
// form. On failure it returns a nil slice and an [*Error] (syntax errors
// included) whose Path points at the offending value.
func Canonicalize(raw []byte, opts Options) ([]byte, error) {
	return canonicalize(raw, opts, false)
}

// canonicalize is Canonicalize; request says raw is a request payload,
// which also refuses member names equal under case folding (fold.go).
func canonicalize(raw []byte, opts Options, request bool) ([]byte, error) {
	var buf bytes.Buffer
	c := canonicalizer{
		dec:       jsontext.NewDecoder(bytes.NewReader(raw)), // rejects duplicate names and invalid UTF-8 by default
		enc:       jsontext.NewEncoder(&buf),
		foldNames: request,
	}
	if len(opts.IntegerFields) > 0 {
		c.intFields = make(map[string]bool, len(opts.IntegerFields))
		for _, name := range opts.IntegerFields {
			c.intFields[name] = true
		}
	}

	if err := c.copyValue(1, false); err != nil {
		return nil, err
	}
	// The decoder accepts a stream of values; a journal request is exactly one.
	if _, err := c.dec.ReadToken(); err != io.EOF {
		return nil, &Error{Msg: fmt.Sprintf("unexpected data after the JSON value, which ends at byte offset %d", c.dec.InputOffset())}
	}

	// The copy is compact and null-free; RFC 8785 formatting (member order,
	// string escaping, ES6 number form) is left to jsontext. Its output for
	// numbers is safe because copyValue rejected every number it would clamp.
	out := jsontext.Value(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if err := out.Canonicalize(); err != nil {
		return nil, &Error{Msg: "internal error: canonicalizing validated JSON: " + err.Error()}
	}
	return out, nil
}

// RequestHash validates payload (it must be a JSON object, else *Error with Path "" and Msg
// "must be a JSON object"), and returns the lowercase hex SHA-256 of the canonical JSON of
// {"action": action, "payload": <payload without nulls>} together with the canonical payload
// bytes (which the journal stores). action is hashed as a JSON string.
// On failure it returns "", nil and an [*Error]: the one from [Canonicalize] for an invalid
// payload, or Path "" and Msg "action is not valid UTF-8" for an action that cannot be a JSON string.
func RequestHash(action string, payload []byte, opts Options) (hash string, canonicalPayload []byte, err error) {
	envelope, canonicalPayload, err := Request(action, payload, opts)
	if err != nil {
		return "", nil, err
	}
	return Hash(envelope), canonicalPayload, nil
}

// Request validates payload as RequestHash does and returns the canonical
// JSON of {"action": action, "payload": <payload without nulls>} (the
// bytes the request hash is computed over) and the canonical payload.
// Beyond Canonicalize's rules, a payload whose object has two member
// names equal under case folding is refused (fold.go), with
// [ErrDuplicateName] as the [*Error]'s cause.
func Request(action string, payload []byte, opts Options) (envelope, canonicalPayload []byte, err error) {
	canonicalPayload, err = canonicalize(payload, opts, true)
	if err != nil {
		return nil, nil, err
	}
	if jsontext.Value(canonicalPayload).Kind() != '{' {
		return nil, nil, &Error{Msg: "must be a JSON object"}
	}

	quotedAction, err := jsontext.AppendQuote(nil, action)
	if err != nil {
		return nil, nil, &Error{Msg: "action is not valid UTF-8"}
	}
	env := jsontext.Value(`{"action":` + string(quotedAction) + `,"payload":` + string(canonicalPayload) + `}`)
	// Canonicalizing the envelope, rather than trusting the member order and
	// string escaping written above, keeps the hash RFC 8785 by construction.
	if err := env.Canonicalize(); err != nil {
		return nil, nil, &Error{Msg: "internal error: canonicalizing the request envelope: " + err.Error()}
	}
	return env, canonicalPayload, nil
}

// Hash is the request hash of docs/spec.md of an envelope made by Request: its
// lowercase hex SHA-256.
func Hash(envelope []byte) string {
	sum := sha256.Sum256(envelope)
	return hex.EncodeToString(sum[:])
}

// KeyedHash is the keyed request hash of an envelope made by Request: the
// lowercase hex HMAC-SHA256 under key. The journal uses it for actions
// with redact_fields: without the key, nobody can confirm a guess of a
// redacted value (a CVC has only 1,000) against the hash.
func KeyedHash(key, envelope []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(envelope)
	return hex.EncodeToString(m.Sum(nil))
}

// canonicalizer copies one JSON value token by token from dec to enc,
// validating it and dropping null-valued members on the way.
type canonicalizer struct {
	dec       *jsontext.Decoder
	enc       *jsontext.Encoder
	intFields map[string]bool
	// foldNames refuses member names equal under case folding (requests).
	foldNames bool
}

// copyValue copies the next value. depth is the nesting depth the value has
// if it is an object or array (the root container is at depth 1). intField
// says the value belongs to a member named in Options.IntegerFields.
// Recursion is bounded by MaxDepth, so hostile nesting cannot exhaust the stack.
func (c *canonicalizer) copyValue(depth int, intField bool) error {
	switch c.dec.PeekKind() {
	case '{', '[':
		tok, err := c.dec.ReadToken()
		if err != nil {
			return c.syntaxError(err)
		}
		kind := tok.Kind()
		if intField {
			return c.errorf("%s", notAnInteger(kind))
		}
		if depth > MaxDepth {
			return c.errorf("%s", tooDeep)
		}
		if err := c.enc.WriteToken(tok); err != nil {
			return c.errorf("internal error: %v", err)
		}
		if kind == '{' {
			return c.copyMembers(depth)
		}
		return c.copyElements(depth)
	default:
		val, err := c.dec.ReadValue()
		if err != nil {
			return c.syntaxError(err)
		}
		kind := val.Kind()
		switch {
		case kind == '0':
			if msg := checkNumber(val, intField); msg != "" {
				return c.errorf("%s", msg)
			}
		case intField:
			// A null never gets here: copyMembers drops null members first.
			return c.errorf("%s", notAnInteger(kind))
		}
		if err := c.enc.WriteValue(val); err != nil {
			return c.errorf("internal error: %v", err)
		}
		return nil
	}
}

// copyMembers copies the members of an object whose '{' was just read.
func (c *canonicalizer) copyMembers(depth int) error {
	var folded foldedNames
	for c.dec.PeekKind() != '}' {
		nameTok, err := c.dec.ReadToken()
		if err != nil {
			return c.syntaxError(err)
		}
		name := nameTok.String() // unescaped, so "amount\u005fminor" matches amount_minor
		if c.foldNames && folded.seen(name) {
			// Before the null check: a provider reads a null member too.
			e := c.errorf("%s", msgFoldedName)
			e.cause = ErrDuplicateName
			return e
		}
		if c.dec.PeekKind() == 'n' {
			// A null member means "not set": drop name and value so that
			// {"memo": null} and {} are the same request.
			if _, err := c.dec.ReadValue(); err != nil {
				return c.syntaxError(err)
			}
			continue
		}
		if err := c.enc.WriteToken(jsontext.String(name)); err != nil {
			return c.errorf("internal error: %v", err)
		}
		if err := c.copyValue(depth+1, c.intFields[name]); err != nil {
			return err
		}
	}
	return c.copyEnd()
}

// copyElements copies the elements of an array whose '[' was just read.
// Null elements are kept: removing them would shift later positions.
func (c *canonicalizer) copyElements(depth int) error {
	for c.dec.PeekKind() != ']' {
		if err := c.copyValue(depth+1, false); err != nil {
			return err
		}
	}
	return c.copyEnd()
}

// copyEnd copies the '}' or ']' that closes the current container.
func (c *canonicalizer) copyEnd() error {
	tok, err := c.dec.ReadToken()
	if err != nil {
		return c.syntaxError(err)
	}
	if err := c.enc.WriteToken(tok); err != nil {
		return c.errorf("internal error: %v", err)
	}
	return nil
}

// errorf returns an *Error for the value the decoder read last.
func (c *canonicalizer) errorf(format string, args ...any) *Error {
	return &Error{Path: string(c.dec.StackPointer()), Msg: fmt.Sprintf(format, args...)}
}

// syntaxError converts a decoder error into an *Error, keeping jsontext's
// pointer and byte offset, which locate the problem better than we could.
func (c *canonicalizer) syntaxError(err error) *Error {
	if err == io.EOF {
		return &Error{Msg: "invalid JSON: no value in input"}
	}
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		e := &Error{
			Path: string(se.JSONPointer),
			Msg:  fmt.Sprintf("invalid JSON: %s at byte offset %d", withoutQuotes(se.Err.Error()), se.ByteOffset),
		}
		if errors.Is(err, jsontext.ErrDuplicateName) {
			e.cause = ErrDuplicateName
		}
		return e
	}
	return &Error{Path: string(c.dec.StackPointer()), Msg: "invalid JSON: " + withoutQuotes(err.Error())}
}

// quoted matches what a decoder's message quotes from the input.
var quoted = regexp.MustCompile(`'[^']*'|"[^"]*"|` + "`[^`]*`")

// withoutQuotes removes the input's characters that a decoder quotes in
// its message ("invalid character 'x'"): they may be part of a secret,
// and errors reach logs.
func withoutQuotes(msg string) string {
	return quoted.ReplaceAllString(msg, "(a character)")
}

// checkNumber returns why the JSON number num cannot be accepted, or "".
// jsontext's Canonicalize would clamp an overflowing number to ±MaxFloat64
// and print integers beyond 2^53 rounded, so both are caught here first.
func checkNumber(num []byte, intField bool) string {
	f, _ := strconv.ParseFloat(string(num), 64) // the decoder already checked the grammar
	return numberProblem(f, intField && !isIntegerText(num))
}

// numberProblem returns why a number whose double is f cannot be accepted,
// or "". notInteger says the number belongs to a member of
// Options.IntegerFields and is not an exact integer. checkNumber (JSON
// text) and the Struct path (doubles) share it, so both refuse the same
// numbers with the same words.
func numberProblem(f float64, notInteger bool) string {
	switch {
	// The messages never quote the number: it is a payload value, which may
	// be a secret (a card number), and errors reach logs.
	case math.IsInf(f, 0):
		return "is a number that overflows a 64-bit float"
	case math.Abs(f) > MaxSafeInteger:
		// Covers every integer beyond the safe range, and non-integers that
		// a double would round to such an integer (9007199254740992.5).
		return fmt.Sprintf("is a number outside ±%d (2^53-1), beyond what JSON carries exactly; send it as a string", MaxSafeInteger)
	case notInteger:
		return "is not an integer: the policy makes this member an exact integer (money in minor units), and a fraction is never rounded"
	}
	return ""
}

// isIntegerText reports whether the JSON number num is mathematically an
// integer, judged from its decimal digits rather than from a rounded double
// (4900.0000000000000001 is not an integer even though it parses as 4900).
func isIntegerText(num []byte) bool {
	s := strings.TrimPrefix(string(num), "-")
	mantissa, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mantissa = s[:i]
		e, err := strconv.Atoi(s[i+1:])
		if err != nil {
			// Too many exponent digits for an int: saturate; the result
			// only needs to lie outside the mantissa's length either way.
			e = math.MaxInt32
			if strings.HasPrefix(s[i+1:], "-") {
				e = math.MinInt32
			}
		}
		exp = max(min(e, math.MaxInt32), math.MinInt32)
	}
	intPart, fracPart, _ := strings.Cut(mantissa, ".")
	digits := intPart + fracPart
	// The decimal point sits after `point` digits; every digit after it must be 0.
	point := len(intPart) + exp
	point = max(point, 0)
	if point >= len(digits) {
		return true
	}
	return strings.Trim(digits[point:], "0") == ""
}

// tooDeep is the message for a container nested deeper than MaxDepth.
var tooDeep = fmt.Sprintf("nesting exceeds the maximum depth of %d", MaxDepth)

// notAnInteger is the message for a value of kind k in a member of
// Options.IntegerFields that is not a number.
func notAnInteger(k jsontext.Kind) string { return "must be an integer, got " + kindName(k) }

// kindName names a JSON kind for error messages.
func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}
