package gateway

import (
	"strings"
	"testing"
)

// TestReadClientKey: the Idempotency-Key field as the draft defines it (an
// RFC 8941 sf-string) and as Stripe-style clients send it (bare). A value
// that starts with a quote is an sf-string or refused, never a bare key;
// the key's text is the field as sent, so a quoted key keeps the
// operation key it had before the field was parsed.
func TestReadClientKey(t *testing.T) {
	long := strings.Repeat("k", maxClientKeyLen)
	for _, c := range []struct {
		lines []string
		want  string // "" for refused
	}{
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		{[]string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, `8e03978e-40d5-43e8-bc93-6894a57f9324`},
		{[]string{` "order 817" `}, `"order 817"`},     // a space inside the string is allowed; OWS around it is not the key
		{[]string{`"a\"b\\c"`}, `"a\"b\\c"`},           // the two escapes of sf-string
		{[]string{`"` + long + `"`}, `"` + long + `"`}, // 255 characters between the quotes
		{[]string{long}, long},            // 255 bare
		{[]string{`"unterminated`}, ""},   // starts with a quote: an sf-string or nothing
		{[]string{`"a\nb"`}, ""},          // no other escape
		{[]string{`"abc";p=1`}, ""},       // no parameters
		{[]string{`"abc" x`}, ""},         // nothing after the string
		{[]string{`"abc", "def"`}, ""},    // a list, not an item
		{[]string{`""`}, ""},              // empty
		{[]string{""}, ""},                // an empty field
		{[]string{`"` + long + `k"`}, ""}, // 256 characters
		{[]string{long + "k"}, ""},        // 256 bare
		{[]string{"a b"}, ""},             // a bare key has no space
		{[]string{"caf\xc3\xa9"}, ""},     // nor anything beyond ASCII
		{[]string{"\"caf\xc3\xa9\""}, ""}, // nor does an sf-string
		{[]string{`"one"`, `"two"`}, ""},  // the field sent twice
		{[]string{"one", "one"}, ""},      // even with one value
	} {
		got, err := readClientKey(c.lines)
		if c.want == "" {
			if err == nil {
				t.Errorf("%q: read as %q, want refused", c.lines, got)
			} else if k := strings.Trim(c.lines[0], `" `); len(k) >= 5 && strings.Contains(err.Error(), k) {
				t.Errorf("%q: the error quotes the key: %v", c.lines, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %q, %v; want %q", c.lines, got, err, c.want)
		}
	}
}

// TestClientKeyFitsTheJournal: a key the journal could not hold as it is
// (a quoted key with a space, one too long for the journal's keys) becomes
// a hash of it, one per key.
func TestClientKeyFitsTheJournal(t *testing.T) {
	if k := clientKey("http", "a", "s", `"b"`); k != `http:a:s:"b"` {
		t.Fatalf("plain key %q", k)
	}
	a, b := clientKey("http", "a", "s", `"order 817"`), clientKey("http", "a", "s", `"order 818"`)
	if !strings.HasPrefix(a, "http:a:s:h:") || a == b || strings.Contains(a, " ") {
		t.Fatalf("keys with a space: %q %q", a, b)
	}
	if k := clientKey("http", "a", "s", strings.Repeat("k", 255)); !strings.HasPrefix(k, "http:a:s:h:") || len(k) > 200 {
		t.Fatalf("long key %q", k)
	}
}
