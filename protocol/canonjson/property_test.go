package canonjson_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"pgregory.net/rapid"
)

// TestNullMemberHelper makes sure the fuzz target's null check can fail.
func TestNullMemberHelper(t *testing.T) {
	if got := nullMember(t, []byte(`{"a":[null,{"b":{"c":null}}]}`)); got != "/a/1/b/c" {
		t.Errorf("nullMember = %q, want /a/1/b/c", got)
	}
	if got := nullMember(t, []byte(`[null,{"a":[null]}]`)); got != "" {
		t.Errorf("nullMember = %q, want none", got)
	}
}

// member is one object member of a generated document.
type member struct {
	name  string
	value node
}

// node is a generated JSON value that can be written in many equivalent
// spellings: members in any order, strings escaped or not, numbers in
// several notations, null members present or absent.
type node struct {
	kind    byte    // 'n', 't', 'f', '"', 'i' (integer), '0' (other number), '{', '['
	str     string  // for '"'
	num     float64 // for 'i' and '0'
	members []member
	elems   []node
}

func genNode(t *rapid.T, depth int) node {
	kinds := "ntf\"i0"
	if depth < 4 {
		kinds += "{["
	}
	n := node{kind: rapid.SampledFrom([]byte(kinds)).Draw(t, "kind")}
	switch n.kind {
	case '"':
		n.str = rapid.String().Draw(t, "str")
	case 'i':
		n.num = float64(rapid.Int64Range(-canonjson.MaxSafeInteger, canonjson.MaxSafeInteger).Draw(t, "int"))
	case '0':
		n.num = rapid.Float64Range(-canonjson.MaxSafeInteger, canonjson.MaxSafeInteger).Draw(t, "float")
	case '{':
		names := rapid.SliceOfDistinct(rapid.StringMatching(`[a-z\x{e9}\x{20ac}\x{1f600}]{0,3}`), rapid.ID[string]).Draw(t, "names")
		for _, name := range names {
			n.members = append(n.members, member{name, genNode(t, depth+1)})
		}
	case '[':
		for range rapid.IntRange(0, 4).Draw(t, "len") {
			n.elems = append(n.elems, genNode(t, depth+1))
		}
	}
	return n
}

// spell writes n as JSON, choosing among equivalent spellings with t.
func spell(t *rapid.T, b *strings.Builder, n node) {
	ws := func() { b.WriteString(rapid.SampledFrom([]string{"", " ", "\n\t"}).Draw(t, "ws")) }
	switch n.kind {
	case 'n':
		b.WriteString("null")
	case 't':
		b.WriteString("true")
	case 'f':
		b.WriteString("false")
	case '"':
		spellString(t, b, n.str)
	case 'i':
		b.WriteString(rapid.SampledFrom([]string{
			strconv.FormatFloat(n.num, 'f', -1, 64),
			strconv.FormatFloat(n.num, 'f', -1, 64) + ".000",
			strconv.FormatFloat(n.num, 'e', -1, 64),
			strconv.FormatFloat(n.num, 'f', -1, 64) + "E+0",
		}).Draw(t, "intSpelling"))
	case '0':
		b.WriteString(rapid.SampledFrom([]string{
			strconv.FormatFloat(n.num, 'g', -1, 64),
			strconv.FormatFloat(n.num, 'e', 25, 64),
			strings.ToUpper(strconv.FormatFloat(n.num, 'E', -1, 64)),
		}).Draw(t, "floatSpelling"))
	case '{':
		b.WriteString("{")
		order := rapid.Permutation(n.members).Draw(t, "order")
		first := true
		for _, m := range order {
			if !first {
				b.WriteString(",")
			}
			first = false
			ws()
			spellString(t, b, m.name)
			b.WriteString(":")
			ws()
			spell(t, b, m.value)
		}
		// Extra null members must not change the result.
		if rapid.Bool().Draw(t, "extraNull") {
			if !first {
				b.WriteString(",")
			}
			b.WriteString(`"extra_null_member":null`)
		}
		b.WriteString("}")
	case '[':
		b.WriteString("[")
		for i, e := range n.elems {
			if i > 0 {
				b.WriteString(",")
			}
			ws()
			spell(t, b, e)
		}
		b.WriteString("]")
	}
}

// spellString writes s as a JSON string, either minimally escaped or with
// every non-ASCII character as a \u escape.
func spellString(t *rapid.T, b *strings.Builder, s string) {
	if rapid.Bool().Draw(t, "escapeAll") {
		b.WriteString(`"`)
		for _, r := range s {
			if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
				for _, u := range utf16(r) {
					b.WriteString(`\u` + strconv.FormatUint(uint64(u)+0x10000, 16)[1:])
				}
			} else {
				b.WriteRune(r)
			}
		}
		b.WriteString(`"`)
		return
	}
	q, _ := jsontext.AppendQuote(nil, s)
	b.Write(q)
}

func utf16(r rune) []uint16 {
	if r < 0x10000 {
		return []uint16{uint16(r)}
	}
	r -= 0x10000
	return []uint16{uint16(0xd800 + r>>10), uint16(0xdc00 + r&0x3ff)}
}

// TestEquivalentSpellings checks that every spelling of the same document
// canonicalizes to the same bytes, and that the result is a fixed point.
func TestEquivalentSpellings(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		doc := genNode(t, 0)
		var a, b strings.Builder
		spell(t, &a, doc)
		spell(t, &b, doc)
		ca, err := canonjson.Canonicalize([]byte(a.String()), canonjson.Options{})
		if err != nil {
			t.Fatalf("Canonicalize(%s): %v", a.String(), err)
		}
		cb, err := canonjson.Canonicalize([]byte(b.String()), canonjson.Options{})
		if err != nil {
			t.Fatalf("Canonicalize(%s): %v", b.String(), err)
		}
		if string(ca) != string(cb) {
			t.Fatalf("equivalent documents differ:\n%s -> %s\n%s -> %s", a.String(), ca, b.String(), cb)
		}
		again, err := canonjson.Canonicalize(ca, canonjson.Options{})
		if err != nil || string(again) != string(ca) {
			t.Fatalf("not a fixed point: %s -> %s, %v", ca, again, err)
		}
	})
}
