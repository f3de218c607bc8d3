package canonjson

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Member names equal under case folding. RFC 8785 compares names byte for
// byte, so {"amount_minor":100,"Amount_Minor":99999999} is a valid request
// with two members, and its hash (and an approval's CEL) reads 100. But a
// provider that decodes with Go's encoding/json matches names to its
// fields case-insensitively and keeps the last one: it charges 99999999.
// A request payload ([Request], [RequestHash], [StructRequest]) therefore
// refuses two names of one object that fold to the same text, at any
// depth, null-valued members included (the provider reads them too).
// Results are not requests, so [Canonicalize] alone keeps such names.
//
// The folding covers both rules a decoder is known to use:
// strings.EqualFold's (Unicode simple case folding: every rune of an
// orbit of unicode.SimpleFold is one) and encoding/json's own (each rune
// as unicode.ToUpper(unicode.ToLower(r)), which also folds the dotted
// capital I, U+0130, onto "I"). foldRune maps a rune first by the latter,
// then to the smallest rune of the result's orbit, so two names that
// either rule calls equal have equal keys (fold_test.go checks every rune).

// ErrDuplicateName is the cause of an [*Error] for a member name that an
// object repeats, exactly or (in a request payload) under case folding:
// errors.Is(err, ErrDuplicateName) tells it from other refusals.
var ErrDuplicateName = errors.New("duplicate member name")

// msgFoldedName is the refusal of a name equal to an earlier one of the
// same object under case folding. It never quotes the names (they are in
// the Path).
const msgFoldedName = "this member name equals another member name of the same object under case folding; " +
	"a provider that matches names case-insensitively (Go's encoding/json) could read a value the request hash does not, so it is refused"

// foldRune is the case-folding key of r.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		}
		return r
	}
	r = unicode.ToUpper(unicode.ToLower(r))
	low := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		low = min(low, f)
	}
	return low
}

// foldEqual reports whether a and b (valid UTF-8) have the same folding
// key, without allocating.
func foldEqual(a, b string) bool {
	for a != "" && b != "" {
		var ra, rb rune
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			ra, rb = rune(a[0]), rune(b[0])
			a, b = a[1:], b[1:]
		} else {
			var na, nb int
			ra, na = utf8.DecodeRuneInString(a)
			rb, nb = utf8.DecodeRuneInString(b)
			a, b = a[na:], b[nb:]
		}
		if ra != rb && foldRune(ra) != foldRune(rb) {
			return false
		}
	}
	return a == "" && b == ""
}

// foldKey is the folding key of name: equal keys, equal names under
// case folding.
func foldKey(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

// smallObject is the member count up to which names are compared pair by
// pair (no allocation) rather than through a set of folding keys.
const smallObject = 16

// foldedNames finds names of one object that are equal under case
// folding. The zero value is ready; reset it for each object.
type foldedNames struct {
	names []string
	keys  map[string]struct{}
}

// seen records name and reports whether an earlier name of the object
// folds to the same key.
func (f *foldedNames) seen(name string) bool {
	if f.keys == nil && len(f.names) < smallObject {
		for _, n := range f.names {
			if foldEqual(n, name) {
				return true
			}
		}
		f.names = append(f.names, name)
		return false
	}
	if f.keys == nil {
		f.keys = make(map[string]struct{}, 2*smallObject)
		for _, n := range f.names {
			f.keys[foldKey(n)] = struct{}{}
		}
	}
	k := foldKey(name)
	if _, dup := f.keys[k]; dup {
		return true
	}
	f.keys[k] = struct{}{}
	return false
}
