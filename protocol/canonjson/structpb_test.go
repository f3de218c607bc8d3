package canonjson_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// vector is a JSON input of the package's tests.
type vector struct {
	name string
	in   []byte
}

// vectors returns every JSON input canonjson's tests feed Canonicalize:
// the fuzz corpus in testdata/fuzz/FuzzCanonicalize, FuzzCanonicalize's
// seeds, the RFC 8785 examples and the tables of canonjson_test.go.
func vectors(t testing.TB) []vector {
	t.Helper()
	var vs []vector
	add := func(name, in string) { vs = append(vs, vector{name, []byte(in)}) }

	dir := filepath.Join("testdata", "fuzz", "FuzzCanonicalize")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		vs = append(vs, vector{"corpus/" + e.Name(), readCorpusFile(t, filepath.Join(dir, e.Name()))})
	}
	if len(vs) == 0 {
		t.Fatalf("no corpus in %s", dir)
	}
	for i, s := range fuzzSeeds {
		add("seed/"+strconv.Itoa(i), s)
	}
	add("rfc/structure", rfcStructure)
	add("rfc/structure without 1E30", strings.Replace(rfcStructure, "1E30, ", "", 1))
	add("rfc/sorting", rfcSortingInput)
	for _, s := range rfcNumberSamples {
		f := math.Float64frombits(s.bits)
		add("rfc/number/"+strconv.FormatUint(s.bits, 16), "["+strconv.FormatFloat(f, 'g', -1, 64)+"]")
	}
	for _, c := range nullRemovalCases {
		add("nulls/"+c.in, c.in)
	}
	for _, c := range numbersAccepted {
		add("number/"+c.in, `{"x":[0,`+c.in+`]}`)
	}
	for _, c := range numbersRejected {
		add("number/"+c.in, `{"x":[0,`+c.in+`]}`)
	}
	for _, c := range integerFieldsAccepted {
		add("integer/"+c.in, c.in)
	}
	for _, c := range integerFieldsRejected {
		add("integer/"+c.in, c.in)
	}
	for _, n := range []int{canonjson.MaxDepth, canonjson.MaxDepth + 1} {
		add("depth/arrays/"+strconv.Itoa(n), strings.Repeat("[", n)+"1"+strings.Repeat("]", n))
		add("depth/objects/"+strconv.Itoa(n), strings.Repeat(`{"k":`, n)+"1"+strings.Repeat("}", n))
		add("depth/amount_minor/"+strconv.Itoa(n), `{"amount_minor":`+strings.Repeat("[", n)+strings.Repeat("]", n)+"}")
	}
	return vs
}

// readCorpusFile returns the input held by a file in Go's fuzz corpus
// format: a "go test fuzz v1" line, then one []byte("...") argument.
func readCorpusFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a one-argument corpus file of the go test fuzz v1 format", path)
	}
	arg, ok := strings.CutPrefix(lines[1], "[]byte(")
	if !ok || !strings.HasSuffix(arg, ")") {
		t.Fatalf("%s: the argument is not a []byte: %.40s", path, lines[1])
	}
	s, err := strconv.Unquote(strings.TrimSuffix(arg, ")"))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}

// optionSets are the options every vector is canonicalised under.
var optionSets = []canonjson.Options{{}, payments, integerFieldsOpts}

// actions are request envelopes' actions, one needing escapes.
var actions = []string{"create_payment", "say \"hi\"\n\u2028é😀"}

// valueText is the JSON text of v as the two-step path reads it: protojson's
// rendering, with the members of each object put in canonical order. The
// order changes no output, only which problem Canonicalize meets first in
// a value with several, so that it is the one the Struct path (which
// walks members in canonical order) reports.
func valueText(t testing.TB, v *structpb.Value) []byte {
	t.Helper()
	text, err := protojson.Marshal(v)
	if err != nil {
		t.Fatalf("protojson.Marshal(%v): %v", v, err)
	}
	tv := jsontext.Value(text)
	if err := tv.Format(jsontext.ReorderRawObjects(true)); err != nil {
		t.Fatalf("reordering %s: %v", text, err)
	}
	return tv
}

