package server

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// restDecodeSeeds are bodies in and out of the fast path's forms.
var restDecodeSeeds = []string{
	`{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":1},"claim":{"worker_id":"w","lease_seconds":30}}`,
	`{"operationKey":"k","actionType":"send_email","payload":{"to":"a@example.com","n":[1,2.5,null,true]},"refs":{"order":"o-1","ticket":"T 2"},"view":"OPERATION_VIEW_FULL"}`,
	`{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":4900.0000000000000001}}`,
	`{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":9007199254740993}}`,
	`{"operation_key":"k","attempt":1,"external_id":"x","result":{"a":[1,2,{"b":null}]}}`,
	`{"operation_key":"k","attempt":"1","view":1}`,
	`{"operation_key":"k","attempt":"01"}`,
	`{"operation_key":"k","attempt":"+1"}`,
	`{"operation_key":"k","attempt":1e0}`,
	`{"operation_key":"k","attempt":1.0}`,
	`{"operation_key":"k","attempt":-0}`,
	`{"operation_key":"k","attempt":2147483648}`,
	`{"operation_key":"k","attempt":" 1"}`,
	`{"operation_key":"k\u00e9","attempt":1}`,
	`{"operation_key":"k","operationKey":"k"}`,
	`{"operation_key":"k","resolution":"RESOLUTION_SUCCEEDED","actor":"a","reason":"r","result":{"ok":true}}`,
	`{"operation_key":"k","resolution":"NOPE"}`,
	`{"operation_key":"k","resolution":7}`,
	`{"operation_key":null,"payload":null,"claim":null,"refs":null}`,
	`{"operation_key":"k","claim":{"worker_id":"w","workerId":"v"}}`,
	`{"operation_key":"k","claim":{"lease_seconds":"30"}}`,
	`{"operation_key":"k","refs":{"a":"b","c":"d\"e"}}`,
	`{"operation_key":"k","refs":{"a":1}}`,
	`{"operation_key":"k","payload":[]}`,
	`{"operation_key":"k","unknown":1}`,
	`{"operation_key":"k","payload":{"a":{"a":1},"b":"\ud800"}}`,
	`{}`,
}

// TestRESTDecodeMatchesProtojson holds the fast REST decoder to protojson:
// on every seed body and every method, either the fast path declines, or
// its message equals protojson's, with each Struct field's text decoding
// to protojson's Struct.
func TestRESTDecodeMatchesProtojson(t *testing.T) {
	for method := range requestTypes {
		for _, body := range restDecodeSeeds {
			checkRESTDecode(t, method, []byte(body))
		}
	}
	// The hot path's bodies must take the fast path.
	for method, body := range map[string]string{
		"Register":      restDecodeSeeds[0],
		"MarkSucceeded": restDecodeSeeds[4],
		"Resolve":       restDecodeSeeds[15],
	} {
		if !checkRESTDecode(t, method, []byte(body)) {
			t.Errorf("%s %s: not on the fast path", method, body)
		}
	}
	// And what is outside its forms must not.
	for _, body := range []string{restDecodeSeeds[8], restDecodeSeeds[13], restDecodeSeeds[14], restDecodeSeeds[25]} {
		if checkRESTDecode(t, "MarkSucceeded", []byte(body)) {
			t.Errorf("%s: on the fast path", body)
		}
	}
}

// FuzzRESTDecode is TestRESTDecodeMatchesProtojson on arbitrary bodies.
func FuzzRESTDecode(f *testing.F) {
	methods := []string{"Register", "Claim", "MarkSucceeded", "MarkFailedFinal", "Resolve", "ListOperations", "ExtendLease"}
	for _, s := range restDecodeSeeds {
		for i := range methods {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, m uint8, body []byte) {
		checkRESTDecode(t, methods[int(m)%len(methods)], body)
	})
}

// checkRESTDecode compares the fast decoder with protojson on one body and
// reports whether the fast path took it.
func checkRESTDecode(t *testing.T, method string, body []byte) bool {
	t.Helper()
	members, ok := parseMembers(body)
	if !ok {
		return false // the old path decodes it
	}
	rb, ok := decodeREST(method, body, members)
	if !ok {
		return false
	}
	if err := checkMembers(method, members); err != nil {
		t.Fatalf("%s %s: the fast path took a body the field hints refuse: %v", method, body, err)
	}
	want := requestTypes[method].New().Interface()
	if err := protojson.Unmarshal(body, want); err != nil {
		t.Fatalf("%s %s: the fast path took a body protojson refuses: %v", method, body, err)
	}
	// The Struct fields: their text, as protojson decodes it, is
	// protojson's Struct; then compare the rest.
	wm := want.ProtoReflect()
	fds := wm.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if fd.Kind() != protoreflect.MessageKind || fd.Message().FullName() != "google.protobuf.Struct" {
			continue
		}
		text, fastHas := rb.structs[string(fd.Name())]
		if wm.Has(fd) != fastHas {
			t.Fatalf("%s %s: field %s set by protojson: %v, by the fast path: %v", method, body, fd.Name(), wm.Has(fd), fastHas)
		}
		if !fastHas {
			continue
		}
		var got structpb.Struct
		if err := protojson.Unmarshal(text, &got); err != nil {
			t.Fatalf("%s %s: %s's text %s: %v", method, body, fd.Name(), text, err)
		}
		if !proto.Equal(&got, wm.Get(fd).Message().Interface()) {
			t.Fatalf("%s %s: %s: fast text %s, protojson %v", method, body, fd.Name(), text, wm.Get(fd).Message().Interface())
		}
		wm.Clear(fd)
	}
	if !proto.Equal(rb.msg, want) {
		t.Fatalf("%s %s: fast path %v, protojson %v", method, body, rb.msg, want)
	}
	return true
}
