package opjournal

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// keyVectors is protocol/testdata/keys.json, which every SDK checks.
type keyVectors struct {
	NewKeyPattern string `json:"new_key_pattern"`
	ChildKeys     []struct {
		Parent, Name, Key string
	} `json:"child_keys"`
	InvalidChildNames []string `json:"invalid_child_names"`
}

func loadKeyVectors(t *testing.T) keyVectors {
	t.Helper()
	b, err := os.ReadFile("protocol/testdata/keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var v keyVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestChildKeyVectors(t *testing.T) {
	v := loadKeyVectors(t)
	for _, c := range v.ChildKeys {
		got, err := ChildKey(c.Parent, c.Name)
		if err != nil || got != c.Key {
			t.Errorf("ChildKey(%q, %q) = %q, %v; want %q", c.Parent, c.Name, got, err, c.Key)
		}
	}
	for _, name := range v.InvalidChildNames {
		if k, err := ChildKey("p", name); ErrorCode(err) != CodeInvalidArgument {
			t.Errorf("ChildKey(p, %q) = %q, %v; want INVALID_ARGUMENT", name, k, err)
		}
	}
	if _, err := ChildKey("", "x"); ErrorCode(err) != CodeInvalidArgument {
		t.Errorf("empty parent: %v", err)
	}
	if _, err := ChildKey(strings.Repeat("p", MaxKeyLen+1), "x"); ErrorCode(err) != CodeInvalidArgument {
		t.Errorf("long parent: %v", err)
	}
	// A child key is a key: a grandchild derives from it.
	child, _ := ChildKey("payment:order-817:intent-01", "receipt_email")
	if _, err := ChildKey(child, "webhook"); err != nil {
		t.Fatal(err)
	}
}

func TestNewKey(t *testing.T) {
	re := regexp.MustCompile(loadKeyVectors(t).NewKeyPattern)
	seen := map[string]bool{}
	for range 1000 {
		k := NewKey()
		if !re.MatchString(k) || seen[k] {
			t.Fatalf("NewKey() = %q (seen before: %v)", k, seen[k])
		}
		seen[k] = true
	}
}

func TestCheckRefs(t *testing.T) {
	ok := []map[string]string{nil, {}, {"order_id": "817", "customer": "c-93", "x.y-z_1": "ü"}}
	for _, r := range ok {
		if err := CheckRefs(r); err != nil {
			t.Errorf("CheckRefs(%v) = %v", r, err)
		}
	}
	many := map[string]string{}
	for i := range MaxRefs + 1 {
		many[string(rune('a'+i))] = "v"
	}
	for _, tc := range []struct {
		refs  map[string]string
		field string
	}{
		{many, "refs"},
		{map[string]string{"Order": "1"}, "refs"},
		{map[string]string{"_x": "1"}, "refs"},
		{map[string]string{"": "1"}, "refs"},
		{map[string]string{strings.Repeat("n", MaxRefNameLen+1): "1"}, "refs"},
		{map[string]string{"order_id": ""}, "refs/order_id"},
		{map[string]string{"order_id": strings.Repeat("v", MaxRefValueLen+1)}, "refs/order_id"},
		{map[string]string{"order_id": "8\n17"}, "refs/order_id"},
		{map[string]string{"order_id": "\xff"}, "refs/order_id"},
	} {
		err := CheckRefs(tc.refs)
		var e *Error
		if ErrorCode(err) != CodeInvalidArgument || !asError(err, &e) || e.Field != tc.field {
			t.Errorf("CheckRefs(%q) = %v; want INVALID_ARGUMENT on %s", tc.refs, err, tc.field)
			continue
		}
		// A value is never quoted back.
		for _, v := range tc.refs {
			if len(v) > 2 && strings.Contains(e.Message, v) {
				t.Errorf("the error quotes a value: %v", e)
			}
		}
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	*target = e
	return ok
}
