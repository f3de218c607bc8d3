package protocodec

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal/internal/testkit/benchpayload"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// payload is the benchmarks' 1 KiB order (package benchpayload).
func payload(tb testing.TB) *structpb.Struct { return benchpayload.Order(tb) }

func registerRequest(tb testing.TB) *pb.RegisterRequest {
	return &pb.RegisterRequest{OperationKey: "payment:817", ActionType: "create_payment", Payload: payload(tb),
		Claim: &pb.ClaimOptions{WorkerId: "bench"}}
}

func registerResponse(tb testing.TB) *pb.RegisterResponse {
	at := timestamppb.New(timestamppb.Now().AsTime())
	return &pb.RegisterResponse{Claimed: true, Attempt: 1, Operation: &pb.Operation{OperationKey: "payment:817",
		ActionType: "create_payment", Status: pb.Status_STATUS_IN_PROGRESS, AttemptCount: 1, LeaseOwner: "bench",
		CreatedAt: at, UpdatedAt: at, LeaseUntil: at, AttemptStartedAt: at, Refs: map[string]string{"order": "817"}}, LeaseUntil: at, LeaseSeconds: 30}
}

// registerResponse's answer as a replay gives it: with the stored
// result (here the 1 KiB order), whose members the codec sorts.
func replayResponse(tb testing.TB) *pb.RegisterResponse {
	r := registerResponse(tb)
	r.Claimed, r.Attempt, r.LeaseUntil, r.LeaseSeconds = false, 0, nil, 0
	r.Operation.Status, r.Operation.Result = pb.Status_STATUS_SUCCEEDED, payload(tb)
	return r
}

func marshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	bs, err := MarshalSorted(m)
	if err != nil {
		tb.Fatal(err)
	}
	return bs.Materialize()
}

// The generated code and protobuf-go read each other's bytes: a journal
// with this codec talks to clients without it, and the other way round.
func TestInteroperatesWithProtobufGo(t *testing.T) {
	t.Parallel()
	for _, m := range []proto.Message{registerRequest(t), registerResponse(t), replayResponse(t)} {
		vt := marshal(t, m)
		if len(vt) != proto.Size(m) {
			t.Errorf("%T: %d bytes, protobuf-go writes %d", m, len(vt), proto.Size(m))
		}
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(vt, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%T: protobuf-go read %v (%v), want %v", m, back, err, m)
		}
		ref, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back = m.ProtoReflect().New().Interface()
		if err := Unmarshal(ref, back); err != nil || !proto.Equal(back, m) {
			t.Errorf("%T: read %v (%v), want %v", m, back, err, m)
		}
	}
}

