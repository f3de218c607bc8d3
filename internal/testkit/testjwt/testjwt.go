// Package testjwt is an OAuth issuer for tests: an ES256 key whose JWKS is
// a file a tokens file's issuers: entry can name (jwks_file), and access
// tokens minted for any subject, each one fresh (as a refreshed token is).
package testjwt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer mints the access tokens of one issuer.
type Issuer struct {
	// URL is the iss its tokens carry; Audience their aud.
	URL, Audience string
	// JWKSFile holds the public key, as a tokens file's jwks_file names it.
	JWKSFile string
	key      *ecdsa.PrivateKey
	n        atomic.Int64
}

// New makes an issuer whose JWKS file is in the test's temporary folder.
func New(t testing.TB, url, audience string) *Issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := key.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": "k1",
		"x": b64(pub[1:33]), "y": b64(pub[33:])}}})
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, set, 0o600); err != nil {
		t.Fatal(err)
	}
	return &Issuer{URL: url, Audience: audience, JWKSFile: path, key: key}
}

// Entry is the issuer's entry in a tokens file: every subject is of
// tenant with roles (a YAML list's items, "agent, operator").
func (is *Issuer) Entry(tenant, roles string) string {
	return fmt.Sprintf("  - issuer: %s\n    audience: %s\n    jwks_file: %s\n    tenant: %s\n    roles: [%s]\n", is.URL, is.Audience, is.JWKSFile, tenant, roles)
}

// Token mints an access token for sub that expires in an hour; every call
// gives another token (its own jti), as a refresh does.
func (is *Issuer) Token(sub string) string {
	return is.TokenUntil(sub, time.Now().Add(time.Hour))
}

// TokenUntil is Token expiring at exp.
func (is *Issuer) TokenUntil(sub string, exp time.Time) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": is.URL, "aud": is.Audience, "sub": sub,
		"iat": time.Now().Unix(), "exp": exp.Unix(), "jti": fmt.Sprint(is.n.Add(1))})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(is.key)
	if err != nil {
		panic("testjwt: " + err.Error()) // an ES256 key signs whatever claims
	}
	return s
}
