package policy

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// OnTimeout says what may happen after an attempt's outcome is unknown.
type OnTimeout string

const (
	// ReconcileBeforeRetry means an operation whose outcome is unknown, or
	// whose lease expired, must not be claimed again until reconciliation
	// has established what happened. It is the default.
	ReconcileBeforeRetry OnTimeout = "reconcile_before_retry"
	// RetrySameKey means the provider deduplicates by our operation key, so
	// an operation whose outcome is unknown, or whose lease expired, may be
	// claimed again with the same key.
	RetrySameKey OnTimeout = "retry_same_key"
)

// Limits and defaults of the policy fields.
const (
	maxPolicyBytes = 1 << 20

	defaultLeaseSeconds = 30
	// defaultMaxAttemptLeases: max_attempt_seconds defaults to this many
	// leases; maxMaxAttemptSeconds bounds it (a week).
	defaultMaxAttemptLeases = 10
	maxMaxAttemptSeconds    = 7 * 86400
	minLeaseSeconds         = 1
	maxLeaseSeconds         = 86400

	defaultUnknownAfter = 900 * time.Second
	// maxUnknownAfterSeconds is the largest number of seconds a
	// time.Duration can hold.
	maxUnknownAfterSeconds = int64(1<<63-1) / int64(time.Second)

	defaultRetention = 720 * time.Hour
	minRetention     = time.Hour

	operationKeyRequired = "required"
	requireHumanReview   = "require_human_review"

	stateSucceeded   = "succeeded"
	stateFailedFinal = "failed_final"
)

// Action is the validated policy of one action type (all defaults filled in).
type Action struct {
	// Name is the action type, the key under actions, e.g. "create_payment".
	Name string
	// LeaseSeconds is the default lease of an attempt and the maximum a
	// caller may ask for (lease_seconds; default 30; 1..86400).
	LeaseSeconds int
	// ReuseOperationKey is retry.reuse_operation_key. It is always true: a
	// policy that sets it to false is rejected, because reusing the key on
	// every retry is what makes a retry recognisable as a repeat.
	ReuseOperationKey bool
	// OnTimeout is retry.on_timeout (default ReconcileBeforeRetry).
	OnTimeout OnTimeout
	// UnknownAfter is how long an operation may stay in flight before its
	// outcome is declared unknown (unknown_after_seconds; default 900s).
	UnknownAfter time.Duration
	// OnUnresolved is what happens to an operation whose outcome cannot be
	// determined; only "require_human_review" (the default) is accepted.
	OnUnresolved string
	// Retention is how long the journal keeps the operation's records
	// (retention: a Go duration such as "720h" or whole days such as "30d";
	// default 720h; at least 1h and at least UnknownAfter).
	Retention time.Duration
	// IntegerFields names request members that must carry exact integers,
	// such as money in minor units (integer_fields). It may be empty.
	IntegerFields []string
	// RedactFields names members (at any depth) whose values are replaced
	// by "[redacted]" in the payload and result the journal STORES
	// (redact_fields): card numbers, tokens, personal data. The request
	// hash is still computed over the full payload, so a retry with other
	// values under the same key is still a conflict.
	RedactFields []string
	// Reconcile is how the reconciler settles an operation of this action
	// whose outcome is unknown (reconcile; every field has a default, and
	// without a verifier such operations go to a person).
	Reconcile Reconcile
	// MaxAttempt is the longest one attempt may keep its lease by
	// heartbeats (ExtendLease), counted from its claim
	// (max_attempt_seconds; default 10 × lease_seconds; at least
	// lease_seconds). After it the lease runs out: the SDK gives up on the
	// call and the outcome is unknown.
	MaxAttempt time.Duration
	// ProviderDedupWindow is how long the provider remembers our key
	// (retry.provider_dedup_window; only with on_timeout: retry_same_key;
	// 0: for ever). Once the first attempt is older, a retry no longer
	// reuses the key blindly: the operation waits for reconciliation.
	ProviderDedupWindow time.Duration
	// Refs says which business references Register must bring and which
	// it must not (refs.required, refs.forbidden).
	Refs RefsPolicy
	// PayloadSchema is the JSON Schema the payload must match
	// (payload_schema), nil for none.
	PayloadSchema *PayloadSchema
	// Gateway is how opjournal-gateway fronts the action (gateway), nil
	// when it does not.
	Gateway *Gateway `json:",omitempty"`
	// ProviderLink is where an operator sees the provider's own record of
	// an operation (provider_link): an absolute http(s) URL template with
	// {external_id} and/or {operation_key}, such as
	// https://dashboard.stripe.com/payments/{external_id}. The console
	// links to it; "" for none.
	ProviderLink string `json:",omitempty"`
	// Approval is when a person must approve a request before any attempt
	// (approval: when or required, approvers, distinct_from_requester,
	// two_person, timeout, on_timeout, notify); nil when never. The
	// journal evaluates it once, at registration, and records the result
	// on the operation.
	Approval *ApprovalPolicy `json:",omitempty"`
	// Budgets cap what the action's operations may add up to in a rolling
	// window (budgets: name, sum or count, per, window, limit, on_exceed);
	// empty for none. The journal reserves an operation's amount in each
	// at registration and gives it back only when the operation fails
	// finally.
	Budgets []*BudgetPolicy `json:",omitempty"`
}

