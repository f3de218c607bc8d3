package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// rawCodec puts bytes on the wire as they are: a client that can send
// anything.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

var _ encoding.Codec = rawCodec{}

// bytesField appends field num of wire type bytes holding v.
func bytesField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// codecJournal is a journal with authentication, its admin token and a
// connection that carries no token.
func codecJournal(t *testing.T) (*testserver.Journal, string) {
	t.Helper()
	b := make([]byte, 24)
	rand.Read(b)
	tok := "opj_" + hex.EncodeToString(b)
	a, err := auth.Parse([]byte(auth.FileHeader+auth.NewEntry("admin", tok, "acme", []auth.Role{auth.RoleAdmin}).YAML()), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return testserver.Start(t, nil, testserver.WithAuth(a, tok)), tok
}

// register sends msg as a RegisterRequest's bytes, with token if not "".
func register(t *testing.T, j *testserver.Journal, token string, msg []byte) error {
	t.Helper()
	ctx := t.Context()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	var out []byte
	return j.Conn.Invoke(ctx, "/opjournal.v1.JournalService/Register", msg, &out, grpc.ForceCodec(rawCodec{}))
}

// wantInvalid fails unless err is INVALID_ARGUMENT whose message holds
// every one of words.
func wantInvalid(t *testing.T, what string, err error, words ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Errorf("%s: %v, want INVALID_ARGUMENT", what, err)
		return
	}
	for _, w := range words {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("%s: %q does not name %q", what, st.Message(), w)
		}
	}
}

// The generated decoder keeps the guarantees of protobuf-go's: bytes are
// parsed only once the caller is authenticated, and invalid UTF-8 or
// garbage is INVALID_ARGUMENT naming the field, never INTERNAL.
func TestCodecRefusesBadBytesAfterAuthentication(t *testing.T) {
	t.Parallel()
	j, tok := codecJournal(t)
	key := bytesField(nil, 1, []byte("k-utf8"))
	action := bytesField(nil, 2, []byte("send_email"))
	str := func(s string) []byte { return bytesField(nil, 3, []byte(s)) } // google.protobuf.Value.string_value
	payload := func(k string, v []byte) []byte {
		return bytesField(nil, 3, bytesField(nil, 1, bytesField(bytesField(nil, 1, []byte(k)), 2, v)))
	}
	for name, tc := range map[string]struct {
		msg   []byte
		words []string
	}{
		"invalid UTF-8 in operation_key": {bytesField(nil, 1, []byte{0xff, 0xfe}), []string{"operation_key", "invalid UTF-8"}},
		"invalid UTF-8 in a payload string": {append(append(key, action...), payload("to", str("a\xc3\x28"))...),
			[]string{"payload.fields.value.string_value", "invalid UTF-8"}},
		"invalid UTF-8 in a payload key": {append(append(key, action...), payload("\xe2\x82", str("x"))...), []string{"payload.fields.key"}},
		"invalid UTF-8 in refs":          {append(append(key, action...), bytesField(nil, 5, bytesField(bytesField(nil, 1, []byte("r")), 2, []byte{0x80}))...), []string{"refs.value"}},
		"garbage":                        {[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01}, []string{"not a valid Register message"}},
		"a truncated payload":            {append(append(key, action...), 0x1a, 0x09, 0x0a), []string{"not a valid Register message"}},
	} {
		if err := register(t, j, "", tc.msg); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without a token: %v, want UNAUTHENTICATED", name, err)
		}
		wantInvalid(t, name, register(t, j, tok, tc.msg), tc.words...)
	}
	if _, err := j.Client.Lookup(t.Context(), &pb.LookupRequest{OperationKey: "k-utf8"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused request was stored: %v", err)
	}
}

