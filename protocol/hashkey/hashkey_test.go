package hashkey_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/protocol/hashkey"
)

func TestParseIsStrictAndNeverQuotesSecrets(t *testing.T) {
	secret := "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC0"
	for name, doc := range map[string]string{
		"no keys":        "keys: []\n",
		"unknown field":  "keys:\n  - id: k1\n    secret: " + secret + "\n    colour: red\n",
		"short secret":   "keys:\n  - id: k1\n    secret: c2hvcnQ\n",
		"not base64":     "keys:\n  - id: k1\n    secret: '" + secret + "!!'\n",
		"bad id":         "keys:\n  - id: 'k 1'\n    secret: " + secret + "\n",
		"duplicate id":   "keys:\n  - id: k1\n    secret: " + secret + "\n  - id: k1\n    secret: " + secret + "\n",
		"not a key file": "- " + secret + "\n",
	} {
		_, err := hashkey.Parse([]byte(doc), "keys.yaml")
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), secret[:16]) {
			t.Errorf("%s: the error quotes the secret: %v", name, err)
		}
	}
}

func TestLoadRefusesAFileOthersCanRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte(hashkey.Header+hashkey.Random("k1").Entry()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := hashkey.Load(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a 0644 key file: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if r, err := hashkey.Load(path); err != nil || r.Current().ID != "k1" {
		t.Fatalf("a 0600 key file: %v", err)
	}
}

func TestRotatePutsTheNewKeyFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	k1, k2 := hashkey.Random("k1"), hashkey.Random("k2")
	for _, k := range []hashkey.Key{k1, k2} {
		if err := hashkey.Rotate(path, k); err != nil {
			t.Fatal(err)
		}
	}
	r, err := hashkey.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if ids := r.IDs(); len(ids) != 2 || ids[0] != "k2" || ids[1] != "k1" {
		t.Fatalf("ids = %v, want [k2 k1]", ids)
	}
	old, _ := r.Get("k1")
	env := []byte(`{"action":"a","payload":{}}`)
	if old.Hash(env) != k1.Hash(env) || k1.Hash(env) == k2.Hash(env) {
		t.Fatal("a key's hash changed across the file, or two keys hash alike")
	}
	if err := hashkey.Rotate(path, hashkey.Random("k1")); err == nil {
		t.Fatal("a second k1 was accepted")
	}
}

func TestFromEnv(t *testing.T) {
	k := hashkey.Random("prod-2026")
	r, err := hashkey.FromEnv(strings.TrimPrefix(hashkey.EnvFor(k, hashkey.Random("prod-2025")), "OPJOURNAL_HASH_KEYS="))
	if err != nil || r.Current().ID != "prod-2026" || len(r.IDs()) != 2 {
		t.Fatalf("FromEnv: %v %v", r, err)
	}
	if _, err := hashkey.FromEnv("k1"); err == nil {
		t.Fatal("an entry without a secret was accepted")
	}
}
