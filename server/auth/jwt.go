package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Bearer JWTs (OAuth 2.1 / OIDC access tokens, what MCP's authorization
// uses). An issuer of the tokens file is trusted for the subjects of one
// tenant with fixed roles: its tokens' signatures are checked against its
// JWKS (a file, or a URL fetched, cached and refreshed on an unknown key
// id, so that the issuer can rotate its keys), and iss, aud and exp are
// required. The principal is "jwt:" + iss + "#" + sub, the same for every
// token the issuer gives the subject: a refreshed access token is the same
// caller.
//
//	issuers:
//	  - issuer: https://auth.example.com/
//	    audience: opjournal            # the aud the tokens must carry
//	    jwks_url: https://auth.example.com/.well-known/jwks.json   # or jwks_file:
//	    tenant: payments
//	    roles: [agent]
//	    subjects: [agent-7, agent-8]   # optional: only these subjects

// fileIssuer is one issuer of a tokens file.
type fileIssuer struct {
	Issuer   string   `yaml:"issuer"`
	Audience string   `yaml:"audience"`
	JWKSFile string   `yaml:"jwks_file"`
	JWKSURL  string   `yaml:"jwks_url"`
	Tenant   string   `yaml:"tenant"`
	Roles    []string `yaml:"roles"`
	Subjects []string `yaml:"subjects"`
	// Leeway is the clock skew allowed on exp, nbf and iat (default 30s).
	Leeway string `yaml:"leeway"`
}

// issuer is a trusted JWT issuer.
type issuer struct {
	iss, aud string
	keys     keyfunc.Keyfunc
	tenant   string
	roles    []Role
	subjects map[string]bool // nil: any subject
	leeway   time.Duration
}

// jwtMethods are the signature algorithms accepted: asymmetric only, so a
// public JWKS can never be used as an HMAC secret.
var jwtMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// addIssuers checks and loads the issuers of a tokens file.
func (a *Authenticator) addIssuers(list []fileIssuer, source string) error {
	if len(list) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	a.issuers = map[string]*issuer{}
	var errs []error
	for i, f := range list {
		where := fmt.Sprintf("%s: issuers[%d]", source, i)
		if f.Issuer != "" {
			where += fmt.Sprintf(" (%s)", f.Issuer)
		}
		is, err := newIssuer(ctx, f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if a.issuers[is.iss] != nil {
			errs = append(errs, fmt.Errorf("%s: the issuer is listed twice", where))
			continue
		}
		a.issuers[is.iss] = is
	}
	return errors.Join(errs...)
}

func newIssuer(ctx context.Context, f fileIssuer) (*issuer, error) {
	switch {
	case f.Issuer == "":
		return nil, errors.New("issuer: give the iss its tokens carry (an https URL)")
	case strings.Contains(f.Issuer, "#"):
		return nil, errors.New("issuer may not hold a \"#\" (an issuer identifier has no fragment, and \"#\" ends the issuer in a principal id)")
	case f.Audience == "":
		return nil, errors.New("audience: give the aud the tokens must carry (this service's identifier): a token minted for another service is refused")
	case (f.JWKSFile == "") == (f.JWKSURL == ""):
		return nil, errors.New("give one of jwks_file and jwks_url")
	case len(f.Tenant) > 100 || strings.ContainsAny(f.Tenant, " \t\r\n"):
		return nil, errors.New("tenant must be at most 100 characters without spaces")
	case len(f.Roles) == 0:
		return nil, errors.New("roles: give at least one of agent, reconciler, operator, admin, metrics")
	}
	roles, err := checkRoles(f.Roles)
	if err != nil {
		return nil, err
	}
	is := &issuer{iss: f.Issuer, aud: f.Audience, tenant: f.Tenant, roles: roles, leeway: 30 * time.Second}
	if f.Leeway != "" {
		if is.leeway, err = time.ParseDuration(f.Leeway); err != nil || is.leeway < 0 || is.leeway > 5*time.Minute {
			return nil, errors.New("leeway must be a duration between 0s and 5m")
		}
	}
	if len(f.Subjects) > 0 {
		is.subjects = map[string]bool{}
		for _, s := range f.Subjects {
			is.subjects[s] = true
		}
	}
	if f.JWKSFile != "" {
		b, err := os.ReadFile(f.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("jwks_file: %w", err)
		}
		if is.keys, err = keyfunc.NewJWKSetJSON(b); err != nil {
			return nil, fmt.Errorf("jwks_file %s: not a JWK set: %w", f.JWKSFile, err)
		}
		return is, nil
	}
	u, err := url.Parse(f.JWKSURL)
	if err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && isLoopbackHost(u.Hostname()))) {
		return nil, errors.New("jwks_url must be an https URL (http only on a loopback host, for tests)")
	}
	// Refreshed hourly, and at once (at most every 10 s) when a token names
	// a key id the cached set lacks: the issuer rotated its keys.
	no := false
	is.keys, err = keyfunc.NewDefaultOverrideCtx(ctx, []string{f.JWKSURL}, keyfunc.Override{
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(10*time.Second), 1),
		HTTPTimeout:               5 * time.Second,
		NoErrorReturnFirstHTTPReq: &no,
	})
	if err != nil {
		return nil, fmt.Errorf("jwks_url %s: %w", f.JWKSURL, err)
	}
	return is, nil
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1"
}

