package canonjson

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestFoldRuneCoversBothRules checks every rune: runes of one
// unicode.SimpleFold orbit (strings.EqualFold's rule) share a folding key,
// and so do runes encoding/json's name folding maps to one rune
// (unicode.ToUpper(unicode.ToLower(r))), so a key never tells apart two
// names either rule calls equal.
func TestFoldRuneCoversBothRules(t *testing.T) {
	byJSON := map[rune]rune{} // encoding/json's folded rune → the key of the first rune mapped to it
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		k := foldRune(r)
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if foldRune(f) != k {
				t.Fatalf("%U and %U are one SimpleFold orbit, keys %U and %U", r, f, k, foldRune(f))
			}
		}
		j := unicode.ToUpper(unicode.ToLower(r))
		if r < utf8.RuneSelf && 'a' <= r && r <= 'z' {
			j = r - 'a' + 'A'
		}
		if prev, ok := byJSON[j]; ok && prev != k {
			t.Fatalf("%U folds to %U for encoding/json, key %U; another rune folding to it has key %U", r, j, k, prev)
		}
		byJSON[j] = k
	}
}

// TestFoldEqual: the pairwise comparison agrees with the keys, for the
// special folds and for names of other lengths.
func TestFoldEqual(t *testing.T) {
	for _, c := range []struct {
		a, b string
		eq   bool
	}{
		{"amount_minor", "Amount_Minor", true},
		{"amount_minor", "AMOUNT_MINOR", true},
		{"kind", "\u212aind", true},     // Kelvin sign
		{"status", "\u017ftatus", true}, // long s
		{"id", "\u0130d", true},         // encoding/json folds İ onto I
		{"σ", "ς", true},
		{"straße", "STRASSE", false}, // full case folding is not simple folding
		{"a", "ab", false},
		{"", "", true},
		{"é", "É", true},
		{"a_b", "a-b", false},
	} {
		if got := foldEqual(c.a, c.b); got != c.eq {
			t.Errorf("foldEqual(%q, %q) = %v, want %v", c.a, c.b, got, c.eq)
		}
		if got := foldKey(c.a) == foldKey(c.b); got != c.eq {
			t.Errorf("foldKey(%q) == foldKey(%q) is %v, want %v", c.a, c.b, got, c.eq)
		}
		if c.eq && !strings.EqualFold(c.a, c.b) && c.a != "id" && c.a != "straße" {
			t.Errorf("%q and %q: strings.EqualFold disagrees", c.a, c.b)
		}
	}
}

// TestFoldedNamesLargeObject: past smallObject members the set of keys
// takes over and still finds a folded pair.
func TestFoldedNamesLargeObject(t *testing.T) {
	var f foldedNames
	for i := range 40 {
		if f.seen(strings.Repeat("x", i+1)) {
			t.Fatalf("member %d: a false duplicate", i)
		}
	}
	if !f.seen("XXX") || !f.seen(strings.Repeat("X", 40)) {
		t.Fatal("a folded duplicate went unseen past smallObject members")
	}
}
