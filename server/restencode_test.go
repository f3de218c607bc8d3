package server

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/opjournal/opjournal/gen/opjournal/v1"
)

// TestRESTAnswerMatchesProtojson fills every JournalService response with
// random values (empty, sparse and full messages, odd strings, extreme
// numbers, unknown enum numbers, times at every precision, Structs) and
// holds appendMessage to protojson with the gateway's options: the same
// JSON values member for member, and text that protojson reads back into
// the same message.
func TestRESTAnswerMatchesProtojson(t *testing.T) {
	mo := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	methods := pb.File_opjournal_v1_journal_proto.Services().ByName("JournalService").Methods()
	rnd := rand.New(rand.NewPCG(1, 2))
	written := 0
	for i := 0; i < methods.Len(); i++ {
		out := methods.Get(i).Output()
		mt, err := protoregistry.GlobalTypes.FindMessageByName(out.FullName())
		if err != nil {
			t.Fatalf("no Go type for %s", out.FullName())
		}
		for n := range 200 {
			m := mt.New()
			if n > 0 {
				fillRandom(rnd, m, 0, float64(n%4+1)/4)
			}
			got, err := appendMessage(nil, m)
			if err != nil {
				t.Fatalf("%s %v: declined: %v", out.FullName(), m.Interface(), err)
			}
			written++
			want, err := mo.Marshal(m.Interface())
			if err != nil {
				t.Fatalf("protojson: %v", err)
			}
			if !sameJSON(t, got, want) {
				t.Fatalf("%s:\n ours:      %s\n protojson: %s", out.FullName(), got, want)
			}
			back := mt.New().Interface()
			if err := protojson.Unmarshal(got, back); err != nil || !proto.Equal(back, m.Interface()) {
				t.Fatalf("%s: protojson reads %s back as %v (%v), not %v", out.FullName(), got, back, err, m.Interface())
			}
		}
	}
	// What it does not write, protojson does, errors included.
	bad := &pb.RegisterResponse{Operation: &pb.Operation{OperationKey: "k\xff"}}
	if _, err := appendMessage(nil, bad.ProtoReflect()); err == nil {
		t.Fatalf("appendMessage wrote invalid UTF-8")
	}
	if _, err := (restMarshaler{&runtime.JSONPb{MarshalOptions: mo}}).Marshal(bad); err == nil {
		t.Fatalf("the fallback took invalid UTF-8")
	}
	t.Logf("%d answers compared", written)
}

// sameJSON reports whether two JSON texts hold the same values (numbers
// compared by their text).
func sameJSON(t *testing.T, a, b []byte) bool {
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

var oddStrings = []string{"", "k", "op_1", "é and 日本", "quote \" back \\ slash", "ctl \x00\x01\x1f\n\r\t", "<html>&", "\u2028\u2029", "emoji 🙂"}

var structTexts = []string{`{}`, `{"a":1}`, typicalPayload, `{"n":null,"l":[1,"x",[],{}],"f":0.1,"b":false,"big":9007199254740991,"neg":-1e-7}`}

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
		if err := protojson.Unmarshal([]byte(structTexts[rnd.IntN(len(structTexts))]), &st); err != nil {
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

// BenchmarkRESTAnswer compares protojson with appendMessage on a fused
// register's answer (BASIC view, claimed):
//
//	go test -run '^$' -bench RESTAnswer -benchmem ./server/
func BenchmarkRESTAnswer(b *testing.B) {
	now := timestamppb.New(time.Date(2026, 12, 1, 14, 0, 0, 123456789, time.UTC))
	resp := &pb.RegisterResponse{Operation: &pb.Operation{OperationKey: "payment:order-817:intent-01", ActionType: "create_payment",
		RequestHash: strings.Repeat("ab", 32), Status: pb.Status_STATUS_IN_PROGRESS, AttemptCount: 1, LeaseOwner: "agent-1",
		LeaseUntil: now, CreatedAt: now, UpdatedAt: now}, Created: true, Claimed: true, Attempt: 1, LeaseUntil: now, LeaseSeconds: 30}
	mo := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := mo.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		m := restMarshaler{&runtime.JSONPb{MarshalOptions: mo}}
		for b.Loop() {
			if _, err := m.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