// field appends field num of wire type bytes holding v.
func field(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// value returns a google.protobuf.Value holding the string s.
func stringValue(s string) []byte { return field(nil, 3, []byte(s)) }

// structOf returns a google.protobuf.Struct of one field.
func structOf(key string, value []byte) []byte {
	return field(nil, 1, field(field(nil, 1, []byte(key)), 2, value))
}

// Invalid UTF-8 anywhere a string is, at the top, in a map, as a Struct's
// key or deep in a payload, is refused with the field's path, as
// protobuf-go refuses it.
func TestInvalidUTF8IsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	bad := "\xff\xfe"
	for name, tc := range map[string]struct {
		msg  []byte
		into proto.Message
		path string
	}{
		"operation key": {field(nil, 1, []byte(bad)), &pb.RegisterRequest{}, "operation_key"},
		"refs value":    {field(nil, 5, field(field(nil, 1, []byte("k")), 2, []byte(bad))), &pb.RegisterRequest{}, "refs.value"},
		"refs key":      {field(nil, 5, field(nil, 1, []byte(bad))), &pb.RegisterRequest{}, "refs.key"},
		"payload key":   {field(nil, 3, structOf(bad, stringValue("x"))), &pb.RegisterRequest{}, "payload.fields.key"},
		"deep string": {field(nil, 3, structOf("a", field(nil, 5, structOf("b", field(nil, 6, field(nil, 1, stringValue(bad))))))),
			&pb.RegisterRequest{}, "payload.fields.value.struct_value.fields.value.list_value.values.string_value"},
		"worker id in a claim": {field(nil, 4, field(nil, 1, []byte(bad))), &pb.RegisterRequest{}, "claim.worker_id"},
		"operation result":     {field(nil, 1, field(nil, 7, structOf("r", stringValue(bad)))), &pb.LookupResponse{}, "operation.result.fields.value.string_value"},
	} {
		if err := proto.Unmarshal(tc.msg, tc.into.ProtoReflect().New().Interface()); err == nil {
			t.Fatalf("%s: protobuf-go accepted the message: the test builds the wrong bytes", name)
		}
		err := Unmarshal(tc.msg, tc.into)
		if want := "string field " + tc.path + " contains invalid UTF-8"; err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	// The same bytes in a bytes field are no string: nothing to check.
	if err := Unmarshal(field(nil, 1, []byte(bad)), &structpb.Value{}); err != nil {
		t.Errorf("enum field: %v", err)
	}
}

func TestGarbageIsAnError(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{{0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01}, {0x0a, 0x05, 'a'}, {0x1a, 0x03, 0x0a, 0x09, 0x00}, {0x07}} {
		if err := Unmarshal(b, &pb.RegisterRequest{}); err == nil {
			t.Errorf("%x decoded", b)
		}
	}
}

// nested returns a Value holding a list nested depth levels deep (two
// messages a level), built from the inside out into one buffer.
func nested(depth int) []byte {
	// Each level is at most 2 tags and 2 varints of at most 4 bytes.
	buf := make([]byte, 10*depth+16)
	i := len(buf)
	prepend := func(b []byte) { i -= len(b); copy(buf[i:], b) }
	for range depth {
		n := len(buf) - i
		prepend(protowire.AppendVarint(nil, uint64(n)))
		prepend(protowire.AppendTag(nil, 1, protowire.BytesType)) // ListValue.values
		n = len(buf) - i
		prepend(protowire.AppendVarint(nil, uint64(n)))
		prepend(protowire.AppendTag(nil, 6, protowire.BytesType)) // Value.list_value
	}
	return buf[i:]
}

// A message nested deeper than RecursionLimit is refused before the
// generated code, which has no limit, recurses into it; one at the limit
// decodes, as deep as it is, and within the goroutine stack's limit (which
// protobuf-go's decoder, needing about twice the stack a level, would not
// fit: a fatal error that takes the process down).
func TestNestingIsBounded(t *testing.T) {
	// A Value of nested(10) is 21 messages: 10 Value and ListValue pairs
	// and the innermost empty Value.
	valuePlan := planOf((&structpb.Value{}).ProtoReflect().Descriptor())
	if err := check(nested(10), valuePlan, 21); err != nil {
		t.Fatalf("21 levels within 21: %v", err)
	}
	if err := check(nested(10), valuePlan, 20); !errors.Is(err, errTooDeep) {
		t.Fatalf("21 levels within 20: %v, want %v", err, errTooDeep)
	}

	// A RegisterRequest, its payload and the payload's entry are 3 more.
	levels := func(pairs int) int { return 3 + 2*pairs + 1 }
	pairs := (RecursionLimit - 4) / 2
	if levels(pairs) != RecursionLimit || levels(pairs+1) <= RecursionLimit {
		t.Fatalf("the test's arithmetic: %d, %d", levels(pairs), levels(pairs+1))
	}
	req := &pb.RegisterRequest{}
	if err := Unmarshal(field(nil, 3, structOf("a", nested(pairs+1))), req); !errors.Is(err, errTooDeep) {
		t.Fatalf("%d levels: %v, want %v", levels(pairs+1), err, errTooDeep)
	}
	if err := Unmarshal(field(nil, 3, structOf("a", nested(pairs))), req); err != nil {
		t.Fatalf("%d levels: %v", levels(pairs), err)
	}
	depth := 0
	for v := req.GetPayload().GetFields()["a"]; v.GetListValue() != nil; v = v.GetListValue().GetValues()[0] {
		depth++
	}
	if depth != pairs {
		t.Fatalf("decoded %d levels of lists, want %d", depth, pairs)
	}
}

// Unknown fields are kept in a journal message, as protobuf-go keeps them
// (a newer client's fields reach an older journal and are ignored there).
func TestUnknownFieldsAreKept(t *testing.T) {
	t.Parallel()
	b := marshal(t, registerRequest(t))
	b = protowire.AppendTag(b, 999, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	got, want := &pb.RegisterRequest{}, &pb.RegisterRequest{}
	if err := Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) || len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Fatalf("got %v (unknown %x), want %v", got, got.ProtoReflect().GetUnknown(), want)
	}
}

// FuzzUnmarshal: the codec accepts no message protobuf-go refuses for its
// UTF-8 or its nesting, and what both accept decodes to the same values
// as JSON (the journal reads payloads as JSON).
func FuzzUnmarshal(f *testing.F) {
	f.Add(marshal(f, registerRequest(f)))
	f.Add(field(nil, 3, structOf("a", field(nil, 5, structOf("\xff", stringValue("x"))))))
	f.Add(field(nil, 1, []byte("\xc3\x28")))
	f.Add(field(nil, 3, nested(40)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := &pb.RegisterRequest{}, &pb.RegisterRequest{}
		err := Unmarshal(b, got)
		refErr := proto.UnmarshalOptions{RecursionLimit: RecursionLimit}.Unmarshal(b, want)
		if err == nil && refErr != nil {
			t.Fatalf("accepted %x, which protobuf-go refuses: %v", b, refErr)
		}
		if err != nil || refErr != nil {
			return
		}
		// The generated Struct code drops unknown fields in a payload and
		// leaves a map entry without a value nil: equal as JSON.
		gj, _ := got.GetPayload().MarshalJSON()
		wj, _ := want.GetPayload().MarshalJSON()
		if string(gj) != string(wj) || got.GetOperationKey() != want.GetOperationKey() || got.GetClaim().GetWorkerId() != want.GetClaim().GetWorkerId() {
			t.Fatalf("%x: decoded %v, protobuf-go %v", b, got, want)
		}
	})
}

