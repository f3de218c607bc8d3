// Package hashkey holds the keys of the keyed request hash.
//
// The request hash of an action with redact_fields is an HMAC-SHA256 under
// a key the server reads from a file (--hash-key-file) or the environment
// (OPJOURNAL_HASH_KEYS), never from the policy or the database: the payload
// it covers holds values the journal does not store (a card's CVC), and a
// plain SHA-256 would let anyone who sees the hash confirm a guess of them
// offline (there are only 1,000 CVCs).
//
// A Ring holds one or more keys. The first signs new operations; the
// others only verify the operations registered under them, so keys can be
// rotated: put a new key first and keep the old ones until the retention
// of every operation made with them has passed. A replay of an operation
// whose key was removed is refused (INVALID_STATE), never taken for a new
// request.
package hashkey

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// MinSecretBytes is the shortest secret accepted: 256 bits.
const MinSecretBytes = 32

// Key is one named secret.
type Key struct {
	// ID names the key in the journal (stored with each operation hashed
	// under it); it is not secret.
	ID     string
	secret []byte
}

// Hash returns the keyed request hash of an envelope (canonjson.Request).
func (k Key) Hash(envelope []byte) string { return canonjson.KeyedHash(k.secret, envelope) }

// Ring is an ordered set of keys; the first is current. A Ring is
// immutable and safe for concurrent use.
type Ring struct {
	keys []Key
}

// Current returns the key that signs new operations.
func (r *Ring) Current() Key { return r.keys[0] }

// Get returns the key named id.
func (r *Ring) Get(id string) (Key, bool) {
	for _, k := range r.keys {
		if k.ID == id {
			return k, true
		}
	}
	return Key{}, false
}

// IDs returns the key ids, current first.
func (r *Ring) IDs() []string {
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.ID
	}
	return ids
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

// New returns a ring of keys, current first. It returns an error for an
// empty ring, a bad or duplicate id, or a secret shorter than
// MinSecretBytes.
func New(keys ...Key) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	seen := map[string]bool{}
	for i, k := range keys {
		switch {
		case !idRE.MatchString(k.ID):
			return nil, fmt.Errorf("keys[%d]: id %q must be 1–32 characters of [A-Za-z0-9_.-]", i, k.ID)
		case seen[k.ID]:
			return nil, fmt.Errorf("keys[%d]: id %q is listed twice", i, k.ID)
		case len(k.secret) < MinSecretBytes:
			return nil, fmt.Errorf("keys[%d] (%s): the secret is %d bytes; at least %d are required", i, k.ID, len(k.secret), MinSecretBytes)
		}
		seen[k.ID] = true
	}
	return &Ring{keys: append([]Key(nil), keys...)}, nil
}

// NewKey returns a key with the given id and secret.
func NewKey(id string, secret []byte) Key { return Key{ID: id, secret: append([]byte(nil), secret...)} }

// Random returns a key with a new random 256-bit secret.
func Random(id string) Key {
	b := make([]byte, MinSecretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return Key{ID: id, secret: b}
}

// Entry returns the tokens-file style YAML entry of k (secret included):
// what `opjournal hashkey` prints and what Create writes.
func (k Key) Entry() string {
	return fmt.Sprintf("  - id: %s\n    secret: %s\n", k.ID, base64.RawURLEncoding.EncodeToString(k.secret))
}

type fileKey struct {
	ID     string `yaml:"id"`
	Secret string `yaml:"secret"`
}

type file struct {
	Keys []fileKey `yaml:"keys"`
}

// Header is the comment at the top of a key file that Create writes.
const Header = `# opjournal request-hash keys (--hash-key-file). The first key signs new
# operations; the others verify operations registered under them. Rotate by
# putting a new key first; remove an old key only after the retention of the
# operations made with it has passed. Keep this file private (0600) and out
# of version control; back it up with the database.
keys:
`

// Parse reads a key file:
//
//	keys:
//	  - id: k2                       # current: signs new operations
//	    secret: 3q2-7w…              # base64 (URL or standard), ≥ 32 bytes
//	  - id: k1                       # older: verifies its operations only
//	    secret: …
//
// Parsing is strict; errors name the entry and never contain a secret.
func Parse(data []byte, source string) (*Ring, error) {
	var f file
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: not a key file (keys: [{id, secret}, …]): %s", source, yamlProblem(err))
	}
	keys := make([]Key, 0, len(f.Keys))
	for i, fk := range f.Keys {
		secret, err := decodeSecret(fk.Secret)
		if err != nil {
			return nil, fmt.Errorf("%s: keys[%d] (%s): secret: %w", source, i, fk.ID, err)
		}
		keys = append(keys, Key{ID: fk.ID, secret: secret})
	}
	r, err := New(keys...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return r, nil
}

// yamlProblem describes a YAML error without quoting the document (it
// could quote a secret).
func yamlProblem(err error) string {
	var le *yaml.LoadError
	if errors.As(err, &le) && le.Mark.Line > 0 {
		return fmt.Sprintf("invalid at line %d", le.Mark.Line)
	}
	return "a field is unknown, has the wrong type, or the YAML is invalid"
}

func decodeSecret(s string) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("is not base64")
}

// Load reads a key file. It refuses a file that others than its owner may
// read (chmod 600), as ssh does with private keys.
func Load(path string) (*Ring, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("hash key file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("hash key file %s is readable by others (mode %04o): chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hash key file: %w", err)
	}
	return Parse(b, path)
}

// FromEnv parses OPJOURNAL_HASH_KEYS: "id:secret" entries separated by
// commas, current first (secrets in base64).
func FromEnv(value string) (*Ring, error) {
	var keys []Key
	for i, part := range strings.Split(value, ",") {
		id, secret, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("OPJOURNAL_HASH_KEYS: entry %d is not id:secret", i+1)
		}
		b, err := decodeSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("OPJOURNAL_HASH_KEYS: entry %d (%s): secret: %w", i+1, id, err)
		}
		keys = append(keys, Key{ID: id, secret: b})
	}
	r, err := New(keys...)
	if err != nil {
		return nil, fmt.Errorf("OPJOURNAL_HASH_KEYS: %w", err)
	}
	return r, nil
}

// LoadOrCreate loads the key file at path, or creates it (0600, one new
// random key) when it does not exist. created reports which.
func LoadOrCreate(path string) (r *Ring, created bool, err error) {
	r, err = Load(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return r, false, err
	}
	k := Random("k1")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("hash key file: %w", err)
	}
	if _, err := f.WriteString(Header + k.Entry()); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("hash key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("hash key file %s: %w", path, err)
	}
	r, err = New(k)
	return r, true, err
}

// Rotate puts key first in the key file at path, keeping the keys it
// holds (which then only verify their operations); a missing file is
// created (0600) with key alone. The file is replaced atomically.
func Rotate(path string, key Key) error {
	keys := []Key{key}
	if old, err := Load(path); err == nil {
		if _, dup := old.Get(key.ID); dup {
			return fmt.Errorf("hash key file %s already holds a key %q", path, key.ID)
		}
		keys = append(keys, old.keys...)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, err := New(keys...); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(Header)
	for _, k := range keys {
		b.WriteString(k.Entry())
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("hash key file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("hash key file: %w", err)
	}
	return nil
}

// EnvFor returns an OPJOURNAL_HASH_KEYS value holding k, for starting
// servers that must share a key (tests, harnesses, several replicas).
func EnvFor(keys ...Key) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.ID + ":" + base64.RawURLEncoding.EncodeToString(k.secret)
	}
	return "OPJOURNAL_HASH_KEYS=" + strings.Join(parts, ",")
}
