package protojsonrt_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/opjournal/opjournal/internal/protojsonrt"
)

// compact is protojson's text for m without the spaces it adds at random.
func compact(t *testing.T, m proto.Message) ([]byte, bool) {
	t.Helper()
	text, err := protojson.Marshal(m)
	if err != nil {
		return nil, false
	}
	var out bytes.Buffer
	if err := json.Compact(&out, text); err != nil {
		t.Fatalf("protojson wrote %s: %v", text, err)
	}
	return out.Bytes(), true
}

// TestAppendStringMatchesProtojson: every byte alone and inside text,
// runes of every length, and broken UTF-8, against protojson's
// StringValue (written as a bare JSON string).
func TestAppendStringMatchesProtojson(t *testing.T) {
	var cases []string
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}), "ab"+string([]byte{byte(c)})+"cd")
	}
	cases = append(cases, "", "é", "日本", "🙂", "\u2028\u2029", "\ufffd", "a\xc3", "\xe6\x97", "\xf0\x9f\x99", "\xed\xa0\x80", "plain ascii text")
	for _, s := range cases {
		want, ok := compact(t, wrapperspb.String(s))
		got, wrote := protojsonrt.AppendString([]byte("x"), s)
		if wrote != ok {
			t.Fatalf("%q: wrote %v, protojson accepts %v", s, wrote, ok)
		}
		if ok && !bytes.Equal(got[1:], want) {
			t.Fatalf("%q: %s, protojson %s", s, got[1:], want)
		}
	}
}

// TestAppendTimestampMatchesProtojson: random times over the whole range
// at every precision, the limits, and times beyond them (declined, as
// protojson refuses them).
func TestAppendTimestampMatchesProtojson(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	const lo, hi = -62135596800, 253402300799
	cases := []*timestamppb.Timestamp{{Seconds: lo}, {Seconds: hi, Nanos: 999999999}, {Seconds: lo - 1}, {Seconds: hi + 1},
		{Nanos: -1}, {Nanos: 1e9}, {Seconds: -1, Nanos: 999999999}, {}}
	for range 5000 {
		nanos := []int32{0, rnd.Int32N(1000) * 1e6, rnd.Int32N(1e6) * 1e3, rnd.Int32N(1e9)}[rnd.IntN(4)]
		cases = append(cases, &timestamppb.Timestamp{Seconds: lo + rnd.Int64N(hi-lo+1), Nanos: nanos})
	}
	for _, ts := range cases {
		want, ok := compact(t, ts)
		got, wrote := protojsonrt.AppendTimestamp(nil, ts)
		if wrote != ok || ok && !bytes.Equal(got, want) {
			t.Fatalf("%v: %s (%v), protojson %s (%v)", ts, got, wrote, want, ok)
		}
	}
}

// TestAppendValueNumbersMatchProtojson: numbers at the edges of the
// exponent forms, and random bit patterns, in a Value.
func TestAppendValueNumbersMatchProtojson(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	cases := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789e13, math.MaxFloat64,
		math.SmallestNonzeroFloat64, -1e-300, 5e-324, math.NaN(), math.Inf(1), math.Inf(-1)}
	for range 5000 {
		cases = append(cases, math.Float64frombits(rnd.Uint64()))
	}
	for _, f := range cases {
		v := structpb.NewNumberValue(f)
		want, ok := compact(t, v)
		got, wrote := protojsonrt.AppendValue(nil, v)
		if wrote != ok || ok && !bytes.Equal(got, want) {
			t.Fatalf("%v: %s (%v), protojson %s (%v)", f, got, wrote, want, ok)
		}
	}
}