// checkStructCanonical reads in into a google.protobuf.Value (returning
// false, having checked nothing, for input protojson refuses: a Struct
// cannot hold it) and requires the Struct path to agree with Canonicalize
// on the Value's JSON text under opts: the same bytes, or *Errors with the
// same Path and Msg. For an object it holds StructRequest to Request too.
func checkStructCanonical(t testing.TB, in []byte, opts canonjson.Options) bool {
	t.Helper()
	var v structpb.Value
	if err := protojson.Unmarshal(in, &v); err != nil {
		return false
	}
	text := valueText(t, &v)
	want, werr := canonjson.Canonicalize(text, opts)
	got, err := canonjson.CanonicalizeValue(&v, opts)
	sameOutcome(t, "CanonicalizeValue", text, opts, got, err, want, werr)

	st := v.GetStructValue()
	if st == nil {
		return true
	}
	got, err = canonjson.CanonicalizeStruct(st, opts)
	sameOutcome(t, "CanonicalizeStruct", text, opts, got, err, want, werr)
	for _, action := range actions {
		wantEnv, wantPayload, werr := canonjson.Request(action, text, opts)
		gotEnv, gotPayload, err := canonjson.StructRequest(action, st, opts)
		sameOutcome(t, "StructRequest envelope", text, opts, gotEnv, err, wantEnv, werr)
		sameOutcome(t, "StructRequest payload", text, opts, gotPayload, err, wantPayload, werr)
		if err != nil {
			continue
		}
		if p, ok := canonjson.EnvelopePayload(gotEnv, action); !ok || !bytes.Equal(p, gotPayload) {
			t.Fatalf("EnvelopePayload(%s, %q) = %s, %v; want %s", gotEnv, action, p, ok, gotPayload)
		}
		if p, ok := canonjson.EnvelopePayload(gotEnv, action+"x"); ok {
			t.Fatalf("EnvelopePayload(%s) accepts the action %q: %s", gotEnv, action+"x", p)
		}
	}
	return true
}

// sameOutcome fails unless got, err is want, werr: equal bytes, or two
// *canonjson.Errors with the same Path and Msg (and no bytes).
func sameOutcome(t testing.TB, what string, text []byte, opts canonjson.Options, got []byte, err error, want []byte, werr error) {
	t.Helper()
	if err == nil && werr == nil {
		if !bytes.Equal(got, want) {
			t.Fatalf("%s of %s (%v):\n got %s\nwant %s", what, text, opts.IntegerFields, got, want)
		}
		return
	}
	var e, we *canonjson.Error
	if !errors.As(err, &e) || !errors.As(werr, &we) {
		t.Fatalf("%s of %s (%v): %s, %v; Canonicalize: %s, %v", what, text, opts.IntegerFields, got, err, want, werr)
	}
	if *e != *we || got != nil {
		t.Fatalf("%s of %s (%v): Error{%q, %q}, output %q; Canonicalize: Error{%q, %q}", what, text, opts.IntegerFields, e.Path, e.Msg, got, we.Path, we.Msg)
	}
}

// TestStructCanonicalMatchesCanonicalize holds the Struct path to
// Canonicalize, byte for byte and refusal for refusal, on every vector of
// the package's tests that a Struct can hold.
func TestStructCanonicalMatchesCanonicalize(t *testing.T) {
	t.Parallel()
	vs := vectors(t)
	compared, refused := 0, 0
	for _, vec := range vs {
		for _, opts := range optionSets {
			if !checkStructCanonical(t, vec.in, opts) {
				continue
			}
			compared++
			var v structpb.Value
			if protojson.Unmarshal(vec.in, &v) == nil {
				if _, err := canonjson.CanonicalizeValue(&v, opts); err != nil {
					refused++
				}
			}
		}
	}
	// The comparison must not pass by skipping: most vectors are
	// representable, and some of those are refused (integer fields,
	// range, depth), so both branches of sameOutcome ran.
	if compared < len(vs)*len(optionSets)*2/3 || refused < 20 {
		t.Fatalf("compared %d of %d (vector, options) pairs, %d of them refused", compared, len(vs)*len(optionSets), refused)
	}
	t.Logf("compared %d of %d (vector, options) pairs, %d of them refused", compared, len(vs)*len(optionSets), refused)
}

