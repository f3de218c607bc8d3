package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// The decoder in structdecode.go replaces protojson; these tests hold it
// to protojson's results. The protojson paths below are the code they
// replaced, kept as the reference.

// structFromJSONProtojson is how operationPB decoded stored JSON before.
func structFromJSONProtojson(raw []byte) (*structpb.Struct, error) {
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, st); err != nil {
		return nil, err
	}
	return st, nil
}

// sameStruct reports whether a and b are the same Struct. proto.Equal
// compares numbers with ==, so it would take -0 for 0; the deterministic
// wire form tells them apart (and sorts map entries, so equal trees give
// equal bytes).
func sameStruct(a, b *structpb.Struct) bool {
	if !proto.Equal(a, b) {
		return false
	}
	opts := proto.MarshalOptions{Deterministic: true}
	wa, err1 := opts.Marshal(a)
	wb, err2 := opts.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(wa, wb)
}

// tester is what the checks need of *testing.T, *testing.B and *rapid.T.
type tester interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkDecode decodes raw with structFromJSON and with protojson and fails
// unless both refuse it or both return the same Struct.
func checkDecode(t tester, raw []byte) {
	t.Helper()
	got, err := structFromJSON(raw)
	want, werr := structFromJSONProtojson(raw)
	switch {
	case err != nil && werr != nil:
	case err != nil:
		t.Fatalf("structFromJSON(%q): %v; protojson accepts it as %v", raw, err, want)
	case werr != nil:
		t.Fatalf("structFromJSON(%q) = %v; protojson refuses it: %v", raw, got, werr)
	case !sameStruct(got, want):
		t.Fatalf("structFromJSON(%q):\n got  %v\n want %v", raw, got, want)
	}
}

// nest wraps inner in n levels of open/close.
func nest(n int, open, inner, close string) string {
	return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
}

