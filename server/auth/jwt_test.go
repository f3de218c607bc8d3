package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testKey is an ES256 signing key with its key id.
type testKey struct {
	kid string
	key *ecdsa.PrivateKey
}

func newTestKey(t *testing.T, kid string) testKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{kid: kid, key: k}
}

// jwks is the public JWK set of keys.
func jwks(keys ...testKey) []byte {
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	for _, k := range keys {
		b := func(x []byte) string { return base64.RawURLEncoding.EncodeToString(x) }
		pub, err := k.key.PublicKey.Bytes() // 0x04 || X || Y
		if err != nil {
			panic(err)
		}
		set.Keys = append(set.Keys, map[string]string{"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": k.kid,
			"x": b(pub[1:33]), "y": b(pub[33:])})
	}
	out, _ := json.Marshal(set)
	return out
}

func (k testKey) sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = k.kid
	s, err := tok.SignedString(k.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const testIssuer = "https://auth.example.test/"

func claims(sub string, exp time.Time) jwt.MapClaims {
	return jwt.MapClaims{"iss": testIssuer, "aud": "opjournal-gateway", "sub": sub, "iat": time.Now().Unix(), "exp": exp.Unix()}
}

func issuerFile(t *testing.T, jwksLine string, extra string) *Authenticator {
	t.Helper()
	src := fmt.Sprintf("issuers:\n  - issuer: %s\n    audience: opjournal-gateway\n    %s\n    tenant: payments\n    roles: [agent]\n%s", testIssuer, jwksLine, extra)
	a, err := Parse([]byte(src), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

func TestJWTPrincipalIsIssuerAndSubjectWhateverTheToken(t *testing.T) {
	k := newTestKey(t, "k1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks(k), 0o600); err != nil {
		t.Fatal(err)
	}
	a := issuerFile(t, "jwks_file: "+path, "")
	first, err := a.Authenticate(k.sign(t, claims("agent-7", time.Now().Add(time.Hour))))
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != "jwt:"+testIssuer+"#agent-7" || first.Tenant != "payments" || len(first.Roles) != 1 || first.Roles[0] != RoleAgent {
		t.Fatalf("principal = %+v", first)
	}
	// A refreshed access token (another iat, exp and jti) is the same caller.
	c := claims("agent-7", time.Now().Add(2*time.Hour))
	c["jti"] = "refreshed"
	refreshed, err := a.Authenticate(k.sign(t, c))
	if err != nil || refreshed.ID != first.ID {
		t.Fatalf("refreshed = %+v, %v; want the id %q", refreshed, err, first.ID)
	}
	other, _ := a.Authenticate(k.sign(t, claims("agent-8", time.Now().Add(time.Hour))))
	if other.ID == first.ID {
		t.Fatal("two subjects share a principal id")
	}
}

func TestJWTRefusals(t *testing.T) {
	k := newTestKey(t, "k1")
	stranger := newTestKey(t, "k1") // same kid, another key
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks(k), 0o600); err != nil {
		t.Fatal(err)
	}
	a := issuerFile(t, "jwks_file: "+path, "    subjects: [agent-7]\n")
	exp := time.Now().Add(time.Hour)
	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := claims("agent-7", exp)
		edit(c)
		return c
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims("agent-7", exp))
	hsTok, _ := hs.SignedString(jwks(k)) // the public set as an HMAC secret
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims("agent-7", exp)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	cases := map[string]string{
		"another key":         stranger.sign(t, claims("agent-7", exp)),
		"another audience":    k.sign(t, with(func(c jwt.MapClaims) { c["aud"] = "another-service" })),
		"expired":             k.sign(t, claims("agent-7", time.Now().Add(-time.Hour))),
		"no expiry":           k.sign(t, with(func(c jwt.MapClaims) { delete(c, "exp") })),
		"untrusted issuer":    k.sign(t, with(func(c jwt.MapClaims) { c["iss"] = "https://evil.example/" })),
		"unlisted subject":    k.sign(t, claims("agent-8", exp)),
		"no subject":          k.sign(t, with(func(c jwt.MapClaims) { delete(c, "sub") })),
		"HMAC with the JWKS":  hsTok,
		"alg none":            none,
		"not yet valid (nbf)": k.sign(t, with(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })),
	}
	for name, tok := range cases {
		p, err := a.Authenticate(tok)
		if !errors.Is(err, ErrBadJWT) {
			t.Errorf("%s: %+v, %v; want ErrBadJWT", name, p, err)
		}
		if err != nil && strings.Contains(err.Error(), tok) {
			t.Errorf("%s: the error quotes the token", name)
		}
	}
}

