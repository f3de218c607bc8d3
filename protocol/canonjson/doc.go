// Package canonjson turns a JSON document into the one byte sequence that
// every opjournal client, in any language, hashes for the same request.
//
// The canonical form is RFC 8785 (JSON Canonicalization Scheme, JCS): no
// whitespace, object members sorted by their UTF-16 code units, strings in
// their shortest escaping, and numbers printed the way ECMAScript prints an
// IEEE 754 double ("4.9e5" becomes "490000", "1.0" becomes "1"). The final
// formatting step is done by jsontext's RFC 8785 implementation; this package
// adds the validation and the two rules below that JCS itself leaves open.
//
// # Guarantees
//
// For every input that [Canonicalize] accepts, the output is valid JSON,
// contains no object member whose value is null, and is a fixed point:
// canonicalising it again returns the same bytes. Two inputs that differ only
// in member order, whitespace, escaping, number spelling ("1.0" vs "1",
// "4.9e5" vs "490000", "-0" vs "0") or null-valued members yield the same
// output and so the same [RequestHash]. Strings are compared byte for byte
// after unescaping: JCS does not apply Unicode normalisation, so NFC and NFD
// spellings of the same text are different requests.
//
// Every rejection is an [*Error] carrying an RFC 6901 JSON pointer to the
// offending value. Input is rejected when it is not a single valid JSON value,
// is not valid UTF-8 (lone surrogate escapes included), repeats a member name
// within one object (I-JSON, which RFC 8785 requires), or nests objects and
// arrays deeper than [MaxDepth]. A request payload ([Request],
// [RequestHash], [StructRequest]) is refused, too, when two member names of
// one object are equal under case folding ("amount_minor" and
// "Amount_Minor", "kind" and "\u212aind"): a provider decoding with Go's
// encoding/json reads them as one member, the last, which the hash would
// not have read (fold.go). Such a refusal wraps [ErrDuplicateName], as an
// exact duplicate's does.
//
// # Why null members are removed
//
// Clients serialise "field not set" differently: some omit the member, some
// write null. Both mean the same request, so they must hash the same, and the
// only stable choice is to drop null-valued members (at any depth; an object
// emptied that way stays {}). Null elements of arrays are kept, because
// dropping them would shift the positions of the elements after them and
// change the meaning of the array.
//
// # Why some numbers are rejected
//
// JCS reads every number as an IEEE 754 double, and so do JavaScript and most
// JSON libraries. A number the double cannot hold is therefore silently
// changed by some client before it is hashed, and two different requests (for
// example amounts 9007199254740992 and 9007199254740993) would get the same
// hash, or one client would compute a different hash from another. Such
// numbers are rejected instead of rounded:
//
//   - a number whose magnitude overflows a double (1e309);
//   - a number whose magnitude, as a double, exceeds [MaxSafeInteger]
//     (2^53-1). Every integer beyond it (9007199254740993, 1e16) falls here,
//     and so does a non-integer such as 9007199254740992.5, which a double
//     would round to an integer beyond the safe range.
//
// Fractions inside the safe range (0.1, 5e-324) are accepted and rounded to
// the nearest double exactly as RFC 8785 prescribes; every client does the
// same rounding, so the hash stays stable. A non-zero number too small for a
// double (1e-400) becomes 0 for the same reason.
//
// Members named in [Options].IntegerFields (such as amount_minor) must hold
// a number that is an exact integer. Integer-ness is decided from the decimal
// text, not from the rounded double, so 4.9e5 and 490000.0 are integers while
// 4900.5 and 4900.0000000000000001 are not.
//
// # Structs
//
// [CanonicalizeStruct], [CanonicalizeValue] and [StructRequest] take a
// google.protobuf.Struct (how the gRPC API carries payloads and results)
// instead of text and return byte for byte what [Canonicalize] and
// [Request] return for its JSON text, refusing what they refuse with the
// same [*Error], without rendering the text and parsing it again. A Struct
// holds numbers as doubles, so the integer check is made on the double
// (exact for every number within ±MaxSafeInteger); a NaN, an infinity or a
// Value with no kind, which no JSON text can hold, is refused.
package canonjson