// A payload nested as deep as a MaxRequestBytes message can be is decoded
// without exhausting the stack and refused past canonjson.MaxDepth with
// the field's path; the journal goes on serving.
func TestCodecDeepestMessageIsInvalidArgument(t *testing.T) {
	t.Parallel()
	j, tok := codecJournal(t)
	limit := 2*max(opjournal.DefaultMaxPayloadBytes, opjournal.DefaultMaxResultBytes) + 64<<10 // server.Config's default
	// Value{list_value: ListValue{values: [Value{...}]}}, written from the
	// inside out at the end of one buffer: two bytes of tag and length a
	// message while lengths are short.
	buf := make([]byte, limit-64)
	i, levels := len(buf), 0
	prepend := func(num protowire.Number) bool {
		n := len(buf) - i
		head := protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.BytesType), uint64(n))
		if len(head) > i {
			return false
		}
		i -= len(head)
		copy(buf[i:], head)
		return true
	}
	for prepend(1) && prepend(6) {
		levels++
	}
	// When the last ListValue's Value did not fit, the outer field is a
	// ListValue's: what it holds is the Value.
	inner := buf[i:]
	if inner[0] != byte(protowire.EncodeTag(6, protowire.BytesType)) {
		_, _, n := protowire.ConsumeTag(inner)
		inner, _ = protowire.ConsumeBytes(inner[n:])
	}
	msg := append(bytesField(bytesField(nil, 1, []byte("k-deep")), 2, []byte("send_email")),
		bytesField(nil, 3, bytesField(nil, 1, bytesField(bytesField(nil, 1, []byte("a")), 2, inner)))...)
	if len(msg) > limit {
		t.Fatalf("the message is %d bytes, over the limit %d", len(msg), limit)
	}
	t.Logf("%d bytes, %d levels of lists", len(msg), levels)
	wantInvalid(t, "the deepest payload", register(t, j, tok, msg), "payload/a"+strings.Repeat("/0", 63))

	// Still serving, and the same payload one level too deep for a
	// Struct's canonical JSON is refused the same way by both codecs.
	if _, err := j.Client.Register(context.Background(), &pb.RegisterRequest{OperationKey: "k-after", ActionType: "send_email",
		Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"to": structpb.NewStringValue("a@example.com")}}}); err != nil {
		t.Fatalf("after the deep message: %v", err)
	}
}

// Unknown fields are ignored, as protobuf-go's decoder ignores them (a
// newer client talking to an older journal); a map entry without a value
// is read as protobuf-go reads it, an empty Value.
func TestCodecUnknownFieldsAndEmptyEntries(t *testing.T) {
	t.Parallel()
	j, tok := codecJournal(t)
	good := &pb.RegisterRequest{OperationKey: "k-unknown", ActionType: "send_email",
		Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"to": structpb.NewStringValue("a@example.com")}}}
	msg, err := proto.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	msg = protowire.AppendVarint(protowire.AppendTag(msg, 999, protowire.VarintType), 7)
	msg = bytesField(msg, 998, []byte("\xff not UTF-8: not a string field we know"))
	if err := register(t, j, tok, msg); err != nil {
		t.Fatalf("with unknown fields: %v", err)
	}
	if _, err := j.Client.Lookup(t.Context(), &pb.LookupRequest{OperationKey: "k-unknown"}); err != nil {
		t.Fatalf("not stored: %v", err)
	}

	// {"to": <an entry with a key and no value>} and {"to": Value{}}.
	noValue := append(bytesField(bytesField(nil, 1, []byte("k-novalue")), 2, []byte("send_email")),
		bytesField(nil, 3, bytesField(nil, 1, bytesField(nil, 1, []byte("to"))))...)
	_, want := j.Client.Register(t.Context(), &pb.RegisterRequest{OperationKey: "k-empty", ActionType: "send_email",
		Payload: &structpb.Struct{Fields: map[string]*structpb.Value{"to": {}}}})
	got := register(t, j, tok, noValue)
	if status.Code(got) != status.Code(want) || strings.ReplaceAll(status.Convert(got).Message(), "k-novalue", "k-empty") != status.Convert(want).Message() {
		t.Fatalf("an entry without a value: %v; an empty Value: %v", got, want)
	}
}