func TestJWKSURLFollowsKeyRotation(t *testing.T) {
	old, next := newTestKey(t, "2026-11"), newTestKey(t, "2026-12")
	var current atomic.Value
	current.Store(jwks(old))
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(current.Load().([]byte))
	}))
	defer srv.Close()
	a := issuerFile(t, "jwks_url: "+srv.URL+"/jwks.json", "")
	if _, err := a.Authenticate(old.sign(t, claims("agent-7", time.Now().Add(time.Hour)))); err != nil {
		t.Fatal(err)
	}
	// The issuer rotates: its new tokens name a key id the cache lacks,
	// which makes the authenticator fetch the set again.
	current.Store(jwks(old, next))
	p, err := a.Authenticate(next.sign(t, claims("agent-7", time.Now().Add(time.Hour))))
	if err != nil {
		t.Fatalf("a token of the rotated key: %v (fetches %d)", err, fetches.Load())
	}
	if p.ID != "jwt:"+testIssuer+"#agent-7" {
		t.Fatalf("id = %q", p.ID)
	}
}

func TestIssuerConfigurationErrors(t *testing.T) {
	for name, src := range map[string]string{
		"no audience": "issuers:\n  - issuer: https://a/\n    jwks_url: https://a/jwks\n    tenant: t\n    roles: [agent]\n",
		"no keys":     "issuers:\n  - issuer: https://a/\n    audience: x\n    tenant: t\n    roles: [agent]\n",
		"plain http":  "issuers:\n  - issuer: https://a/\n    audience: x\n    jwks_url: http://a.example/jwks\n    tenant: t\n    roles: [agent]\n",
		"bad role":    "issuers:\n  - issuer: https://a/\n    audience: x\n    jwks_url: https://a/jwks\n    tenant: t\n    roles: [root]\n",
		"no roles":    "issuers:\n  - issuer: https://a/\n    audience: x\n    jwks_url: https://a/jwks\n    tenant: t\n",
		// "#" ends the issuer in a principal id: one in the issuer would let
		// two (issuer, subject) pairs share an id.
		"fragment": "issuers:\n  - issuer: https://a/#x\n    audience: x\n    jwks_url: https://a/jwks\n    tenant: t\n    roles: [agent]\n",
	} {
		if _, err := Parse([]byte(src), "f"); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestRotatedTokensOfOnePrincipalAreOneCaller(t *testing.T) {
	src := FileHeader +
		NewEntry("agent-2026-11", "old-secret-token-0123456789", "payments", []Role{RoleAgent}).withPrincipal("payments-agent").YAML() +
		NewEntry("agent-2026-12", "new-secret-token-0123456789", "payments", []Role{RoleAgent}).withPrincipal("payments-agent").YAML() +
		NewEntry("other-agent", "other-secret-token-012345678", "payments", []Role{RoleAgent}).YAML()
	a, err := Parse([]byte(src), "f")
	if err != nil {
		t.Fatal(err)
	}
	oldP, _ := a.Authenticate("old-secret-token-0123456789")
	newP, _ := a.Authenticate("new-secret-token-0123456789")
	other, _ := a.Authenticate("other-secret-token-012345678")
	if oldP.ID != "payments-agent" || newP.ID != oldP.ID || oldP.Name == newP.Name {
		t.Fatalf("old %+v new %+v", oldP, newP)
	}
	if other.ID != "other-agent" {
		t.Fatalf("a token without principal: id %q, want its name", other.ID)
	}
	split := FileHeader +
		NewEntry("a1", "tok-a1-0123456789abcdef", "payments", []Role{RoleAgent}).withPrincipal("p").YAML() +
		NewEntry("a2", "tok-a2-0123456789abcdef", "billing", []Role{RoleAgent}).withPrincipal("p").YAML()
	if _, err := Parse([]byte(split), "f"); err == nil || !strings.Contains(err.Error(), "two tenants") {
		t.Fatalf("one principal in two tenants: %v", err)
	}
}

func (e Entry) withPrincipal(p string) Entry { e.Principal = p; return e }

// A subject of any shape is an exact principal id, labelled with the
// subject when it is printable; a subject equal to a token's name is
// another principal than that token's; the former names are what older
// records may have recorded for each.
func TestJWTSubjectsOfAnyShapeAreExactPrincipals(t *testing.T) {
	k := newTestKey(t, "k1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks(k), 0o600); err != nil {
		t.Fatal(err)
	}
	a := issuerFile(t, "jwks_file: "+path, FileHeader+NewEntry("alice-ops", "tok-alice-ops-0123456789ab", "payments", []Role{RoleOperator}).YAML())
	seen := map[string]string{}
	for _, c := range []struct{ sub, label, former string }{
		{"auth0|alice", "auth0|alice", "jwt-subject"},
		{"okta|dave", "okta|dave", "jwt-subject"},
		{"google-oauth2|1093", "google-oauth2|1093", "jwt-subject"},
		{"alice-ops", "alice-ops", "alice-ops"},
		{"bidi\u202eevil", "jwt-subject", "jwt-subject"},
	} {
		p, err := a.Authenticate(k.sign(t, claims(c.sub, time.Now().Add(time.Hour))))
		if err != nil {
			t.Fatalf("%q: %v", c.sub, err)
		}
		if p.ID != JWTPrincipalID(testIssuer, c.sub) || p.Name != c.label || len(p.FormerNames) != 1 || p.FormerNames[0] != c.former {
			t.Errorf("%q: id %q label %q former %v", c.sub, p.ID, p.Name, p.FormerNames)
		}
		if other, dup := seen[p.ID]; dup {
			t.Errorf("%q and %q share the id %q", c.sub, other, p.ID)
		}
		seen[p.ID] = c.sub
	}
	tok, err := a.Authenticate("tok-alice-ops-0123456789ab")
	if err != nil || tok.ID != "alice-ops" || seen[tok.ID] != "" {
		t.Fatalf("the token alice-ops: %+v %v; a JWT subject shares its id", tok, err)
	}
}

// Every token of a principal knows the names of all its tokens (what
// older records may hold); a principal id that is another principal's
// token name is refused, since an older record naming it would name two
// people.
func TestFormerNamesAndNamesThatWouldStandForTwoPeople(t *testing.T) {
	src := FileHeader +
		NewEntry("alice-laptop", "tok-alice-laptop-012345678", "payments", []Role{RoleOperator}).withPrincipal("alice").YAML() +
		NewEntry("alice-phone", "tok-alice-phone-0123456789", "payments", []Role{RoleOperator}).withPrincipal("alice").YAML() +
		NewEntry("bob", "tok-bob-0123456789abcdefgh", "payments", []Role{RoleOperator}).YAML()
	a, err := Parse([]byte(src), "f")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := a.Authenticate("tok-alice-phone-0123456789")
	if strings.Join(p.FormerNames, ",") != "alice-laptop,alice-phone" {
		t.Fatalf("alice's former names %v", p.FormerNames)
	}
	if b, _ := a.Authenticate("tok-bob-0123456789abcdefgh"); strings.Join(b.FormerNames, ",") != "bob" {
		t.Fatalf("bob's former names %v", b.FormerNames)
	}
	clash := FileHeader +
		NewEntry("alice-laptop", "tok-alice-laptop-012345678", "payments", []Role{RoleOperator}).withPrincipal("alice").YAML() +
		NewEntry("mallory", "tok-mallory-0123456789abcd", "payments", []Role{RoleOperator}).withPrincipal("alice-laptop").YAML()
	if _, err := Parse([]byte(clash), "f"); err == nil || !strings.Contains(err.Error(), "two people") {
		t.Fatalf("a principal named as another's token: %v", err)
	}
}

func TestTenantsIncludesTheIssuersTenants(t *testing.T) {
	k := newTestKey(t, "k1")
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks(k), 0o600); err != nil {
		t.Fatal(err)
	}
	a := issuerFile(t, "jwks_file: "+path, "tokens:\n  - name: mail-agent\n    sha256: "+Digest("tok-mail-0123456789abcdef")+"\n    tenant: mail\n    roles: [agent]\n")
	if got := a.Tenants(); len(got) != 2 || got[0] != "mail" || got[1] != "payments" {
		t.Errorf("Tenants = %q, want [mail payments]", got)
	}
}
