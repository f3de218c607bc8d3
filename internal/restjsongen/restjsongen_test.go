package restjsongen_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/opjournal/opjournal/internal/restjsongen"
)

// field is a FieldDescriptorProto of a proto3 message.
func field(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string, oneof *int32) *descriptorpb.FieldDescriptorProto {
	f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(),
		Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name), OneofIndex: oneof}
	if typeName != "" {
		f.TypeName = proto.String(typeName)
	}
	return f
}

// generate runs the generator on one file of the given messages and
// returns the text it writes.
func generate(t *testing.T, msgs ...*descriptorpb.DescriptorProto) string {
	t.Helper()
	file := &descriptorpb.FileDescriptorProto{Name: proto.String("t/v1/t.proto"), Package: proto.String("t.v1"), Syntax: proto.String("proto3"),
		Options: &descriptorpb.FileOptions{GoPackage: proto.String("example.com/t/v1;tv1")}, MessageType: msgs,
		Dependency: []string{"google/protobuf/timestamp.proto"}}
	ts := protodesc.ToFileDescriptorProto(timestamppb.File_google_protobuf_timestamp_proto)
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: []string{"t/v1/t.proto"}, ProtoFile: []*descriptorpb.FileDescriptorProto{ts, file},
		Parameter: proto.String("paths=source_relative")}
	p, err := protogen.Options{}.New(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := restjsongen.Generate(p); err != nil {
		t.Fatal(err)
	}
	resp := p.Response()
	if resp.Error != nil {
		t.Fatal(resp.GetError())
	}
	if len(resp.File) != 1 || resp.File[0].GetName() != "t/v1/t_restjson.pb.go" {
		t.Fatalf("files: %v", resp.File)
	}
	return resp.File[0].GetContent()
}

// TestUnwrittenFieldsLeaveTheMessageToProtojson: a message with a field
// the generator does not write gets no method, and neither does one that
// holds it, however deep; the others do.
func TestUnwrittenFieldsLeaveTheMessageToProtojson(t *testing.T) {
	typ := descriptorpb.FieldDescriptorProto_TYPE_STRING
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	zero := int32(0)
	out := generate(t,
		&descriptorpb.DescriptorProto{Name: proto.String("Float"), Field: []*descriptorpb.FieldDescriptorProto{
			field("d", 1, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "", nil)}},
		&descriptorpb.DescriptorProto{Name: proto.String("HoldsFloat"), Field: []*descriptorpb.FieldDescriptorProto{
			field("f", 1, msg, ".t.v1.Float", nil)}},
		&descriptorpb.DescriptorProto{Name: proto.String("HoldsHoldsFloat"), Field: []*descriptorpb.FieldDescriptorProto{
			field("h", 1, msg, ".t.v1.HoldsFloat", nil)}},
		&descriptorpb.DescriptorProto{Name: proto.String("Oneof"), Field: []*descriptorpb.FieldDescriptorProto{
			field("a", 1, typ, "", &zero), field("b", 2, typ, "", &zero)},
			OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("choice")}}},
		&descriptorpb.DescriptorProto{Name: proto.String("Optional"), Field: []*descriptorpb.FieldDescriptorProto{
			func() *descriptorpb.FieldDescriptorProto {
				f := field("o", 1, descriptorpb.FieldDescriptorProto_TYPE_INT32, "", &zero)
				f.Proto3Optional = proto.Bool(true)
				return f
			}(), field("s", 2, typ, "", nil)},
			OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("_o")}}},
		&descriptorpb.DescriptorProto{Name: proto.String("Plain"), Field: []*descriptorpb.FieldDescriptorProto{
			field("s", 1, typ, "", nil), field("t", 2, msg, ".google.protobuf.Timestamp", nil)}},
	)
	for _, want := range []string{
		"// Float has no AppendProtoJSON: field d is a double.",
		"// HoldsFloat has no AppendProtoJSON: field f holds t.v1.Float, which has no AppendProtoJSON.",
		"// HoldsHoldsFloat has no AppendProtoJSON: field h holds t.v1.HoldsFloat, which has no AppendProtoJSON.",
		"// Oneof has no AppendProtoJSON: field a is in a oneof.",
		"func (x *Optional) AppendProtoJSON(b []byte) ([]byte, bool) {",
		"start := len(b)", // the comma before s depends on whether o was written
		"func (x *Plain) AppendProtoJSON(b []byte) ([]byte, bool) {",
		"protojsonrt.AppendTimestamp(b, x.T)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("generated code lacks %q:\n%s", want, out)
		}
	}
}
