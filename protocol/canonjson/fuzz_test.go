package canonjson_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// fuzzSeeds are the seeds of FuzzCanonicalize written here (more live in
// testdata/fuzz/FuzzCanonicalize); FuzzStructCanonical starts from them too.
var fuzzSeeds = []string{
	`{"action":"create_payment","amount_minor":490000,"currency":"RUB","memo":null}`,
	`{"a":{"b":null,"c":1},"d":[null,1]}`,
	`{"numbers":[333333333.33333329,4.50,2e-3,0.000000000000000000000000001,-0,5e-324]}`,
	`{"amount_minor":4.9e5,"items":[{"amount_minor":1},{"amount_minor":null}]}`,
	`{"amount_minor":4900.5}`,
	`{"\u20ac":1,"\r":2,"\ud83d\ude00":3,"\u00f6":{"":[]}}`,
	`[9007199254740991,-9007199254740992,1e309,1e-400]`,
	`{"a":1,"a":2}`,
	"[\"\xff\"]",
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	`{} x`,
	`{"a":{"amount_minor":100,"Amount_Minor":99999999}}`,
	`{"kind":1,"\u212aind":2,"x":[{"id":1,"\u0130d":null}]}`,
}

// FuzzCanonicalize checks, for arbitrary input, that Canonicalize never
// panics and that whatever it accepts is valid JSON, free of null-valued
// members, and a fixed point of Canonicalize. More seeds live in
// testdata/fuzz/FuzzCanonicalize.
func FuzzCanonicalize(f *testing.F) {
	for _, seed := range fuzzSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := canonjson.Canonicalize(in, payments)
		if err != nil {
			if out != nil {
				t.Fatalf("output %q returned with error %v", out, err)
			}
			if _, ok := err.(*canonjson.Error); !ok {
				t.Fatalf("error %v is %T, want *canonjson.Error", err, err)
			}
			return
		}
		if !jsontext.Value(out).IsValid() {
			t.Fatalf("output is not valid JSON: %q", out)
		}
		again, err := canonjson.Canonicalize(out, payments)
		if err != nil {
			t.Fatalf("output %q rejected on second pass: %v", out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n first %q\nsecond %q", out, again)
		}
		if ptr := nullMember(t, out); ptr != "" {
			t.Fatalf("output %q has a null-valued member at %q", out, ptr)
		}
	})
}

// nullMember returns the pointer of the first object member in doc whose
// value is null, or "" if there is none.
func nullMember(t *testing.T, doc []byte) jsontext.Pointer {
	t.Helper()
	d := jsontext.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.ReadToken()
		if err == io.EOF {
			return ""
		}
		if err != nil {
			t.Fatalf("re-reading output %q: %v", doc, err)
		}
		if tok.Kind() == 'n' {
			if kind, _ := d.StackIndex(d.StackDepth()); kind == '{' {
				return d.StackPointer()
			}
		}
	}
}
