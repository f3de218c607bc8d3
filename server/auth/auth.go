// Package auth authenticates callers of the journal and decides what each
// may do. A caller presents a bearer token (gRPC metadata "authorization"
// or the HTTP Authorization header, "Bearer <token>"). The server knows
// only the SHA-256 of each token, from a tokens file, and binds each to a
// name (for logs and the history), a tenant (whose operations it may see)
// and roles (which RPCs it may call). Tokens are random secrets of at
// least 128 bits, so a plain SHA-256 is enough: nothing to brute-force.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
)

// Role is a set of RPCs a token may call.
type Role string

// The roles.
const (
	// RoleAgent runs actions: Register, Claim, Mark*, Lookup.
	RoleAgent Role = "agent"
	// RoleReconciler settles unknown operations: ListOperations,
	// ReleaseForRetry, RecordCheck, Escalate, MarkSucceeded, Lookup.
	RoleReconciler Role = "reconciler"
	// RoleOperator reviews and decides: ListOperations, Lookup, ListEvents,
	// Resolve, ReleaseForRetry.
	RoleOperator Role = "operator"
	// RoleAdmin may call everything.
	RoleAdmin Role = "admin"
	// RoleMetrics may read /metrics on the HTTP listener (a Prometheus
	// scraper's token) and call nothing.
	RoleMetrics Role = "metrics"
)

// methodRoles is THE table of who may call what (besides admin). Keys are
// JournalService method names.
var methodRoles = map[string][]Role{
	"Register":        {RoleAgent},
	"Claim":           {RoleAgent},
	"ExtendLease":     {RoleAgent},
	"MarkSucceeded":   {RoleAgent, RoleReconciler},
	"MarkUnknown":     {RoleAgent},
	"MarkFailedFinal": {RoleAgent},
	"Lookup":          {RoleAgent, RoleReconciler, RoleOperator},
	"ListOperations":  {RoleReconciler, RoleOperator},
	"ReleaseForRetry": {RoleReconciler, RoleOperator},
	"RecordCheck":     {RoleReconciler},
	"Escalate":        {RoleReconciler, RoleOperator},
	"Resolve":         {RoleOperator},
	"Acknowledge":     {RoleOperator},
	"SetNote":         {RoleOperator},
	// A person's decision on an operation awaiting approval; the
	// action's approval.approvers narrow it further (journal.Approve).
	"Approve":    {RoleOperator},
	"Reject":     {RoleOperator},
	"ListEvents": {RoleOperator, RoleReconciler},
	"GetPolicy":  {RoleReconciler, RoleOperator},
	// The budgets' counters span principals (an agent learns its own
	// from a refusal), so they are for people and the reconciler.
	"ListBudgets": {RoleReconciler, RoleOperator},
}

// The console's rules, beside methodRoles: reading a page needs the
// methods it calls (ListOperations, Lookup, ListEvents), and deciding
// needs a person's role as well as the method, so a reconciler's token,
// a machine's, is read-only there even for ReleaseForRetry.

// MayUseConsole reports whether p may sign in to the console: it must be
// allowed to list and read operations (operator, reconciler, admin; never
// an agent or a metrics scraper).
func (p Principal) MayUseConsole() bool {
	return p.Allowed("ListOperations") && p.Allowed("Lookup") && p.Allowed("ListEvents")
}

// MayDecide reports whether p may take a decision in the console that
// calls method (Resolve, ReleaseForRetry, Acknowledge): operators and
// admins, with the method's own permission.
func (p Principal) MayDecide(method string) bool {
	person := slices.Contains(p.Roles, RoleOperator) || slices.Contains(p.Roles, RoleAdmin)
	return person && p.Allowed(method)
}

// IsAdmin reports whether p has the admin role (cross-tenant figures such
// as purge statistics are shown to admins only, as /metrics is).
func (p Principal) IsAdmin() bool { return slices.Contains(p.Roles, RoleAdmin) }

// MaySeeMetrics reports whether p may read /metrics (admin or metrics).
func (p Principal) MaySeeMetrics() bool {
	return slices.Contains(p.Roles, RoleAdmin) || slices.Contains(p.Roles, RoleMetrics)
}

// Principal is an authenticated caller.
type Principal struct {
	// ID is the caller's stable identity: the same for every credential
	// it holds (the tokens file's principal, shared by rotated tokens; a
	// JWT's "jwt:" + issuer + "#" + subject, whatever token carries it).
	// Front doors scope keys by it, never by a credential's bytes, and
	// every rule that compares callers (an approval's requester and
	// approvers, rate limits, the history's actor) compares it. A JWT's
	// id always holds a "#", which no tokens-file principal may, so the
	// two can never be equal.
	ID string
	// Name is the credential's label for people to read, in logs and
	// beside the id in the history: the token's name, or a JWT's subject
	// (when printable). Never compared, never the token.
	Name string
	// FormerNames are the names under which records written before
	// principal ids were recorded may name this principal: the names of
	// all its tokens, or a JWT subject's old display name. Only those old
	// records are read through them (journal.Caller.FormerNames).
	FormerNames []string
	// Tenant scopes every operation key the caller sees.
	Tenant string
	Roles  []Role
	// Expires is when the credential stops being valid (a JWT's exp);
	// zero for a tokens file's tokens.
	Expires time.Time
}