// Link returns the provider's page for an operation of this action, or
// "" when the action has no provider_link or the operation lacks a value
// the template needs (an external_id before the effect is known). Values
// are path-escaped, so a key cannot change the link's host or path.
func (a *Action) Link(key, externalID string) string {
	if a == nil || a.ProviderLink == "" {
		return ""
	}
	if strings.Contains(a.ProviderLink, PlaceholderExternalID) && externalID == "" {
		return ""
	}
	return strings.NewReplacer(PlaceholderOperationKey, url.PathEscape(key), PlaceholderExternalID, url.PathEscape(externalID)).Replace(a.ProviderLink)
}

// RefsPolicy is an action's rules for business references.
type RefsPolicy struct {
	// Required refs must be given at registration.
	Required []string
	// Forbidden refs must not be given (a ref is stored in clear and
	// searchable, so nothing secret or personal belongs in one; the
	// action's redact_fields are forbidden as refs too).
	Forbidden []string
}

// ReleaseAfter is how long an operation's outcome must have been unknown
// before "not found" may release it for retry: the provider may still act
// on a request it received for in_flight_window after our attempt ended,
// and its search may miss the effect for visibility_lag after that.
func (a *Action) ReleaseAfter() time.Duration {
	return a.Reconcile.VisibilityLag + a.Reconcile.InFlightWindow
}

// AllowsRetryAfterUnknown reports whether an unknown or lease-expired
// operation may be claimed again with the same key, that is whether
// OnTimeout is RetrySameKey. It returns false for a nil Action.
func (a *Action) AllowsRetryAfterUnknown() bool {
	return a != nil && a.OnTimeout == RetrySameKey
}

// clone returns a deep copy of a.
func (a *Action) clone() *Action {
	c := *a
	c.IntegerFields = slices.Clone(a.IntegerFields)
	c.RedactFields = slices.Clone(a.RedactFields)
	c.Reconcile = a.Reconcile.clone()
	c.Refs = RefsPolicy{Required: slices.Clone(a.Refs.Required), Forbidden: slices.Clone(a.Refs.Forbidden)}
	c.Gateway = a.Gateway.clone()
	return &c
}

// Policy is a validated set of actions. A Policy is immutable and safe for
// concurrent use.
type Policy struct {
	actions map[string]*Action
	names   []string // sorted
	source  []byte   // the document as parsed
}

// Source returns the policy document as it was parsed (YAML). A policy
// holds no secrets: they come from ${VAR} references.
func (p *Policy) Source() []byte { return bytes.Clone(p.source) }

// Fingerprint returns the lowercase hex SHA-256 of the policy's effective
// settings (every action with its defaults filled in), so that two
// policies that mean the same have the same fingerprint whatever their
// formatting and comments.
func (p *Policy) Fingerprint() string {
	sum := sha256.Sum256(p.canonical())
	return hex.EncodeToString(sum[:])
}

// canonical is the policy's effective settings as JSON, actions sorted
// (encoding/json sorts map keys).
func (p *Policy) canonical() []byte {
	b, err := json.Marshal(p.actions)
	if err != nil {
		panic("policy: effective settings do not encode: " + err.Error())
	}
	return b
}

// Diff lists, one per line, the actions and settings in which p and q
// differ ("create_payment: Reconcile.DefinitiveAbsence: true ≠ false").
// It returns nil for equal policies.
func (p *Policy) Diff(q *Policy) []string {
	var out []string
	names := slices.Clone(p.names)
	for _, n := range q.names {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		a, inP := p.actions[n]
		b, inQ := q.actions[n]
		switch {
		case !inP:
			out = append(out, n+": only in the other policy")
		case !inQ:
			out = append(out, n+": only in this policy")
		default:
			out = append(out, diffValues(n, flatten(a), flatten(b))...)
		}
	}
	return out
}

// flatten maps an action's settings to "Field.Sub" → JSON value.
func flatten(a *Action) map[string]string {
	var v any
	b, _ := json.Marshal(a)
	_ = json.Unmarshal(b, &v)
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), x)
			}
			return
		}
		j, _ := json.Marshal(v)
		out[prefix] = string(j)
	}
	walk("", v)
	return out
}

func diffValues(action string, a, b map[string]string) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %s: %s ≠ %s", action, k, orNone(a[k]), orNone(b[k])))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Action returns a copy of the named action's policy, or nil, false if the
// policy does not define it (or p is nil).
func (p *Policy) Action(name string) (*Action, bool) {
	if p == nil {
		return nil, false
	}
	a, ok := p.actions[name]
	if !ok {
		return nil, false
	}
	return a.clone(), true
}

// Names returns the defined action names, sorted. It returns nil for a nil
// Policy; for a parsed Policy it is never empty.
func (p *Policy) Names() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.names)
}

// Load reads and parses the policy file at path, naming path in errors. It
// returns nil and an error if the file cannot be read, is larger than 1 MiB,
// or is not a valid policy (see Parse).
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading policy file: %w", err)
	}
	defer f.Close()
	// Read at most one byte more than the limit, so that an oversized (or
	// endless) file is never read whole; Parse reports it as too large.
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading policy file: %w", err)
	}
	return Parse(data, path)
}

//go:embed default.yaml
var defaultYAML []byte

var defaultPolicy = sync.OnceValue(func() *Policy {
	p, err := Parse(defaultYAML, "default.yaml")
	if err != nil {
		panic("policy: the embedded default.yaml is invalid: " + err.Error())
	}
	return p
})

// Default returns the policy shipped with opjournal (embedded from
// default.yaml). It never returns nil; it panics only if the embedded file
// is invalid, which the package's tests rule out.
func Default() *Policy {
	return defaultPolicy()
}

// DefaultYAML returns a copy of the shipped policy file's bytes. It cannot
// fail.
func DefaultYAML() []byte {
	return bytes.Clone(defaultYAML)
}