// looksLikeJWT reports whether a bearer token has a JWS compact form's
// shape (three base64url parts, the first a JSON object).
func looksLikeJWT(tok string) bool {
	return strings.Count(tok, ".") == 2 && strings.HasPrefix(tok, "eyJ")
}

// ErrBadJWT wraps why a JWT was refused (never the token).
var ErrBadJWT = errors.New("the bearer JWT is not valid")

// verifyJWT checks a JWT against the issuer it names.
func (a *Authenticator) verifyJWT(tok string) (Principal, error) {
	iss, err := unverifiedIssuer(tok)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %v", ErrBadJWT, err)
	}
	is := a.issuers[iss]
	if is == nil {
		return Principal{}, fmt.Errorf("%w: issuer not trusted", ErrBadJWT)
	}
	var claims jwt.RegisteredClaims
	_, err = jwt.ParseWithClaims(tok, &claims, is.keys.Keyfunc,
		jwt.WithValidMethods(jwtMethods), jwt.WithIssuer(is.iss), jwt.WithAudience(is.aud),
		jwt.WithExpirationRequired(), jwt.WithLeeway(is.leeway))
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %v", ErrBadJWT, err)
	}
	if claims.Subject == "" || len(claims.Subject) > 255 {
		return Principal{}, fmt.Errorf("%w: sub must be 1-255 characters", ErrBadJWT)
	}
	if is.subjects != nil && !is.subjects[claims.Subject] {
		return Principal{}, fmt.Errorf("%w: subject not listed for its issuer", ErrBadJWT)
	}
	return Principal{
		ID: JWTPrincipalID(is.iss, claims.Subject), Name: jwtLabel(claims.Subject), Tenant: is.tenant, Roles: is.roles,
		Expires: claims.ExpiresAt.Time, FormerNames: []string{jwtFormerName(claims.Subject)},
	}, nil
}

// JWTPrincipalID is the principal id of a JWT's subject: "jwt:" + iss +
// "#" + sub. Issuers may not hold a "#" (Parse refuses them), so the first
// one ends the issuer and no two (issuer, subject) pairs share an id; and
// a tokens-file principal never holds one, so no JWT caller is ever the
// same principal as a tokens-file caller.
func JWTPrincipalID(iss, sub string) string { return "jwt:" + iss + "#" + sub }

// jwtLabel is what people read for a subject: the subject itself when it
// is short and printable ("auth0|alice"), else a placeholder. Only a
// label: rules compare the id.
func jwtLabel(sub string) string {
	if len(sub) > 100 || strings.IndexFunc(sub, func(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }) >= 0 {
		return "jwt-subject"
	}
	return sub
}

// jwtFormerName is the name a JWT's subject was recorded under before
// principal ids were (the subject when it was a valid token name, else
// "jwt-subject"): how an older record may name this caller.
func jwtFormerName(sub string) string {
	if !nameRE.MatchString(sub) {
		return "jwt-subject"
	}
	return sub
}

// unverifiedIssuer reads a JWT's iss to choose its issuer's keys; nothing
// of it is trusted until the signature verifies against them.
func unverifiedIssuer(tok string) (string, error) {
	parts := strings.SplitN(tok, ".", 3)
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("the claims are not base64url")
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Iss == "" {
		return "", errors.New("no iss claim")
	}
	return c.Iss, nil
}