// Allowed reports whether p may call the JournalService method (its short
// name, "Register"). Unknown methods are allowed to admins only.
func (p Principal) Allowed(method string) bool {
	if method == "WhoAmI" {
		return len(p.Roles) > 0 // every authenticated caller may ask who it is
	}
	if slices.Contains(p.Roles, RoleAdmin) {
		return true
	}
	for _, r := range methodRoles[method] {
		if slices.Contains(p.Roles, r) {
			return true
		}
	}
	return false
}

// Errors of Authenticate; they never contain the token.
var (
	ErrNoToken  = errors.New("no bearer token")
	ErrBadToken = errors.New("unknown token")
)

// Authenticator maps token digests to principals, and verifies the
// bearer JWTs of the issuers the file configures.
type Authenticator struct {
	byDigest map[[sha256.Size]byte]Principal
	issuers  map[string]*issuer // by iss
	stop     context.CancelFunc // ends the JWKS refresh
}

// Close stops refreshing the issuers' key sets (a no-op without them).
func (a *Authenticator) Close() {
	if a != nil && a.stop != nil {
		a.stop()
	}
}

// Authenticate returns the principal of a token, ErrNoToken for an empty
// one, ErrBadToken for one the file does not list (or a JWT that does not
// verify: its reason is logged by the caller, never the token).
func (a *Authenticator) Authenticate(token string) (Principal, error) {
	if token == "" {
		return Principal{}, ErrNoToken
	}
	if len(a.issuers) > 0 && looksLikeJWT(token) {
		return a.verifyJWT(token)
	}
	// A map lookup by the digest: the token itself is never compared, so
	// nothing about it leaks through timing.
	p, ok := a.byDigest[sha256.Sum256([]byte(token))]
	if !ok {
		return Principal{}, ErrBadToken
	}
	return p, nil
}

// TokenDigest is the SHA-256 of a token: what a holder of a session (the
// console's) keeps instead of the token, to check on every request that
// the tokens file still lists it (AuthenticateDigest).
type TokenDigest [sha256.Size]byte

// DigestOf returns the TokenDigest of a token.
func DigestOf(token string) TokenDigest { return sha256.Sum256([]byte(token)) }

// AuthenticateDigest is Authenticate for a token known only by its digest:
// ErrBadToken once the tokens file no longer lists it.
func (a *Authenticator) AuthenticateDigest(d TokenDigest) (Principal, error) {
	p, ok := a.byDigest[d]
	if !ok {
		return Principal{}, ErrBadToken
	}
	return p, nil
}

