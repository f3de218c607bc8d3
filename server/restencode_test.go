package server

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// restOptions are the gateway's protojson options (http.go).
var restOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// protojsonCompact is protojson's text for m with the gateway's options,
// without the spaces it adds at random after colons and commas: the form
// the generated encoders write.
func protojsonCompact(t testing.TB, m proto.Message) ([]byte, error) {
	t.Helper()
	text, err := restOptions.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, text); err != nil {
		t.Fatalf("protojson wrote %s: %v", text, err)
	}
	return out.Bytes(), nil
}

// checkEncoder holds m's generated encoder to protojson: it must write
// exactly protojson's compact text (so protojson reads it back as it
// reads its own); or, if it declines, the marshaler's answer must be protojson's, error
// included. It reports whether the encoder wrote m.
func checkEncoder(t testing.TB, m proto.Message) bool {
	t.Helper()
	name := m.ProtoReflect().Descriptor().FullName()
	a, ok := m.(protoJSONAppender)
	if !ok {
		t.Fatalf("%s has no generated AppendProtoJSON", name)
	}
	want, wantErr := protojsonCompact(t, m)
	got, wrote := a.AppendProtoJSON(nil)
	if !wrote {
		viaMarshaler, err := (restMarshaler{&runtime.JSONPb{MarshalOptions: restOptions}}).Marshal(m)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s %v: declined, then the marshaler gave %v where protojson gave %v", name, m, err, wantErr)
		}
		if err == nil && !sameJSON(t, viaMarshaler, want) {
			t.Fatalf("%s: declined, then the marshaler wrote %s, not protojson's %s", name, viaMarshaler, want)
		}
		return false
	}
	if wantErr != nil {
		t.Fatalf("%s %v: wrote %s where protojson refuses it: %v", name, m, got, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\n generated: %s\n protojson: %s", name, got, want)
	}
	return true
}

// TestRESTAnswerMatchesProtojson fills every message of the API (every
// JournalService response, and the requests and parts too, since all get
// an encoder) with random values (empty, sparse and full messages, odd
// strings, extreme numbers, unknown enum numbers, times at every
// precision, Structs) and holds the generated encoders to protojson with
// the gateway's options, byte for byte.
func TestRESTAnswerMatchesProtojson(t *testing.T) {
	msgs := pb.File_opjournal_v1_journal_proto.Messages()
	rnd := rand.New(rand.NewPCG(1, 2))
	written := 0
	for i := 0; i < msgs.Len(); i++ {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(msgs.Get(i).FullName())
		if err != nil {
			t.Fatalf("no Go type for %s", msgs.Get(i).FullName())
		}
		for n := range 200 {
			m := mt.New()
			if n > 0 {
				fillRandom(rnd, m, 0, float64(n%4+1)/4)
			}
			if !checkEncoder(t, m.Interface()) {
				t.Fatalf("%s %v: declined", mt.Descriptor().FullName(), m.Interface())
			}
			written++
		}
	}
	t.Logf("%d messages compared", written)
}

// TestEveryResponseHasAGeneratedEncoder: a response message without
// AppendProtoJSON (one the generator skips, say for a float field) would
// silently be written by protojson, several times slower.
func TestEveryResponseHasAGeneratedEncoder(t *testing.T) {
	methods := pb.File_opjournal_v1_journal_proto.Services().ByName("JournalService").Methods()
	for i := 0; i < methods.Len(); i++ {
		out := methods.Get(i).Output()
		mt, err := protoregistry.GlobalTypes.FindMessageByName(out.FullName())
		if err != nil {
			t.Fatalf("no Go type for %s", out.FullName())
		}
		if _, ok := mt.New().Interface().(protoJSONAppender); !ok {
			t.Errorf("%s (the answer of %s) has no generated AppendProtoJSON", out.FullName(), methods.Get(i).Name())
		}
	}
}

