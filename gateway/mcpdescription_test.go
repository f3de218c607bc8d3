package gateway

import "testing"

// TestHideInDescription: the sentences of a tool's description that name
// the argument the gateway fills are dropped, the others kept as written;
// a name merely containing it is not it.
func TestHideInDescription(t *testing.T) {
	for _, c := range []struct{ desc, arg, want string }{
		{"Charge a customer (the test provider's POST /payments). Not idempotent unless idempotency_key is given.", "idempotency_key",
			"Charge a customer (the test provider's POST /payments)."},
		{"Send an email.\nPass reference to deduplicate! It is kept for a day.", "reference", "Send an email.\nIt is kept for a day."},
		{"Uses the monkey key_id. Done?", "key", "Uses the monkey key_id. Done?"},
		{"Set key.", "key", ""},
		{"No argument named.", "", "No argument named."},
	} {
		if got := hideInDescription(c.desc, c.arg); got != c.want {
			t.Errorf("hideInDescription(%q, %q) = %q, want %q", c.desc, c.arg, got, c.want)
		}
	}
}
