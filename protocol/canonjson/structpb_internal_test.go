package canonjson

import (
	"cmp"
	"slices"
	"testing"
	"unicode/utf16"
)

// TestCompareUTF16 holds compareUTF16 to the definition, comparing the
// strings' UTF-16 encodings, on every pair of short strings made of
// characters from each side of the places where UTF-8 and UTF-16 order
// could part: ASCII, the 2- and 3-byte ranges, both sides of the
// surrogate block, U+E000..U+FFFF and the supplementary planes.
func TestCompareUTF16(t *testing.T) {
	runes := []rune{'a', 'b', 0x7f, 0x80, 0xf6, 0x7ff, 0x800, 0x20ac, 0xd7ff, 0xe000, 0xfb33, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x1f601, 0x10ffff}
	strs := []string{""}
	for _, r := range runes {
		strs = append(strs, string(r), "a"+string(r), string(r)+"a")
		for _, r2 := range runes[len(runes)-4:] {
			strs = append(strs, string(r)+string(r2))
		}
	}
	for _, a := range strs {
		for _, b := range strs {
			want := slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
			if got := compareUTF16(a, b); cmp.Compare(got, 0) != want {
				t.Errorf("compareUTF16(%+q, %+q) = %d, want the sign of %d", a, b, got, want)
			}
		}
	}
}