// TestRESTAnswerEdgeCases holds the encoders to protojson on the values
// at the edges: 64-bit extremes, every enum value and unknown ones,
// Timestamps at their limits and precisions, escapes and non-ASCII text,
// nested Structs; and checks that what protojson refuses or the encoders
// leave to it is declined and then written (or refused) by protojson.
func TestRESTAnswerEdgeCases(t *testing.T) {
	ts := func(secs int64, nanos int32) *timestamppb.Timestamp {
		return &timestamppb.Timestamp{Seconds: secs, Nanos: nanos}
	}
	st := func(text string) *structpb.Struct {
		var s structpb.Struct
		if err := protojson.Unmarshal([]byte(text), &s); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		return &s
	}
	deep := func(n int) *structpb.Struct { // n Structs, each the only member of the one outside it
		s := &structpb.Struct{Fields: map[string]*structpb.Value{"leaf": structpb.NewBoolValue(true)}}
		for range n - 1 {
			s = &structpb.Struct{Fields: map[string]*structpb.Value{"d": structpb.NewStructValue(s)}}
		}
		return s
	}
	written := []proto.Message{
		&pb.ListEventsResponse{Events: []*pb.Event{{Id: math.MaxInt64}, {Id: math.MinInt64}, {Id: -1, Attempt: math.MinInt32}, {Attempt: math.MaxInt32}}},
		&pb.WhoAmIResponse{ExpiresAt: ts(-62135596800, 0)},         // 0001-01-01T00:00:00Z
		&pb.WhoAmIResponse{ExpiresAt: ts(253402300799, 999999999)}, // 9999-12-31T23:59:59.999999999Z
		&pb.WhoAmIResponse{ExpiresAt: ts(-1, 1)},
		&pb.WhoAmIResponse{ExpiresAt: ts(0, 0)},
		&pb.WhoAmIResponse{ExpiresAt: ts(951782400, 1000)},     // 2000-02-29, 6 digits
		&pb.WhoAmIResponse{ExpiresAt: ts(1764597600, 1000000)}, // 3 digits
		&pb.WhoAmIResponse{ExpiresAt: ts(1764597600, 120000000)},
		&pb.WhoAmIResponse{Name: "\b\f\n\r\t\x00\x1f\x7f \" \\ / <>&", PrincipalId: "é 日本 🙂 \u2028\u2029 \ufffd", Roles: []string{"", "a\"b"}},
		&pb.ListOperationsResponse{Operations: []*pb.Operation{{Refs: map[string]string{"b": "2", "a": "1", "": "", "é": "x", "Z": "z"}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: st(`{"z":1,"a":{"y":[1,2.5,-0.000001,1e-7,1e21,123456789012345678901234,-1e300,5e-324],"x":null},"":"","é":true,"n":[[],{},[[{}]]]}`)}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: &structpb.Struct{}, Result: &structpb.Struct{Fields: map[string]*structpb.Value{
			"s": structpb.NewStructValue(nil), "l": structpb.NewListValue(nil), "null": structpb.NewNullValue(), "odd-null": {Kind: &structpb.Value_NullValue{NullValue: 7}}}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: deep(64)}},
		&pb.ListOperationsRequest{NeedsReview: proto.Bool(false)},
		&pb.ListOperationsRequest{NeedsReview: proto.Bool(true), Statuses: []pb.Status{pb.Status(-3), pb.Status(99)}},
	}
	for v := range pb.Status_name {
		written = append(written, &pb.LookupResponse{Operation: &pb.Operation{Status: pb.Status(v)}})
	}
	for v := range pb.NextStep_name {
		written = append(written, &pb.RegisterResponse{Next: pb.NextStep(v)})
	}
	for v := range pb.Resolution_name {
		written = append(written, &pb.ResolveRequest{Resolution: pb.Resolution(v)})
	}
	for v := range pb.OperationView_name {
		written = append(written, &pb.LookupRequest{View: pb.OperationView(v)})
	}
	for _, m := range written {
		if !checkEncoder(t, m) {
			t.Errorf("%v: declined", m)
		}
	}
	declined := []proto.Message{
		&pb.WhoAmIResponse{ExpiresAt: ts(-62135596801, 0)},
		&pb.WhoAmIResponse{ExpiresAt: ts(253402300800, 0)},
		&pb.WhoAmIResponse{ExpiresAt: ts(0, -1)},
		&pb.WhoAmIResponse{ExpiresAt: ts(0, 1e9)},
		&pb.WhoAmIResponse{Name: "k\xff"},
		&pb.WhoAmIResponse{Roles: []string{"ok", "\xc3"}},
		&pb.LookupResponse{Operation: &pb.Operation{Refs: map[string]string{"\xff": "v"}}},
		&pb.LookupResponse{Operation: &pb.Operation{Refs: map[string]string{"k": "\xff"}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"\xff": structpb.NewBoolValue(true)}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"s": structpb.NewStringValue("\xff")}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"nan": structpb.NewNumberValue(math.NaN())}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"inf": structpb.NewNumberValue(math.Inf(-1))}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"none": {}}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"nil": nil}}}},
		&pb.LookupResponse{Operation: &pb.Operation{Payload: deep(70)}}, // protojson writes this one
		&pb.ListOperationsResponse{Operations: []*pb.Operation{{}, nil}},
		&pb.ListEventsResponse{Events: []*pb.Event{nil}},
	}
	for _, m := range declined {
		if checkEncoder(t, m) {
			t.Errorf("%v: written, not left to protojson", m)
		}
	}
}