func TestStructFromJSON(t *testing.T) {
	valid := []string{
		`{}`,
		` { } `,
		"\t{\n}\r\n",
		`{"a":null,"b":true,"c":false,"d":"s","e":1.5,"f":{},"g":[]}`,
		`{"amount_minor":490000,"currency":"RUB","order_id":"817","customer":{"id":"c-1","email_hash":"9f86d081884c7d65"},"items":[{"sku":"a","qty":1},{"sku":"b","qty":2}]}`,
		`{"n":[0,-0,0.0,-0.0,1e21,1E+21,5e-324,9007199254740991,-9007199254740991,9007199254740993,1.7976931348623157e308,2.2250738585072014e-308,1e-400,0.1,123456789012345678901234567890]}`,
		`{"s":["","\"","\\","\/","\b\f\n\r\t","\u0000","\u001f","\u007f","\u00e9","é","\u20ac","\ud83d\ude00","😀","\u2028\u2029","<>&","\ufeff"]}`,
		`{"":"empty name","\u00e9":"escaped name","😀":1}`,
		`{"NaN":"NaN","Infinity":"-Infinity"}`,
		`{"a":[[[[]]],[{}],{"b":[{"c":[1,[2,[3]]]}]}]}`,
		`{"k":` + nest(canonjson.MaxDepth-1, "[", "", "]") + `}`,
		`{"k":` + nest(storedJSONMaxDepth-1, `{"k":`, "1", "}") + `}`,
		`{"k":` + nest(storedJSONMaxDepth-1, `[`, "", "]") + `}`,
	}
	for _, in := range valid {
		checkDecode(t, []byte(in))
		if _, err := structFromJSON([]byte(in)); err != nil {
			t.Errorf("structFromJSON(%.80q): %v", in, err)
		}
	}

	invalid := []string{
		``, ` `, `null`, `true`, `1`, `"s"`, `[]`, `[{}]`,
		`{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{,}`, `{a:1}`, `{'a':1}`,
		`{"a":1}x`, `{"a":1}{}`, `{"a":1}]`, `{"a":[1,]}`, `{"a":[}`, `{"a":]}`, `{"a":[1}`, `{"a":{]}`,
		`{"a":1e999}`, `{"a":-1e999}`, `{"a":01}`, `{"a":.5}`, `{"a":5.}`, `{"a":+1}`, `{"a":0x1}`, `{"a":NaN}`, `{"a":Infinity}`,
		`{"a":tru}`, `{"a":nul}`, `{"a":True}`,
		`{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `{"\u0061":1,"a":2}`,
		"{\"a\":\"\xff\"}", "{\"\xff\":1}", "{\"a\":\"\xed\xa0\x80\"}", `{"a":"\ud800"}`, `{"a":"\udc00x"}`, `{"a":"\x"}`,
		"{\"a\":\"\x01\"}", "{\"a\":\"\n\"}", "\ufeff{}", "{}\x00",
	}
	for _, in := range invalid {
		checkDecode(t, []byte(in))
		if st, err := structFromJSON([]byte(in)); err == nil {
			t.Errorf("structFromJSON(%q) = %v, want an error", in, st)
		}
	}

	// Deeper than storedJSONMaxDepth is refused (protojson would accept
	// it; nothing the journal stores nests past canonjson.MaxDepth).
	for _, in := range []string{
		`{"k":` + nest(storedJSONMaxDepth, `{"k":`, "1", "}") + `}`,
		`{"k":` + nest(storedJSONMaxDepth, `[`, "", "]") + `}`,
		`{"k":` + nest(100000, `[`, "", "]") + `}`,
		`{"k":` + strings.Repeat(`[`, 100000), // and unterminated
	} {
		if _, err := structFromJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), "nesting exceeds") {
			t.Errorf("structFromJSON(%.40q...): %v, want a nesting error", in, err)
		}
	}
}

// TestStructFromJSONLeavesInputAlone checks that decoding does not write
// to the caller's bytes (jsontext mangles its own buffer after each read
// unless it reads a *bytes.Buffer in place).
func TestStructFromJSONLeavesInputAlone(t *testing.T) {
	in := []byte(`{"a":[1,"x",{"b":true}],"c":"\u00e9"}`)
	orig := bytes.Clone(in)
	if _, err := structFromJSON(in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, orig) {
		t.Fatalf("input changed: %q, was %q", in, orig)
	}
}

// TestStructFromJSONConcurrent runs the pooled decoder and encoder from
// many goroutines (meaningful under -race).
func TestStructFromJSONConcurrent(t *testing.T) {
	inputs := []string{typicalPayload, typicalResult, `{"a":[[[1]]]}`, `{"a":1e999}`, `{}`}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				in := inputs[(g+i)%len(inputs)]
				got, err := structFromJSON([]byte(in))
				want, werr := structFromJSONProtojson([]byte(in))
				if (err != nil) != (werr != nil) || (err == nil && !sameStruct(got, want)) {
					t.Errorf("structFromJSON(%s) = %v, %v; want %v, %v", in, got, err, want, werr)
					return
				}
				if err == nil {
					if _, err := canonjson.CanonicalizeStruct(got, canonjson.Options{}); err != nil {
						t.Errorf("CanonicalizeStruct(%v): %v", got, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestOperationPBUnreadableJSON(t *testing.T) {
	for _, raw := range []string{``, `[]`, `{"a":`, `{"a":1e999}`, "{\"a\":\"\xff\"}"} {
		_, err := operationPB(&opjournal.Operation{Key: "k", Payload: json.RawMessage(raw)})
		var e *opjournal.Error
		if !errors.As(err, &e) || e.Code != opjournal.CodeInternal || e.Message != "stored JSON is unreadable" || e.Err == nil {
			t.Errorf("payload %q: %v, want CodeInternal \"stored JSON is unreadable\" with a cause", raw, err)
		}
		_, err = operationPB(&opjournal.Operation{Key: "k", Payload: json.RawMessage(`{}`), Result: json.RawMessage(raw)})
		if !errors.As(err, &e) || e.Code != opjournal.CodeInternal || e.Message != "stored JSON is unreadable" {
			t.Errorf("result %q: %v, want CodeInternal \"stored JSON is unreadable\"", raw, err)
		}
	}
	op, err := operationPB(&opjournal.Operation{Key: "k", Payload: json.RawMessage(typicalPayload), Result: json.RawMessage(typicalResult)})
	if err != nil {
		t.Fatal(err)
	}
	wantP, _ := structFromJSONProtojson([]byte(typicalPayload))
	wantR, _ := structFromJSONProtojson([]byte(typicalResult))
	if !sameStruct(op.GetPayload(), wantP) || !sameStruct(op.GetResult(), wantR) {
		t.Errorf("operationPB: payload %v result %v, want %v and %v", op.GetPayload(), op.GetResult(), wantP, wantR)
	}
	if op, err := operationPB(&opjournal.Operation{Key: "k"}); err != nil || op.Payload != nil || op.Result != nil {
		t.Errorf("operationPB without JSON: %v, %v", op, err)
	}
}

// Generators for the property tests.

// specialNumbers are doubles whose JSON spelling is easy to get wrong.
var specialNumbers = []float64{
	0, math.Copysign(0, -1), 1, -1, 0.1, 0.5, 1e21, 1e20, 1e-6, 1e-7, 5e-324, -5e-324,
	9007199254740991, -9007199254740991, 9007199254740992, 9007199254740993,
	math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 2.2250738585072014e-308,
	123456789012345680000, 4900.5, 490000, 1.7976931348623157e308, 1 << 62, 333333333.33333329,
}

// specialStrings need escaping or are outside ASCII.
var specialStrings = []string{
	"", " ", "\"", "\\", "/", "\b\f\n\r\t", "\x00", "\x1f", "\x7f", "é", "€", "😀", "\u2028\u2029",
	"<>&", "\ufeff", "\ufffd", "a\u0301", "NaN", "Infinity", "-Infinity", "null", "{}", "amount_minor",
}

func genNumber(t *rapid.T) float64 {
	switch rapid.IntRange(0, 3).Draw(t, "numberKind") {
	case 0:
		return rapid.SampledFrom(specialNumbers).Draw(t, "special")
	case 1:
		return float64(rapid.Int64Range(-canonjson.MaxSafeInteger, canonjson.MaxSafeInteger).Draw(t, "int"))
	case 2:
		f := math.Float64frombits(rapid.Uint64().Draw(t, "bits"))
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0
		}
		return f
	default:
		return rapid.Float64Range(-1e6, 1e6).Draw(t, "float")
	}
}

func genString(t *rapid.T, label string) string {
	if rapid.Bool().Draw(t, label+"Special") {
		return rapid.SampledFrom(specialStrings).Draw(t, label)
	}
	return rapid.String().Draw(t, label)
}

// genValue draws a Value nesting at most maxDepth more containers.
func genValue(t *rapid.T, maxDepth int) *structpb.Value {
	kinds := 4
	if maxDepth > 0 {
		kinds = 6
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		return structpb.NewNullValue()
	case 1:
		return structpb.NewBoolValue(rapid.Bool().Draw(t, "bool"))
	case 2:
		return structpb.NewNumberValue(genNumber(t))
	case 3:
		return structpb.NewStringValue(genString(t, "string"))
	case 4:
		return structpb.NewStructValue(genStruct(t, maxDepth-1))
	default:
		l := &structpb.ListValue{}
		for range rapid.IntRange(0, 4).Draw(t, "len") {
			l.Values = append(l.Values, genValue(t, maxDepth-1))
		}
		return structpb.NewListValue(l)
	}
}

// genStruct draws a Struct; now and then one member holds a long chain of
// containers, to reach the depth limits.
func genStruct(t *rapid.T, maxDepth int) *structpb.Struct {
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for range rapid.IntRange(0, 5).Draw(t, "members") {
		st.Fields[genString(t, "name")] = genValue(t, maxDepth)
	}
	if maxDepth > 0 && rapid.IntRange(0, 9).Draw(t, "deep") == 0 {
		n := rapid.IntRange(1, canonjson.MaxDepth+2).Draw(t, "chain")
		v := genValue(t, 0)
		for i := range n {
			if rapid.Bool().Draw(t, "chainList") {
				v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
			} else {
				v = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{strconv.Itoa(i): v}})
			}
		}
		st.Fields["deep"] = v
	}
	return st
}

// spell writes v as JSON text in one of many equivalent spellings: any
// whitespace, strings escaped minimally or fully, numbers in several
// notations.
func spell(t *rapid.T, b *bytes.Buffer, v *structpb.Value) {
	ws := func() { b.WriteString(rapid.SampledFrom([]string{"", "", " ", "\n\t ", "\r\n"}).Draw(t, "ws")) }
	ws()
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		b.WriteString("null")
	case *structpb.Value_BoolValue:
		b.WriteString(strconv.FormatBool(k.BoolValue))
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		spellings := []string{
			strconv.FormatFloat(f, 'g', -1, 64),
			strconv.FormatFloat(f, 'e', -1, 64),
			strconv.FormatFloat(f, 'E', 30, 64), // more digits than needed: still the same double
			jsontext.Float(f).String(),
		}
		if f == math.Trunc(f) && math.Abs(f) < 1e300 {
			spellings = append(spellings, strconv.FormatFloat(f, 'f', -1, 64)+".000", strconv.FormatFloat(f, 'f', -1, 64)+"e0")
		}
		b.WriteString(rapid.SampledFrom(spellings).Draw(t, "numberSpelling"))
	case *structpb.Value_StringValue:
		spellString(t, b, k.StringValue)
	case *structpb.Value_StructValue:
		b.WriteString("{")
		first := true
		for name, f := range k.StructValue.GetFields() {
			if !first {
				b.WriteString(",")
			}
			first = false
			ws()
			spellString(t, b, name)
			ws()
			b.WriteString(":")
			spell(t, b, f)
		}
		ws()
		b.WriteString("}")
	case *structpb.Value_ListValue:
		b.WriteString("[")
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				b.WriteString(",")
			}
			spell(t, b, e)
		}
		ws()
		b.WriteString("]")
	}
	ws()
}

// spellString writes s as a JSON string, minimally escaped or with every
// character outside printable ASCII (and '/') as a \u escape.
func spellString(t *rapid.T, b *bytes.Buffer, s string) {
	if !rapid.Bool().Draw(t, "escapeAll") {
		q, _ := jsontext.AppendQuote(nil, s)
		b.Write(q)
		return
	}
	b.WriteString(`"`)
	for _, r := range s {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' || r == '/' {
			if r >= 0x10000 {
				r -= 0x10000
				b.WriteString(`\u` + strconv.FormatUint(uint64(0xd800+r>>10), 16) + `\u` + strconv.FormatUint(uint64(0xdc00+r&0x3ff), 16))
				continue
			}
			b.WriteString(`\u` + strconv.FormatUint(uint64(r)+0x10000, 16)[1:])
			continue
		}
		b.WriteRune(r)
	}
	b.WriteString(`"`)
}

// TestStructFromJSONProperty decodes many generated documents, in
// protojson's spelling and in arbitrary equivalent ones, and compares
// with protojson.
func TestStructFromJSONProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := genStruct(t, 4)
		if b, err := protojson.Marshal(st); err == nil {
			checkDecode(t, b)
		}
		var b bytes.Buffer
		spell(t, &b, structpb.NewStructValue(st))
		checkDecode(t, b.Bytes())
		if got, err := structFromJSON(b.Bytes()); err != nil || !sameStruct(got, st) {
			t.Fatalf("structFromJSON(%s) = %v, %v; want %v", b.Bytes(), got, err, st)
		}
	})
}

// FuzzStructJSON decodes arbitrary bytes with structFromJSON: it must not
// panic, must agree with protojson on whether the input is a JSON object
// and on the Struct it holds.
func FuzzStructJSON(f *testing.F) {
	for _, seed := range []string{
		typicalPayload, typicalResult, `{}`, `{"a":[]}`,
		`{"n":[0,-0,1e21,5e-324,9007199254740991,1e999,1e-400,1.7976931348623157e308]}`,
		`{"s":"\u00e9\ud83d\ude00\u2028\"\\\/\b\f\n\r\t\u0000","":null,"t":true,"f":false}`,
		`{"a":` + nest(canonjson.MaxDepth, "[", "", "]") + `}`,
		`{"a":1,"a":2}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `[]`, `null`, `{"a":1}{}`, `{"a":01}`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := structFromJSON(raw)
		want, werr := structFromJSONProtojson(raw)
		if err != nil {
			if werr == nil && !strings.Contains(err.Error(), "nesting exceeds") {
				t.Fatalf("structFromJSON(%q): %v; protojson accepts it as %v", raw, err, want)
			}
			return
		}
		if werr != nil {
			t.Fatalf("structFromJSON(%q) = %v; protojson refuses it: %v", raw, got, werr)
		}
		if !sameStruct(got, want) {
			t.Fatalf("structFromJSON(%q):\n got  %v\n want %v", raw, got, want)
		}
	})
}

// typicalPayload and typicalResult are the size and shape of what a
// payment integration stores.
const (
	typicalPayload = `{"amount_minor":490000,"currency":"RUB","customer":{"email_hash":"9f86d081884c7d650f4c1ba2b1e6b1e8","id":"c-1"},"items":[{"qty":1,"sku":"a"},{"qty":2,"sku":"b"}],"order_id":"817"}`
	typicalResult  = `{"charge_id":"ch_3PqXk2","status":"captured"}`
)

// largePayload is a canonical payload of about 10 KiB.
var largePayload = func() string {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"name":"line item ` + strconv.Itoa(i) + ` \u00e9","price_minor":` + strconv.Itoa(1000+i) + `,"qty":` + strconv.Itoa(i%5+1) + `,"tags":["a","b"]}`)
	}
	b.WriteString(`],"order_id":"817"}`)
	return b.String()
}()

func mustStruct(t testing.TB, s string) *structpb.Struct {
	t.Helper()
	st, err := structFromJSONProtojson([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// benchOperation is a succeeded operation as the store returns it.
func benchOperation(payload string) *opjournal.Operation {
	now := time.Now()
	return &opjournal.Operation{
		Key: "order-817", Action: "create_payment", RequestHash: strings.Repeat("ab", 32),
		Payload: json.RawMessage(payload), Status: opjournal.StatusSucceeded, AttemptCount: 1,
		ExternalID: "ch_3PqXk2", Result: json.RawMessage(typicalResult), CreatedAt: now, UpdatedAt: now,
	}
}

// BenchmarkOperationPB converts a typical stored operation for the wire:
// "protojson" decodes payload and result as operationPB used to; "noJSON"
// is the rest of the conversion alone, the floor for both.
func BenchmarkOperationPB(b *testing.B) {
	b.Run("noJSON", func(b *testing.B) {
		op := benchOperation(typicalPayload)
		op.Payload, op.Result = nil, nil
		b.ReportAllocs()
		for b.Loop() {
			if _, err := operationPB(op); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, size := range []struct{ name, payload string }{{"typical", typicalPayload}, {"10KiB", largePayload}} {
		op := benchOperation(size.payload)
		b.Run(size.name+"/protojson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				noJSON := *op
				noJSON.Payload, noJSON.Result = nil, nil
				out, err := operationPB(&noJSON)
				if err != nil {
					b.Fatal(err)
				}
				if out.Payload, err = structFromJSONProtojson(op.Payload); err != nil {
					b.Fatal(err)
				}
				if out.Result, err = structFromJSONProtojson(op.Result); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(size.name+"/jsontext", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := operationPB(op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