// Tenants returns every tenant a credential of the file can act in (its
// tokens' and its JWT issuers'), sorted, each once: the tenants a
// process that works across them (the approval webhooks' rescan) visits.
func (a *Authenticator) Tenants() []string {
	var ts []string
	for _, p := range a.byDigest {
		ts = append(ts, p.Tenant)
	}
	for _, is := range a.issuers {
		ts = append(ts, is.tenant)
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// BearerToken extracts the token from an "authorization" value ("Bearer
// <token>", scheme case-insensitive), or "" if there is none.
func BearerToken(header string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Digest returns the hex SHA-256 of a token, as the tokens file holds it.
func Digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

type fileToken struct {
	Name      string   `yaml:"name"`
	Principal string   `yaml:"principal"`
	SHA256    string   `yaml:"sha256"`
	Tenant    string   `yaml:"tenant"`
	Roles     []string `yaml:"roles"`
}

type file struct {
	Tokens  []fileToken  `yaml:"tokens"`
	Issuers []fileIssuer `yaml:"issuers"`
}

var (
	hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,99}$`)
)

// Load reads a tokens file; see Parse.
func Load(path string) (*Authenticator, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	return Parse(b, path)
}

// Parse parses a tokens file:
//
//	tokens:
//	  - name: payments-agent          # shown in logs and history
//	    sha256: 9f86d081…             # hex SHA-256 of the token (opjournal token)
//	    tenant: payments              # the token sees only this tenant's operations
//	    roles: [agent]                # agent, reconciler, operator, admin, metrics
//
// Parsing is strict (unknown fields, missing fields, bad digests, unknown
// roles, duplicate names or digests are errors naming the entry). It
// refuses a file that holds something that looks like a plain token where
// the digest belongs.
func Parse(data []byte, source string) (*Authenticator, error) {
	f, err := decodeFile(data, source)
	if err != nil {
		return nil, err
	}
	if len(f.Tokens) == 0 && len(f.Issuers) == 0 {
		return nil, fmt.Errorf("%s: no tokens: list at least one under `tokens:` (see opjournal token --help), or a JWT issuer under `issuers:`", source)
	}
	return build(f, source)
}

// errNoTokensKey explains the one shape a tokens file has.
const errNoTokensKey = "the file must have a top-level tokens: list (see opjournal token --help)"

// decodeFile decodes a tokens file strictly, explaining a file that is not
// a mapping with a tokens: key (a bare list of entries, as pasted from an
// older opjournal token, is the usual mistake).
func decodeFile(data []byte, source string) (file, error) {
	var f file
	var shape any
	if err := yaml.Unmarshal(data, &shape); err == nil {
		switch v := shape.(type) {
		case map[string]any:
			_, tok := v["tokens"]
			if _, iss := v["issuers"]; !tok && !iss {
				return f, fmt.Errorf("%s: %s", source, errNoTokensKey)
			}
		case nil:
			// empty: the decoder says EOF
		default:
			return f, fmt.Errorf("%s: %s", source, errNoTokensKey)
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%s: %w", source, err)
	}
	return f, nil
}

// build checks every entry of a decoded tokens file and indexes them.
func build(f file, source string) (*Authenticator, error) {
	a := &Authenticator{byDigest: map[[sha256.Size]byte]Principal{}}
	names := map[string]bool{}
	principals := map[string]string{} // principal → its tenant
	var errs []error
	for i, t := range f.Tokens {
		where := fmt.Sprintf("%s: tokens[%d]", source, i)
		if t.Name != "" {
			where += fmt.Sprintf(" (%s)", t.Name)
		}
		switch {
		case !nameRE.MatchString(t.Name):
			errs = append(errs, fmt.Errorf("%s: name must be 1–100 characters of [A-Za-z0-9_.:@-]", where))
			continue
		case names[t.Name]:
			errs = append(errs, fmt.Errorf("%s: duplicate name", where))
			continue
		case !hexDigest.MatchString(t.SHA256):
			errs = append(errs, fmt.Errorf("%s: sha256 must be 64 lowercase hex digits: the digest of the token, never the token itself", where))
			continue
		}
		names[t.Name] = true
		if len(t.Tenant) > 100 || strings.ContainsAny(t.Tenant, " \t\r\n") {
			errs = append(errs, fmt.Errorf("%s: tenant must be at most 100 characters without spaces", where))
			continue
		}
		if len(t.Roles) == 0 {
			errs = append(errs, fmt.Errorf("%s: roles: give at least one of agent, reconciler, operator, admin, metrics", where))
			continue
		}
		id := t.Principal
		if id == "" {
			id = t.Name
		} else if !nameRE.MatchString(id) {
			errs = append(errs, fmt.Errorf("%s: principal must be 1–100 characters of [A-Za-z0-9_.:@-]", where))
			continue
		}
		// Tokens of one principal are one caller (its rotated tokens), so
		// they must reach the same tenant.
		if tenant, seen := principals[id]; seen && tenant != t.Tenant {
			errs = append(errs, fmt.Errorf("%s: principal %q has tokens in two tenants (%q and %q); a principal's tokens must share its tenant", where, id, tenant, t.Tenant))
			continue
		}
		principals[id] = t.Tenant
		p := Principal{ID: id, Name: t.Name, Tenant: t.Tenant}
		roles, err := checkRoles(t.Roles)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		p.Roles = roles
		var d [sha256.Size]byte
		_, _ = hex.Decode(d[:], []byte(t.SHA256))
		if _, dup := a.byDigest[d]; dup {
			errs = append(errs, fmt.Errorf("%s: the same token digest is listed twice", where))
			continue
		}
		a.byDigest[d] = p
	}
	errs = append(errs, a.indexFormerNames(source)...)
	if err := a.addIssuers(f.Issuers, source); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		a.Close()
		return nil, errors.Join(errs...)
	}
	return a, nil
}

// indexFormerNames gives every token's principal the names of all the
// tokens of its principal, the names older records may hold for it; and
// refuses a principal id that is another principal's token name, which
// would make such a record name two people.
func (a *Authenticator) indexFormerNames(source string) []error {
	names := map[string][]string{} // principal id → its tokens' names
	owner := map[string]string{}   // token name → its principal id
	for _, p := range a.byDigest {
		names[p.ID] = append(names[p.ID], p.Name)
		owner[p.Name] = p.ID
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(names)) {
		if o, ok := owner[id]; ok && o != id {
			errs = append(errs, fmt.Errorf("%s: principal %q is also the name of a token of principal %q: one name may not stand for two people", source, id, o))
		}
		slices.Sort(names[id])
	}
	for d, p := range a.byDigest {
		p.FormerNames = names[p.ID]
		a.byDigest[d] = p
	}
	return errs
}

// checkRoles converts a file's role names, refusing an unknown one.
func checkRoles(names []string) ([]Role, error) {
	var roles []Role
	for _, r := range names {
		switch Role(r) {
		case RoleAgent, RoleReconciler, RoleOperator, RoleAdmin, RoleMetrics:
			roles = append(roles, Role(r))
		default:
			return nil, fmt.Errorf("unknown role %q (agent, reconciler, operator, admin, metrics)", r)
		}
	}
	return roles, nil
}