// FuzzRESTAnswer decodes arbitrary bytes as a ListOperationsResponse (the
// richest answer: operations with Structs, Timestamps, maps, lists and an
// approval) and holds the encoder to protojson on whatever decodes:
//
//	go test -run '^$' -fuzz FuzzRESTAnswer -fuzztime 30s ./server/
func FuzzRESTAnswer(f *testing.F) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		m := (&pb.ListOperationsResponse{}).ProtoReflect()
		fillRandom(rnd, m, 0, 0.7)
		seed, err := proto.Marshal(m.Interface())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var m pb.ListOperationsResponse
		if proto.Unmarshal(wire, &m) != nil {
			t.Skip()
		}
		if !checkEncoder(t, &m) {
			if _, err := restOptions.Marshal(&m); err == nil && !structTooDeep(&m) {
				t.Fatalf("%v: declined, though protojson writes it", &m)
			}
		}
	})
}

// structTooDeep reports whether a Struct of m's operations nests deeper
// than the encoders write (the only value protojson writes that they
// leave to it).
func structTooDeep(m *pb.ListOperationsResponse) bool {
	var depth func(v *structpb.Value) int
	depth = func(v *structpb.Value) int {
		d := 0
		switch k := v.GetKind().(type) {
		case *structpb.Value_StructValue:
			for _, e := range k.StructValue.GetFields() {
				d = max(d, depth(e))
			}
			return d + 1
		case *structpb.Value_ListValue:
			for _, e := range k.ListValue.GetValues() {
				d = max(d, depth(e))
			}
			return d + 1
		}
		return 0
	}
	for _, op := range m.GetOperations() {
		if depth(structpb.NewStructValue(op.GetPayload())) > 64 || depth(structpb.NewStructValue(op.GetResult())) > 64 {
			return true
		}
	}
	return false
}

// sameJSON reports whether two JSON texts hold the same values (numbers
// compared by their text).
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	decode := func(text []byte) any {
		dec := json.NewDecoder(bytes.NewReader(text))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

var oddStrings = []string{"", "k", "op_1", "é and 日本", "quote \" back \\ slash", "ctl \x00\x01\x1f\n\r\t", "bs \b ff \f del \x7f", "<html>&", "\u2028\u2029", "emoji 🙂"}

var structSamples = []string{`{}`, `{"a":1}`, typicalPayload, `{"n":null,"l":[1,"x",[],{}],"f":0.1,"b":false,"big":9007199254740991,"neg":-1e-7}`}

// fillRandom sets m's fields at random, each with probability p.
func fillRandom(rnd *rand.Rand, m protoreflect.Message, depth int, p float64) {
	fds := m.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if rnd.Float64() > p {
			continue
		}
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rnd.IntN(3) {
				if fd.Kind() == protoreflect.MessageKind {
					if depth > 2 {
						break
					}
					e := l.NewElement()
					fillMessage(rnd, e.Message(), depth+1, p)
					l.Append(e)
				} else {
					l.Append(randomScalar(rnd, fd))
				}
			}
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rnd.IntN(3) {
				mp.Set(protoreflect.ValueOfString(oddStrings[rnd.IntN(len(oddStrings))]).MapKey(), randomScalar(rnd, fd.MapValue()))
			}
		case fd.Kind() == protoreflect.MessageKind:
			if depth > 2 {
				continue
			}
			fillMessage(rnd, m.Mutable(fd).Message(), depth+1, p)
		default:
			m.Set(fd, randomScalar(rnd, fd))
		}
	}
}

// fillMessage fills a message field: the well-known types with valid
// values, the rest at random.
func fillMessage(rnd *rand.Rand, m protoreflect.Message, depth int, p float64) {
	switch m.Descriptor().FullName() {
	case "google.protobuf.Timestamp":
		fds := m.Descriptor().Fields()
		nanos := []int64{0, 5e8, 123e6, 123456e3, 123456789, 1}[rnd.IntN(6)]
		m.Set(fds.ByName("seconds"), protoreflect.ValueOfInt64(rnd.Int64N(253402300799+62135596800)-62135596800))
		m.Set(fds.ByName("nanos"), protoreflect.ValueOfInt32(int32(nanos)))
	case "google.protobuf.Struct":
		var st structpb.Struct
		if err := protojson.Unmarshal([]byte(structSamples[rnd.IntN(len(structSamples))]), &st); err != nil {
			panic(err)
		}
		proto.Merge(m.Interface(), &st)
	default:
		fillRandom(rnd, m, depth, p)
	}
}

func randomScalar(rnd *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(oddStrings[rnd.IntN(len(oddStrings))])
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(rnd.IntN(2) == 1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -1, math.MaxInt32, math.MinInt32}[rnd.IntN(5)])
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64([]int64{0, 1, -1, math.MaxInt64, math.MinInt64}[rnd.IntN(5)])
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32([]uint32{0, 1, math.MaxUint32}[rnd.IntN(3)])
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64([]uint64{0, 1, math.MaxUint64}[rnd.IntN(3)])
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(oddStrings[rnd.IntN(len(oddStrings))]))
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if rnd.IntN(5) == 0 {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(vals.Len() + 40)) // unknown: written as a number
		}
		return protoreflect.ValueOfEnum(vals.Get(rnd.IntN(vals.Len())).Number())
	}
	panic("randomScalar: " + fd.Kind().String())
}
