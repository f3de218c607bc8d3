package canonjson_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

var payments = canonjson.Options{IntegerFields: []string{"amount_minor"}}

// canon canonicalizes in and fails the test on error.
func canon(t *testing.T, in string, opts canonjson.Options) string {
	t.Helper()
	out, err := canonjson.Canonicalize([]byte(in), opts)
	if err != nil {
		t.Fatalf("Canonicalize(%q) error: %v", in, err)
	}
	return string(out)
}

// hash returns RequestHash's hash and fails the test on error.
func hash(t *testing.T, action, payload string, opts canonjson.Options) string {
	t.Helper()
	h, _, err := canonjson.RequestHash(action, []byte(payload), opts)
	if err != nil {
		t.Fatalf("RequestHash(%q, %q) error: %v", action, payload, err)
	}
	return h
}

// wantError checks that err is a *canonjson.Error at path whose message contains msg.
func wantError(t *testing.T, in string, err error, path, msg string) {
	t.Helper()
	var e *canonjson.Error
	if !errors.As(err, &e) {
		t.Fatalf("input %q: got error %v (%T), want *canonjson.Error", in, err, err)
	}
	if e.Path != path || !strings.Contains(e.Msg, msg) {
		t.Errorf("input %q: got Error{Path: %q, Msg: %q}, want Path %q and Msg containing %q", in, e.Path, e.Msg, path, msg)
	}
}

// rejects canonicalizes in, expecting an *Error at path whose message contains msg.
func rejects(t *testing.T, in string, opts canonjson.Options, path, msg string) {
	t.Helper()
	out, err := canonjson.Canonicalize([]byte(in), opts)
	if err == nil {
		t.Fatalf("Canonicalize(%q) = %q, want error at %q containing %q", in, out, path, msg)
	}
	if out != nil {
		t.Errorf("Canonicalize(%q) returned output %q along with error", in, out)
	}
	wantError(t, in, err, path, msg)
}

// rfcStructure is the input example of RFC 8785 §3.2.2.
const rfcStructure = `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`

// rfcStructureOut is the canonical form RFC 8785 §3.2.2 gives for rfcStructure.
const rfcStructureOut = `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`

// TestJSONTextIsRFC8785 pins the behaviour of the dependency this package
// delegates formatting to: if a jsontext upgrade stops producing the RFC's
// own output, every hash would change.
func TestJSONTextIsRFC8785(t *testing.T) {
	v := jsontext.Value(rfcStructure)
	if err := v.Canonicalize(); err != nil {
		t.Fatal(err)
	}
	if string(v) != rfcStructureOut {
		t.Errorf("jsontext Canonicalize:\n got %s\nwant %s", v, rfcStructureOut)
	}
}