// FuzzStructCanonical holds the Struct path to Canonicalize on arbitrary
// JSON: whatever protojson reads into a Value must canonicalise to the
// bytes, or be refused with the error, that Canonicalize gives for its
// text. It starts from every vector of the package's tests.
func FuzzStructCanonical(f *testing.F) {
	for _, vec := range vectors(f) {
		f.Add(vec.in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, opts := range optionSets {
			checkStructCanonical(t, in, opts)
		}
	})
}

// Builders for Structs that JSON text cannot describe.
func num(f float64) *structpb.Value { return structpb.NewNumberValue(f) }
func str(s string) *structpb.Value  { return structpb.NewStringValue(s) }
func list(vs ...*structpb.Value) *structpb.Value {
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

// obj builds an object Value from name, value pairs.
func obj(kv ...any) *structpb.Value {
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := 0; i < len(kv); i += 2 {
		v, _ := kv[i+1].(*structpb.Value)
		st.Fields[kv[i].(string)] = v
	}
	return structpb.NewStructValue(st)
}

// chain nests inner in n lists.
func chain(n int, inner *structpb.Value) *structpb.Value {
	for range n {
		inner = list(inner)
	}
	return inner
}

// TestStructCanonical covers what only a Struct can hold (NaN, a Value
// without a kind, invalid UTF-8, nil containers, -0, odd null enums), the
// integer-field and depth refusals built as Structs, and UTF-16 order.
func TestStructCanonical(t *testing.T) {
	t.Parallel()
	negZero := math.Copysign(0, -1)
	opts := integerFieldsOpts
	tests := []struct {
		name      string
		v         *structpb.Value
		want      string // canonical JSON, if path and msg are ""
		path, msg string // the refusal: its Path, and what its Msg contains
	}{
		{name: "empty", v: obj(), want: `{}`},
		{name: "nil struct and list", v: obj("s", &structpb.Value{Kind: &structpb.Value_StructValue{}}, "l", &structpb.Value{Kind: &structpb.Value_ListValue{}}), want: `{"l":[],"s":{}}`},
		{name: "minus zero", v: obj("amount_minor", num(negZero), "l", list(num(negZero))), want: `{"amount_minor":0,"l":[0]}`},
		{name: "null enum number", v: obj("l", list(&structpb.Value{Kind: &structpb.Value_NullValue{NullValue: 5}}), "m", &structpb.Value{Kind: &structpb.Value_NullValue{NullValue: 5}}), want: `{"l":[null]}`},
		{name: "null integer field", v: obj("amount_minor", structpb.NewNullValue(), "qty", num(2)), want: `{"qty":2}`},
		{name: "numbers", v: obj("l", list(num(5e-324), num(1e-7), num(0.000001), num(9007199254740991), num(-9007199254740991), num(123.456), num(1e20/1e5))),
			want: `{"l":[5e-324,1e-7,0.000001,9007199254740991,-9007199254740991,123.456,1000000000000000]}`},
		{name: "strings", v: obj("s", list(str("\"\\/"), str("\b\f\n\r\t\x00\x1f\x7f"), str("\u2028<>&"))), want: `{"s":["\"\\/","\b\f\n\r\t\u0000\u001f` + "\x7f" + `","` + "\u2028" + `<>&"]}`},
		{name: "utf-16 order", v: obj("\ufb33", num(1), "\U0001F600", num(2), "\u20ac", num(3), "\r", num(4), "1", num(5), "\u0080", num(6), "\u00f6", num(7), "\U0001F600a", num(8), "\uffff", num(9)),
			want: "{\"\\r\":4,\"1\":5,\"\u0080\":6,\"\u00f6\":7,\"\u20ac\":3,\"\U0001F600\":2,\"\U0001F600a\":8,\"\ufb33\":1,\"\uffff\":9}"},

		{name: "NaN", v: obj("a", list(num(1), num(math.NaN()))), path: "/a/1", msg: "is not a finite number"},
		{name: "infinity", v: obj("amount_minor", num(math.Inf(1))), path: "/amount_minor", msg: "is not a finite number"},
		{name: "minus infinity", v: obj("x", obj("y", num(math.Inf(-1)))), path: "/x/y", msg: "is not a finite number"},
		{name: "nil value", v: obj("a", nil), path: "/a", msg: "none of its kinds set"},
		{name: "value without a kind", v: obj("a", list(num(1), &structpb.Value{})), path: "/a/1", msg: "none of its kinds set"},
		{name: "invalid UTF-8 string", v: obj("a", obj("b", str("x\xffy"))), path: "/a/b", msg: "invalid UTF-8"},
		{name: "invalid UTF-8 name", v: obj("a", list(obj("\xff", num(1)))), path: "/a/0", msg: "invalid UTF-8"},
		{name: "invalid UTF-8 name of a null", v: obj("\xc3(", structpb.NewNullValue()), path: "", msg: "invalid UTF-8"},
		{name: "pointer escapes", v: obj("a/b", obj("c~d", num(math.NaN()))), path: "/a~1b/c~0d", msg: "finite"},

		{name: "fraction", v: obj("amount_minor", num(4900.5)), path: "/amount_minor", msg: "is not an integer: the policy makes this member an exact integer"},
		{name: "tiny fraction", v: obj("qty", num(5e-324)), path: "/qty", msg: "is not an integer"},
		{name: "string money", v: obj("amount_minor", str("4900")), path: "/amount_minor", msg: "must be an integer, got a string"},
		{name: "bool money", v: obj("amount_minor", structpb.NewBoolValue(false)), path: "/amount_minor", msg: "must be an integer, got a boolean"},
		{name: "object money", v: obj("amount_minor", obj()), path: "/amount_minor", msg: "must be an integer, got an object"},
		{name: "list money", v: obj("amount_minor", list()), path: "/amount_minor", msg: "must be an integer, got an array"},
		{name: "money beyond 2^53", v: obj("items", list(obj("amount_minor", num(9007199254740992)))), path: "/items/0/amount_minor", msg: "is a number outside ±9007199254740991"},
		{name: "number beyond 2^53", v: obj("n", num(-1e300)), path: "/n", msg: "is a number outside"},
		{name: "money list past the depth", v: obj("amount_minor", chain(5000, list())), path: "/amount_minor", msg: "must be an integer, got an array"},

		{name: "depth at the limit", v: chain(canonjson.MaxDepth-1, list()), want: strings.Repeat("[", canonjson.MaxDepth) + strings.Repeat("]", canonjson.MaxDepth)},
		{name: "depth past the limit", v: chain(canonjson.MaxDepth, list()), path: strings.Repeat("/0", canonjson.MaxDepth), msg: "nesting exceeds the maximum depth of 64"},
		{name: "5000 levels", v: obj("a", chain(5000, obj())), path: "/a" + strings.Repeat("/0", canonjson.MaxDepth-1), msg: "maximum depth"},
		{name: "nil struct past the limit", v: obj("a", chain(canonjson.MaxDepth-1, &structpb.Value{Kind: &structpb.Value_StructValue{}})), path: "/a" + strings.Repeat("/0", canonjson.MaxDepth-1), msg: "maximum depth"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Members come out of a map in varying order: repeat.
			for range 10 {
				got, err := canonjson.CanonicalizeValue(tc.v, opts)
				if tc.msg == "" {
					if err != nil || string(got) != tc.want {
						t.Fatalf("CanonicalizeValue = %s, %v; want %s", got, err, tc.want)
					}
					if !jsontext.Value(got).IsValid() {
						t.Fatalf("output %q is not valid JSON", got)
					}
					continue
				}
				var e *canonjson.Error
				if !errors.As(err, &e) || got != nil || e.Path != tc.path || !strings.Contains(e.Msg, tc.msg) {
					t.Fatalf("CanonicalizeValue = %q, %#v; want Error at %q containing %q", got, err, tc.path, tc.msg)
				}
				if st := tc.v.GetStructValue(); st != nil {
					if _, serr := canonjson.CanonicalizeStruct(st, opts); serr == nil || serr.Error() != err.Error() {
						t.Fatalf("CanonicalizeStruct: %v; CanonicalizeValue: %v", serr, err)
					}
				}
			}
		})
	}
}

