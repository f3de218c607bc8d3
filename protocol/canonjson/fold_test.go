package canonjson_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// TestRequestRefusesFoldedNames: a request payload with two member names
// equal under case folding (at any depth, a null one included, through
// the special folds encoding/json applies) is refused by Request and
// StructRequest alike, as a duplicate name at the later member; a result
// (Canonicalize) keeps both.
func TestRequestRefusesFoldedNames(t *testing.T) {
	for _, c := range []struct{ in, path string }{
		{`{"amount_minor":100,"Amount_Minor":99999999}`, "/amount_minor"},
		{`{"Amount_Minor":99999999,"amount_minor":100}`, "/amount_minor"},
		{`{"a":{"b":[{"to":"x@example.com","TO":"y@example.com"}]}}`, "/a/b/0/to"},
		{`{"kind":"a","\u212aind":"b"}`, "/\u212aind"},                // the Kelvin sign folds to K
		{`{"s":"a","\u017f":"b"}`, "/\u017f"},                         // the long s folds to S
		{`{"id":"a","\u0130d":"b"}`, "/\u0130d"},                      // encoding/json folds İ to I
		{`{"amount_minor":100,"AMOUNT_MINOR":null}`, "/amount_minor"}, // null members count
	} {
		_, _, err := canonjson.Request("create_payment", []byte(c.in), canonjson.Options{})
		var ce *canonjson.Error
		if !errors.As(err, &ce) || !errors.Is(err, canonjson.ErrDuplicateName) {
			t.Errorf("Request(%s) = %v, want a duplicate name", c.in, err)
			continue
		}
		// Request reads members in document order, StructRequest in
		// canonical order: the member refused is the later in each.
		var st structpb.Struct
		if err := protojson.Unmarshal([]byte(c.in), &st); err != nil {
			t.Fatal(err)
		}
		_, _, serr := canonjson.StructRequest("create_payment", &st, canonjson.Options{})
		var se *canonjson.Error
		if !errors.As(serr, &se) || !errors.Is(serr, canonjson.ErrDuplicateName) || se.Path != c.path || se.Msg != ce.Msg {
			t.Errorf("StructRequest(%s) = %v, want a duplicate name at %s", c.in, serr, c.path)
		}
		if _, err := canonjson.Canonicalize([]byte(c.in), canonjson.Options{}); err != nil {
			t.Errorf("Canonicalize(%s) (a result) = %v, want accepted", c.in, err)
		}
	}
	// An exact duplicate is a duplicate name too.
	if _, err := canonjson.Canonicalize([]byte(`{"a":1,"a":2}`), canonjson.Options{}); !errors.Is(err, canonjson.ErrDuplicateName) {
		t.Errorf("an exact duplicate: %v", err)
	}
	// Names that only look alike are not folded together.
	for _, in := range []string{`{"a_b":1,"a-b":2}`, `{"straße":1,"STRASSE":2}`, `{"a":{"A":1},"b":{"a":1}}`} {
		if _, _, err := canonjson.Request("create_payment", []byte(in), canonjson.Options{}); err != nil {
			t.Errorf("Request(%s) = %v, want accepted", in, err)
		}
	}
}