func TestRFC8785Structure(t *testing.T) {
	// The RFC's example contains 1E30, an integer beyond 2^53-1, which this
	// package rejects on purpose.
	rejects(t, rfcStructure, canonjson.Options{}, "/numbers/1", "is a number outside")

	// Without it, the output is the RFC's output without 1e+30.
	in := strings.Replace(rfcStructure, "1E30, ", "", 1)
	want := strings.Replace(rfcStructureOut, "1e+30,", "", 1)
	if got := canon(t, in, canonjson.Options{}); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// rfcSortingInput is the input example of RFC 8785 §3.2.3.
const rfcSortingInput = `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`

func TestRFC8785Sorting(t *testing.T) {
	// RFC 8785 §3.2.3: members are sorted by UTF-16 code units, so U+1F600
	// (a surrogate pair, 0xD83D...) sorts before U+FB33.
	in := rfcSortingInput
	want := "{" +
		`"\r":"Carriage Return",` +
		`"1":"One",` +
		"\"\u0080\":\"Control\"," +
		"\"\u00f6\":\"Latin Small Letter O With Diaeresis\"," +
		"\"\u20ac\":\"Euro Sign\"," +
		"\"\U0001F600\":\"Emoji: Grinning Face\"," +
		"\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"" +
		"}"
	if got := canon(t, in, canonjson.Options{}); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// rfcNumberSamples are RFC 8785 Appendix B: IEEE 754 bit patterns and
// their JCS serialisation. want "" marks samples beyond ±(2^53-1), which
// this package rejects.
var rfcNumberSamples = []struct {
	bits uint64
	want string
}{
	{0x0000000000000000, "0"},
	{0x8000000000000000, "0"}, // minus zero
	{0x0000000000000001, "5e-324"},
	{0x8000000000000001, "-5e-324"},
	{0x7fefffffffffffff, ""}, // 1.7976931348623157e+308
	{0xffefffffffffffff, ""}, // -1.7976931348623157e+308
	{0x4340000000000000, ""}, // 9007199254740992
	{0xc340000000000000, ""}, // -9007199254740992
	{0x4430000000000000, ""}, // 295147905179352830000
	{0x44b52d02c7e14af5, ""}, // 9.999999999999997e+22
	{0x44b52d02c7e14af6, ""}, // 1e+23
	{0x444b1ae4d6e2ef50, ""}, // 1e+21
	{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
	{0x3eb0c6f7a0b5ed8d, "0.000001"},
	{0x41b3de4355555553, "333333333.3333332"},
	{0x41b3de4355555554, "333333333.33333325"},
	{0x41b3de4355555555, "333333333.3333333"},
	{0x41b3de4355555556, "333333333.3333334"},
	{0x41b3de4355555557, "333333333.33333343"},
	{0xbecbf647612f3696, "-0.0000033333333333333333"},
	{0x43143ff3c1cb0959, "1424953923781206.2"}, // round to even
}

func TestRFC8785NumberSamples(t *testing.T) {
	for _, s := range rfcNumberSamples {
		f := math.Float64frombits(s.bits)
		for _, text := range []string{strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'e', 20, 64)} {
			in := "[" + text + "]"
			if s.want == "" {
				rejects(t, in, canonjson.Options{}, "/0", "outside")
				continue
			}
			if got, want := canon(t, in, canonjson.Options{}), "["+s.want+"]"; got != want {
				t.Errorf("bits %016x: Canonicalize(%s) = %s, want %s", s.bits, in, got, want)
			}
		}
	}
}

func TestKeyOrderAndWhitespaceIndependence(t *testing.T) {
	a := `{"order_id":"817","amount_minor":490000,"currency":"RUB","meta":{"z":[1,2],"a":true}}`
	b := " {\n\t\"currency\" : \"RUB\", \"meta\":{\"a\":true,\"z\":[1, 2]},\r\n\"amount_minor\":4.9e5 ,\"order_id\":\"\\u0038\\u00317\"} "
	if ca, cb := canon(t, a, payments), canon(t, b, payments); ca != cb {
		t.Errorf("different canonical forms:\n%s\n%s", ca, cb)
	}
	if ha, hb := hash(t, "create_payment", a, payments), hash(t, "create_payment", b, payments); ha != hb {
		t.Errorf("different hashes: %s vs %s", ha, hb)
	}
	// Array order is meaningful and must not be normalised.
	if hash(t, "x", `{"l":[1,2]}`, canonjson.Options{}) == hash(t, "x", `{"l":[2,1]}`, canonjson.Options{}) {
		t.Error("arrays in different order hash the same")
	}
	// The action is part of the request.
	if hash(t, "create_payment", a, payments) == hash(t, "refund_payment", a, payments) {
		t.Error("different actions hash the same")
	}
}

// nullRemovalCases are documents with null members and their canonical forms.
var nullRemovalCases = []struct{ in, want string }{
	{`{"a":{"b":null,"c":1},"d":[null,1]}`, `{"a":{"c":1},"d":[null,1]}`},
	{`{"memo":null}`, `{}`},
	{`{"a":{"b":null}}`, `{"a":{}}`},
	{`{"a":[{"b":null,"c":[null]}],"e":""}`, `{"a":[{"c":[null]}],"e":""}`},
	{`{"s":"","l":[],"o":{}}`, `{"l":[],"o":{},"s":""}`},
	{`[null,{"x":null},null]`, `[null,{},null]`},
	{`null`, `null`},
}

func TestNullRemoval(t *testing.T) {
	for _, c := range nullRemovalCases {
		if got := canon(t, c.in, canonjson.Options{}); got != c.want {
			t.Errorf("Canonicalize(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	if hash(t, "a", `{"memo":null,"n":1}`, canonjson.Options{}) != hash(t, "a", `{"n":1}`, canonjson.Options{}) {
		t.Error(`{"memo":null} and {} hash differently`)
	}
	// An emptied object is still an object, not an absent member.
	if hash(t, "a", `{"o":{"x":null}}`, canonjson.Options{}) == hash(t, "a", `{}`, canonjson.Options{}) {
		t.Error(`{"o":{"x":null}} and {} hash the same`)
	}
}

func TestUnicodeIsNotNormalised(t *testing.T) {
	nfc := "{\"name\":\"Jos\u00e9\"}"  // é as one code point
	nfd := "{\"name\":\"Jose\u0301\"}" // e + combining acute accent
	if canon(t, nfc, canonjson.Options{}) == canon(t, nfd, canonjson.Options{}) {
		t.Error("NFC and NFD forms canonicalized to the same bytes")
	}
	if hash(t, "a", nfc, canonjson.Options{}) == hash(t, "a", nfd, canonjson.Options{}) {
		t.Error("NFC and NFD forms hash the same")
	}
	// Escaped and literal spellings of the same string are the same string.
	if got, want := canon(t, `{"name":"Jos\u00e9"}`, canonjson.Options{}), nfc; got != want {
		t.Errorf("escaped é: got %s, want %s", got, want)
	}
}

// numbersAccepted are numbers Canonicalize accepts and their canonical forms.
var numbersAccepted = []struct{ in, want string }{
	{`9007199254740991`, `9007199254740991`},
	{`-9007199254740991`, `-9007199254740991`},
	{`9.007199254740991e15`, `9007199254740991`},
	{`-0`, `0`},
	{`-0.0e10`, `0`},
	{`5e-324`, `5e-324`},
	{`1e-400`, `0`}, // underflows to 0 in every client alike
	{`4.9e5`, `490000`},
	{`490000.0`, `490000`},
	{`1.0`, `1`},
	{`4900.5`, `4900.5`},
	{`0.1`, `0.1`},
	{`1E2`, `100`},
	{`1e-7`, `1e-7`},
}

// numbersRejected are numbers Canonicalize refuses and what the refusal says.
var numbersRejected = []struct{ in, msg string }{
	{`9007199254740992`, "is a number outside ±9007199254740991"},
	{`-9007199254740992`, "is a number outside"},
	{`9007199254740993`, "outside"},
	{`1e16`, "is a number outside"},
	{`1e+20`, "outside"},
	{`9007199254740992.5`, "outside"}, // would round to 2^53
	{`1.7976931348623157e308`, "outside"},
	{`1e309`, "is a number that overflows a 64-bit float"},
	{`-1e309`, "overflows"},
	{`1e99999999999999999999`, "overflows"},
}

func TestNumbers(t *testing.T) {
	for _, c := range numbersAccepted {
		if got := canon(t, "["+c.in+"]", canonjson.Options{}); got != "["+c.want+"]" {
			t.Errorf("Canonicalize([%s]) = %s, want [%s]", c.in, got, c.want)
		}
	}
	if hash(t, "a", `{"n":4.9e5}`, canonjson.Options{}) != hash(t, "a", `{"n":490000}`, canonjson.Options{}) {
		t.Error("4.9e5 and 490000 hash differently")
	}

	for _, c := range numbersRejected {
		rejects(t, `{"x":[0,`+c.in+`]}`, canonjson.Options{}, "/x/1", c.msg)
	}

	// Error messages quote long numbers only in part.
	long := "1" + strings.Repeat("0", 400)
	_, err := canonjson.Canonicalize([]byte(long), canonjson.Options{})
	if err == nil || len(err.Error()) > 200 {
		t.Errorf("400-digit number: got error %v, want a short one", err)
	}
}

// integerFieldsOpts are the options of the integer-field vectors.
var integerFieldsOpts = canonjson.Options{IntegerFields: []string{"amount_minor", "qty"}}

// integerFieldsAccepted are documents that pass integerFieldsOpts, with their canonical forms.
var integerFieldsAccepted = []struct{ in, want string }{
	{`{"amount_minor":490000}`, `{"amount_minor":490000}`},
	{`{"amount_minor":4.9e5}`, `{"amount_minor":490000}`},
	{`{"amount_minor":490000.0}`, `{"amount_minor":490000}`},
	{`{"amount_minor":4900e-2}`, `{"amount_minor":49}`},
	{`{"amount_minor":-0}`, `{"amount_minor":0}`},
	{`{"amount_minor":0.0e-99999999999999999999}`, `{"amount_minor":0}`},
	{`{"amount_minor":-9007199254740991}`, `{"amount_minor":-9007199254740991}`},
	{`{"amount_minor":null,"a":1}`, `{"a":1}`},
	{`{"items":[{"qty":2,"amount_minor":100}]}`, `{"items":[{"amount_minor":100,"qty":2}]}`},
	{`{"amount\u005fminor":7}`, `{"amount_minor":7}`}, // names compare after unescaping
	{`{"other":4900.5,"list":["4900"]}`, `{"list":["4900"],"other":4900.5}`},
}

// integerFieldsRejected are documents integerFieldsOpts refuses, with where and why.
var integerFieldsRejected = []struct{ in, path, msg string }{
	{`{"amount_minor":4900.5}`, "/amount_minor", "is not an integer"},
	{`{"amount_minor":4900.0000000000000001}`, "/amount_minor", "is not an integer"}, // a double would say 4900
	{`{"amount_minor":49e-1}`, "/amount_minor", "is not an integer"},
	{`{"amount_minor":1e-99999999999999999999}`, "/amount_minor", "is not an integer"},
	{`{"amount_minor":"4900"}`, "/amount_minor", "must be an integer, got a string"},
	{`{"amount_minor":true}`, "/amount_minor", "must be an integer, got a boolean"},
	{`{"amount_minor":{"v":1}}`, "/amount_minor", "must be an integer, got an object"},
	{`{"amount_minor":[1]}`, "/amount_minor", "must be an integer, got an array"},
	{`{"amount_minor":9007199254740992}`, "/amount_minor", "outside"},
	{`{"items":[{"qty":1},{"qty":"2"}]}`, "/items/1/qty", "got a string"},
	{`{"items":[{"a":{"amount_minor":1.5}}]}`, "/items/0/a/amount_minor", "is not an integer"},
}

func TestIntegerFields(t *testing.T) {
	opts := integerFieldsOpts
	for _, c := range integerFieldsAccepted {
		if got := canon(t, c.in, opts); got != c.want {
			t.Errorf("Canonicalize(%s) = %s, want %s", c.in, got, c.want)
		}
	}

	for _, c := range integerFieldsRejected {
		rejects(t, c.in, opts, c.path, c.msg)
	}

	// The same documents are fine when no integer fields are configured.
	if got := canon(t, `{"amount_minor":"4900"}`, canonjson.Options{}); got != `{"amount_minor":"4900"}` {
		t.Errorf("without IntegerFields: got %s", got)
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := canonjson.Canonicalize([]byte(`{"amount_minor":4900.5}`), payments)
	if err == nil || !strings.HasPrefix(err.Error(), "/amount_minor: is not an integer") {
		t.Errorf("Error() = %v", err)
	}
	if got := (&canonjson.Error{Path: "", Msg: "must be a JSON object"}).Error(); got != "must be a JSON object" {
		t.Errorf("root Error() = %q", got)
	}
	// Pointers escape "/" and "~" as RFC 6901 requires.
	rejects(t, `{"a/b":{"c~d":true}}`, canonjson.Options{IntegerFields: []string{"c~d"}}, "/a~1b/c~0d", "got a boolean")
}

func TestInvalidInput(t *testing.T) {
	cases := []struct{ name, in, path, msg string }{
		{"duplicate", `{"a":1,"a":2}`, "/a", "duplicate"},
		{"duplicate escaped", `{"a":1,"\u0061":2}`, "/a", "duplicate"},
		{"duplicate null", `{"a":null,"a":1}`, "/a", "duplicate"},
		{"duplicate nested", `{"x":[{"k":1,"k":1}]}`, "/x/0/k", "duplicate"},
		{"invalid UTF-8 value", "{\"a\":\"\xff\"}", "/a", "UTF-8"},
		{"invalid UTF-8 name", "{\"\xc3\x28\":1}", "", "UTF-8"},
		{"encoded surrogate", "[\"\xed\xa0\x80\"]", "/0", "UTF-8"},
		{"lone surrogate escape", `{"a":"\ud800"}`, "/a", "surrogate"},
		{"trailing garbage", `{"a":1} x`, "", "unexpected data after the JSON value"},
		{"trailing value", `{"a":1} {}`, "", "unexpected data after the JSON value"},
		{"trailing comma", `{"a":1},`, "", "unexpected data after the JSON value"},
		{"empty", ``, "", "no value"},
		{"whitespace only", " \n", "", "no value"},
		{"truncated", `{"a":`, "/a", "unexpected EOF"},
		{"missing colon", `{"a" 1}`, "/a", "invalid JSON"},
		{"NaN", `{"a":NaN}`, "/a", "invalid JSON"},
		{"leading zero", `[01]`, "", "invalid JSON"},
		{"BOM", "\ufeff{}", "", "invalid JSON"},
		{"single quotes", `{'a':1}`, "", "invalid JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { rejects(t, c.in, canonjson.Options{}, c.path, c.msg) })
	}
	// Trailing whitespace is not trailing data.
	if got := canon(t, "{\"a\":1}\n\t ", canonjson.Options{}); got != `{"a":1}` {
		t.Errorf("trailing whitespace: got %s", got)
	}
}

func TestDepth(t *testing.T) {
	nest := func(n int, open, close string) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	arrays := nest(canonjson.MaxDepth, "[", "]")
	if got := canon(t, arrays, canonjson.Options{}); got != arrays {
		t.Errorf("depth %d arrays changed: %s", canonjson.MaxDepth, got)
	}
	objects := nest(canonjson.MaxDepth, `{"k":`, "}")
	if got := canon(t, objects, canonjson.Options{}); got != objects {
		t.Errorf("depth %d objects changed: %s", canonjson.MaxDepth, got)
	}

	rejects(t, nest(canonjson.MaxDepth+1, "[", "]"), canonjson.Options{}, "/"+strings.TrimSuffix(strings.Repeat("0/", canonjson.MaxDepth), "/"), "maximum depth of 64")
	rejects(t, nest(canonjson.MaxDepth+1, `{"k":`, "}"), canonjson.Options{}, strings.Repeat("/k", canonjson.MaxDepth), "maximum depth")
	// Hostile nesting is rejected without exhausting the stack, even unterminated.
	rejects(t, strings.Repeat("[", 1_000_000), canonjson.Options{}, "/"+strings.TrimSuffix(strings.Repeat("0/", canonjson.MaxDepth), "/"), "maximum depth")
}

func TestRequestHashKnownAnswer(t *testing.T) {
	// Written by hand from the rules; the SHA-256 is computed independently.
	const canonicalEnvelope = `{"action":"create_payment","payload":{"amount_minor":490000,"currency":"RUB","order_id":"817"}}`
	sum := sha256.Sum256([]byte(canonicalEnvelope))
	want := hex.EncodeToString(sum[:])

	payload := `{"order_id":"817","memo":null,"currency":"RUB","amount_minor":4.9e5}`
	h, canonical, err := canonjson.RequestHash("create_payment", []byte(payload), payments)
	if err != nil {
		t.Fatal(err)
	}
	if h != want {
		t.Errorf("hash = %s, want %s", h, want)
	}
	if got := string(canonical); got != `{"amount_minor":490000,"currency":"RUB","order_id":"817"}` {
		t.Errorf("canonical payload = %s", got)
	}

	// The action is hashed as a JSON string, escaped per RFC 8785.
	sum = sha256.Sum256([]byte(`{"action":"say \"hi\"\n","payload":{}}`))
	if got := hash(t, "say \"hi\"\n", `{}`, canonjson.Options{}); got != hex.EncodeToString(sum[:]) {
		t.Errorf("escaped action: hash = %s, want %x", got, sum)
	}
}

func TestRequestHashRejects(t *testing.T) {
	for _, in := range []string{`[]`, `"x"`, `1`, `null`, `true`, ` [{"a":1}] `} {
		h, c, err := canonjson.RequestHash("a", []byte(in), canonjson.Options{})
		if h != "" || c != nil {
			t.Errorf("RequestHash(%s) returned %q, %q with error", in, h, c)
		}
		wantError(t, in, err, "", "must be a JSON object")
		if err != nil && err.Error() != "must be a JSON object" {
			t.Errorf("RequestHash(%s): Error() = %q", in, err.Error())
		}
	}
	_, _, err := canonjson.RequestHash("a", []byte(`{"amount_minor":"1"}`), payments)
	wantError(t, "amount_minor string", err, "/amount_minor", "must be an integer")
	_, _, err = canonjson.RequestHash("a\xff", []byte(`{}`), payments)
	wantError(t, "invalid action", err, "", "action is not valid UTF-8")
}

// TestErrorsNeverQuoteTheInput: a refused value may be a secret (a card
// number, a CVC), and errors reach logs, so no error message carries the
// input's text.
func TestErrorsNeverQuoteTheInput(t *testing.T) {
	const secret = "4111111111111111"
	for _, in := range []string{
		`{"card_number":` + secret + `000}`,
		`{"card_number":` + secret + `e400}`,
		`{"amount_minor":` + secret + `.25}`,
		`{"card_number":` + secret + `x}`,
		`{"card_number":"` + secret + `"x}`,
		`{"card_number":` + secret + `,}`,
		`{"card_number":tru` + secret + `}`,
	} {
		_, err := canonjson.Canonicalize([]byte(in), payments)
		if err == nil {
			t.Errorf("%s: accepted", in)
			continue
		}
		if strings.Contains(err.Error(), secret[:8]) || strings.Contains(err.Error(), "4111") {
			t.Errorf("%s: the error quotes the value: %v", in, err)
		}
	}
}