// TestStructCanonicalRoots covers nil roots and the root kinds.
func TestStructCanonicalRoots(t *testing.T) {
	t.Parallel()
	if got, err := canonjson.CanonicalizeStruct(nil, canonjson.Options{}); err != nil || string(got) != `{}` {
		t.Errorf("CanonicalizeStruct(nil) = %s, %v; want {}", got, err)
	}
	if got, err := canonjson.CanonicalizeValue(nil, canonjson.Options{}); err == nil || got != nil {
		t.Errorf("CanonicalizeValue(nil) = %s, %v; want an error", got, err)
	}
	for _, c := range []struct {
		v    *structpb.Value
		want string
	}{{structpb.NewNullValue(), `null`}, {num(4.9e5), `490000`}, {str("é"), `"é"`}, {structpb.NewBoolValue(true), `true`}, {list(), `[]`}} {
		if got, err := canonjson.CanonicalizeValue(c.v, payments); err != nil || string(got) != c.want {
			t.Errorf("CanonicalizeValue(%v) = %s, %v; want %s", c.v, got, err, c.want)
		}
	}
}

// TestStructRequest checks the envelope: Request's bytes and hash, the
// payload's error before the action's, and EnvelopePayload's refusals.
func TestStructRequest(t *testing.T) {
	t.Parallel()
	st := obj("order_id", str("817"), "memo", structpb.NewNullValue(), "currency", str("RUB"), "amount_minor", num(4.9e5)).GetStructValue()
	env, payload, err := canonjson.StructRequest("create_payment", st, payments)
	if err != nil {
		t.Fatal(err)
	}
	const wantEnv = `{"action":"create_payment","payload":{"amount_minor":490000,"currency":"RUB","order_id":"817"}}`
	if string(env) != wantEnv || string(payload) != `{"amount_minor":490000,"currency":"RUB","order_id":"817"}` {
		t.Errorf("StructRequest = %s, %s", env, payload)
	}
	if h, _, _ := canonjson.RequestHash("create_payment", []byte(`{"order_id":"817","currency":"RUB","amount_minor":490000}`), payments); canonjson.Hash(env) != h {
		t.Errorf("hash of the envelope %s differs from RequestHash %s", canonjson.Hash(env), h)
	}
	// The payload shares the envelope's memory but not its tail.
	if cap(payload) != len(payload) {
		t.Errorf("payload capacity %d beyond its length %d: an append would overwrite the envelope", cap(payload), len(payload))
	}
	if _, _, err := canonjson.StructRequest("a", nil, canonjson.Options{}); err != nil {
		t.Errorf("StructRequest(nil): %v", err)
	}

	_, _, err = canonjson.StructRequest("a\xff", obj("amount_minor", num(1.5)).GetStructValue(), payments)
	wantError(t, "bad action and payload", err, "/amount_minor", "is not an integer")
	env, payload, err = canonjson.StructRequest("a\xff", obj().GetStructValue(), payments)
	wantError(t, "bad action", err, "", "action is not valid UTF-8")
	if env != nil || payload != nil {
		t.Errorf("StructRequest returned %q, %q with an error", env, payload)
	}

	for _, bad := range []string{``, `{}`, `{"action":"create_payment"}`, `{"action":"create_payment","payload":}`, `{"action":"create_payment","payload":[]}`,
		`{"action":"create_payment","payload":{}`, `{"action":"create_payment2","payload":{}}`, `{"action":"create_paymen","payload":{}}`, `{"payload":{},"action":"create_payment"}`} {
		if p, ok := canonjson.EnvelopePayload([]byte(bad), "create_payment"); ok {
			t.Errorf("EnvelopePayload(%s) = %s, true", bad, p)
		}
	}
}