func BenchmarkCodec(b *testing.B) {
	for _, tc := range []struct {
		name string
		msg  proto.Message
	}{{"RegisterRequest", registerRequest(b)}, {"RegisterResponse", registerResponse(b)}, {"ReplayResponse", replayResponse(b)}} {
		wire, err := proto.Marshal(tc.msg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"/marshal/reflection", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proto.Marshal(tc.msg); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/marshal/vtproto", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bs, err := Marshal(tc.msg)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free() // as grpc does once the bytes are written
			}
		})
		b.Run(tc.name+"/marshal/sorted", func(b *testing.B) { // the server's answers
			b.ReportAllocs()
			for b.Loop() {
				bs, err := MarshalSorted(tc.msg)
				if err != nil {
					b.Fatal(err)
				}
				bs.Free()
			}
		})
		b.Run(tc.name+"/unmarshal/reflection", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := (proto.UnmarshalOptions{RecursionLimit: RecursionLimit}).Unmarshal(wire, tc.msg.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/unmarshal/vtproto", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := Unmarshal(wire, tc.msg.ProtoReflect().New().Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/unmarshal/vtproto-without-utf8-walk", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.msg.ProtoReflect().New().Interface().(vtMessage).UnmarshalVT(wire); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A stored result reaches every client in one member order, sorted as the
// REST mirror and the canonical form sort it, however often it is sent:
// a client that keeps the order it reads (JavaScript, Python) sees a
// replay exactly as it saw the first.
func TestStructMembersInOneOrder(t *testing.T) {
	t.Parallel()
	result, err := structpb.NewStruct(map[string]any{
		"status": "succeeded", "payment_id": "pay_1", "amount_minor": 1200, "currency": "EUR",
		"meta": map[string]any{"z": 1, "a": 2, "m": []any{map[string]any{"y": 1, "b": 2}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	answer := &pb.RegisterResponse{Operation: &pb.Operation{OperationKey: "payment:1", Result: result}}
	first := marshal(t, answer)
	for range 50 {
		if got := marshal(t, answer); string(got) != string(first) {
			t.Fatal("the same answer marshalled to different bytes")
		}
	}
	var keys []string
	st := answer.Operation.Result
	b := first
	// Walk the bytes: RegisterResponse.operation → Operation.result →
	// Struct.fields entries, each with its key first.
	b = fieldBytes(t, b, 1)
	b = fieldBytes(t, b, 7)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			t.Fatalf("unexpected field %d in Struct", num)
		}
		entry, n := protowire.ConsumeBytes(b)
		b = b[n:]
		_, _, n = protowire.ConsumeTag(entry)
		key, _ := protowire.ConsumeBytes(entry[n:])
		keys = append(keys, string(key))
	}
	want := []string{"amount_minor", "currency", "meta", "payment_id", "status"}
	if len(keys) != len(st.Fields) || fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("members in order %v, want %v", keys, want)
	}
}

// fieldBytes returns the bytes of the first field num of message b.
func fieldBytes(t *testing.T, b []byte, num protowire.Number) []byte {
	t.Helper()
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			return v
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		b = b[l:]
	}
	t.Fatalf("no field %d", num)
	return nil
}

// An answer without a Struct member keeps the generated encoder: only
// the messages whose bytes depend on map order pay for sorting.
func TestOnlyStructsWithMembersAreSorted(t *testing.T) {
	t.Parallel()
	empty, _ := structpb.NewStruct(nil)
	full, _ := structpb.NewStruct(map[string]any{"a": 1})
	for _, c := range []struct {
		m    proto.Message
		want bool
	}{
		{&pb.RegisterResponse{Operation: &pb.Operation{OperationKey: "k"}}, false},
		{&pb.RegisterResponse{Operation: &pb.Operation{OperationKey: "k", Result: empty}}, false},
		{&pb.RegisterResponse{Operation: &pb.Operation{OperationKey: "k", Result: full}}, true},
		{&pb.ListOperationsResponse{Operations: []*pb.Operation{{}, {Payload: full}}}, true},
		{&pb.ListOperationsResponse{Operations: []*pb.Operation{{}, {}}}, false},
		{timestamppb.Now(), false},
	} {
		if got := holdsMembers(c.m); got != c.want {
			t.Errorf("holdsMembers(%v) = %v, want %v", c.m, got, c.want)
		}
	}
}