// TestStructCanonicalConcurrent: pooled writers shared by goroutines with
// different options never mix their outputs (run it with -race).
func TestStructCanonicalConcurrent(t *testing.T) {
	t.Parallel()
	inputs := []struct {
		in   string
		opts canonjson.Options
	}{
		{`{"amount_minor":490000,"items":[{"qty":1,"sku":"a"}],"memo":null}`, payments},
		{`{"amount_minor":4900.5}`, payments},
		{`{"amount_minor":4900.5}`, canonjson.Options{}},
		{rfcSortingInput, canonjson.Options{}},
		{`{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, canonjson.Options{}},
	}
	type outcome struct {
		out []byte
		err error
	}
	sts := make([]*structpb.Struct, len(inputs))
	want := make([]outcome, len(inputs))
	for i, in := range inputs {
		sts[i] = &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(in.in), sts[i]); err != nil {
			t.Fatal(err)
		}
		want[i].out, want[i].err = canonjson.CanonicalizeStruct(sts[i], in.opts)
	}
	done := make(chan string, 8)
	for g := range 8 {
		go func() {
			for i := range 300 {
				k := (g + i) % len(inputs)
				out, err := canonjson.CanonicalizeStruct(sts[k], inputs[k].opts)
				if !bytes.Equal(out, want[k].out) || (err == nil) != (want[k].err == nil) || (err != nil && err.Error() != want[k].err.Error()) {
					done <- "input " + strconv.Itoa(k) + ": " + string(out)
					return
				}
			}
			done <- ""
		}()
	}
	for range 8 {
		if msg := <-done; msg != "" {
			t.Error(msg)
		}
	}
}

// benchPayloads are Register payloads as Structs: what harness/cmd/opjournal-bench's
// fused scenario sends, a typical payment, the 1 KiB order of the server's
// BenchmarkFusedAnswer, and a 10 KiB one.
func benchPayloads(b *testing.B) []struct {
	name string
	st   *structpb.Struct
} {
	b.Helper()
	items := make([]any, 0, 100)
	for i := range 6 {
		items = append(items, map[string]any{"sku": "SKU-0000" + strconv.Itoa(i), "name": "Item number " + strconv.Itoa(i), "qty": i + 1, "unit_minor": 1990 + i})
	}
	order := map[string]any{
		"order_id": "817", "amount_minor": 490000, "currency": "RUB",
		"customer":    map[string]any{"id": "c-93", "email": "buyer@example.com", "country": "RU", "tier": "gold"},
		"items":       items,
		"description": strings.Repeat("a payment for order 817 ", 15),
		"metadata":    map[string]any{"channel": "agent", "campaign": "autumn", "trace": "4bf92f3577b34da6a3ce929d0e0e4736"},
	}
	var large []any
	for i := range 100 {
		large = append(large, map[string]any{"name": "line item " + strconv.Itoa(i) + " é", "price_minor": 1000 + i, "qty": i%5 + 1, "tags": []any{"a", "b"}})
	}
	out := []struct {
		name string
		st   *structpb.Struct
	}{}
	for _, p := range []struct {
		name string
		m    map[string]any
	}{
		{"bench", map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}},
		{"typical", map[string]any{"amount_minor": 490000, "currency": "RUB", "order_id": "817",
			"customer": map[string]any{"email_hash": "9f86d081884c7d650f4c1ba2b1e6b1e8", "id": "c-1"},
			"items":    []any{map[string]any{"qty": 1, "sku": "a"}, map[string]any{"qty": 2, "sku": "b"}}}},
		{"1KiB", order},
		{"10KiB", map[string]any{"items": large, "order_id": "817"}},
	} {
		st, err := structpb.NewStruct(p.m)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, struct {
			name string
			st   *structpb.Struct
		}{p.name, st})
	}
	return out
}

// BenchmarkStructCanonical compares the two steps a Struct payload took
// (JSON text by protojson, then Request parses and canonicalises it) with
// StructRequest, which writes the envelope from the Struct. The server's
// benchmark of the same name measures its own renderer as the first step.
//
//	go test -run '^$' -bench StructCanonical -benchmem ./protocol/canonjson/ ./server/
func BenchmarkStructCanonical(b *testing.B) {
	for _, p := range benchPayloads(b) {
		b.Run(p.name+"/protojson+Request", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				text, err := protojson.Marshal(p.st)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := canonjson.Request("create_payment", text, payments); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.name+"/StructRequest", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := canonjson.StructRequest("create_payment", p.st, payments); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
