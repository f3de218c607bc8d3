package policy

import (
	"fmt"
	"maps"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/opjournal/opjournal/internal/httpheader"
)

// Defaults and limits of the reconcile section.
const (
	defaultInitialDelay  = 5 * time.Second
	defaultInterval      = 10 * time.Second
	defaultMaxInterval   = 5 * time.Minute
	defaultVisibilityLag = 30 * time.Second

	defaultVerifierTimeout = 5 * time.Second
	minVerifierTimeout     = time.Second
	maxVerifierTimeout     = 5 * time.Minute
)

// The placeholders of a verifier URL.
const (
	// PlaceholderOperationKey is replaced by the operation key.
	PlaceholderOperationKey = "{operation_key}"
	// PlaceholderExternalID is replaced by the operation's external_id.
	PlaceholderExternalID = "{external_id}"
)

// Reconcile is an action's reconciliation policy: how the reconciler finds
// out what happened to an operation whose outcome is unknown.
type Reconcile struct {
	// InitialDelay is how long after the outcome became unknown the first
	// check waits (initial_delay; default 5s).
	InitialDelay time.Duration
	// Interval is the first backoff interval between inconclusive checks;
	// it doubles with every check up to MaxInterval (interval; default 10s).
	Interval time.Duration
	// MaxInterval caps the backoff (max_interval; default 5m; at least
	// Interval).
	MaxInterval time.Duration
	// VisibilityLag is how long after the attempt ended the provider's
	// search may still miss the effect; "not found" only counts as absence
	// after it (visibility_lag; default 30s; 0 allowed).
	VisibilityLag time.Duration
	// InFlightWindow is how long the provider may still carry out a request
	// it received after our attempt ended: we gave up waiting (a timeout,
	// the lease's end), it did not (in_flight_window; required with
	// DefinitiveAbsence; take the provider's own processing timeout). A
	// release waits VisibilityLag + InFlightWindow after the attempt ended.
	InFlightWindow time.Duration
	// DefinitiveAbsence says that the provider's search is complete and
	// current, so that "not found" after VisibilityLag proves the effect is
	// absent and the operation may be released for retry
	// (definitive_absence; default false: absence never releases).
	DefinitiveAbsence bool
	// Verifier says how to ask the provider; nil if none is configured, in
	// which case unknown operations go to a person.
	Verifier *Verifier
}

// Verifier says how to ask a provider about an operation. Exactly one kind
// is set.
type Verifier struct {
	// HTTP asks an HTTP JSON API.
	HTTP *HTTPVerifier
}

// HTTPVerifier asks an HTTP JSON API whether an operation's effect exists.
//
// URL and header values may reference environment variables as ${VAR} or
// ${VAR:-default}; they are expanded when a request is made (ExpandEnv),
// never when the policy is parsed, so the policy holds no secret and a
// rotated secret is picked up. URL also holds {operation_key} and/or
// {external_id}, replaced by the escaped values.
//
// The answer is read as follows: 404 means absent; a 2xx JSON body is
// mapped by the JSON pointers (RFC 6901) below; anything else is unclear.
type HTTPVerifier struct {
	// Method is GET (the default) or POST (sent without a body).
	Method string
	// URL is the request URL template.
	URL string
	// Headers are sent with every request (values may use ${VAR}).
	Headers map[string]string
	// Timeout bounds one request (default 5s; 1s..5m).
	Timeout time.Duration
	// List points to an array of matches in the body: an empty array means
	// absent, otherwise the first element is the match. "" means no list:
	// the whole body is the match (a lookup by id).
	List string
	// Found points inside the match to a value that is missing, null,
	// false or "" when the effect is absent. "" means the match itself.
	Found string
	// Completed points inside the match to the effect's state; "" means
	// that a found effect is completed.
	Completed string
	// CompletedValues lists the values of Completed (as text) that mean
	// completed. Empty means any truthy value (not missing, null, false,
	// "" or 0).
	CompletedValues []string
	// ExternalID points inside the match to the provider's id of the
	// effect (a string or a number); "" means the match itself.
	ExternalID string
}

// clone returns a deep copy of r.
func (r Reconcile) clone() Reconcile {
	if r.Verifier != nil {
		v := *r.Verifier
		if v.HTTP != nil {
			h := *v.HTTP
			h.Headers = maps.Clone(h.Headers)
			h.CompletedValues = slices.Clone(h.CompletedValues)
			v.HTTP = &h
		}
		r.Verifier = &v
	}
	return r
}

// defaultReconcile is the reconcile section of an action that has none.
func defaultReconcile() Reconcile {
	return Reconcile{
		InitialDelay:  defaultInitialDelay,
		Interval:      defaultInterval,
		MaxInterval:   defaultMaxInterval,
		VisibilityLag: defaultVisibilityLag,
	}
}

// reconcileConfig is an action's reconcile block as written.
type reconcileConfig struct {
	InitialDelay      yaml.Node `yaml:"initial_delay"`
	Interval          yaml.Node `yaml:"interval"`
	MaxInterval       yaml.Node `yaml:"max_interval"`
	VisibilityLag     yaml.Node `yaml:"visibility_lag"`
	InFlightWindow    yaml.Node `yaml:"in_flight_window"`
	DefinitiveAbsence yaml.Node `yaml:"definitive_absence"`
	Verifier          yaml.Node `yaml:"verifier"`
}

// reconcile validates the reconcile block n (if written) into r.
func (p *parser) reconcile(n *yaml.Node, path string, r *Reconcile) {
	var c reconcileConfig
	if ok, _ := p.section(n, path, "a mapping of reconciliation fields", &c); ok {
		c.validate(p, path, r)
	}
}

// validate converts the reconcile block into r.
func (c *reconcileConfig) validate(p *parser, path string, r *Reconcile) {
	if d, ok := p.duration(&c.InitialDelay, join(path, "initial_delay"), false); ok {
		r.InitialDelay = d
	}
	interval, intervalValid := p.duration(&c.Interval, join(path, "interval"), true)
	if intervalValid {
		r.Interval = interval
	}
	maxInterval, maxIntervalValid := p.duration(&c.MaxInterval, join(path, "max_interval"), true)
	if maxIntervalValid {
		r.MaxInterval = maxInterval
	}
	if d, ok := p.duration(&c.VisibilityLag, join(path, "visibility_lag"), false); ok {
		r.VisibilityLag = d
	}
	if d, ok := p.duration(&c.InFlightWindow, join(path, "in_flight_window"), true); ok {
		r.InFlightWindow = d
	}
	if b, ok := p.boolean(&c.DefinitiveAbsence, join(path, "definitive_absence")); ok {
		r.DefinitiveAbsence = b
	}
	r.Verifier = p.verifier(&c.Verifier, join(path, "verifier"))
	// A field left out has its (valid) default.
	intervalValid = intervalValid || !set(&c.Interval)
	maxIntervalValid = maxIntervalValid || !set(&c.MaxInterval)
	if intervalValid && maxIntervalValid && r.Interval > r.MaxInterval {
		// Blame the field that was written down; if both were, blame
		// interval.
		at, fpath := &c.Interval, join(path, "interval")
		if !set(at) {
			at, fpath = &c.MaxInterval, join(path, "max_interval")
		}
		if set(at) {
			p.add(at, fpath, "interval %s is longer than max_interval %s", FormatDuration(r.Interval), FormatDuration(r.MaxInterval))
		}
	}
}

// verifierConfig is a reconcile block's verifier as written: one kind of
// verifier.
type verifierConfig struct {
	HTTP yaml.Node `yaml:"http"`
}

// verifier validates the verifier mapping n (if written).
func (p *parser) verifier(n *yaml.Node, path string) *Verifier {
	var c verifierConfig
	ok, _ := p.section(n, path, "a mapping with one kind of verifier (http)", &c)
	if !ok {
		return nil
	}
	if len(n.Content) == 0 {
		p.add(n, path, "must configure a kind of verifier (http); omit verifier if the provider cannot be asked")
	}
	if h := p.httpVerifier(&c.HTTP, join(path, "http")); h != nil {
		return &Verifier{HTTP: h}
	}
	return nil
}

// httpVerifierConfig is an http verifier as written.
type httpVerifierConfig struct {
	Method          yaml.Node `yaml:"method"`
	URL             yaml.Node `yaml:"url"`
	Headers         yaml.Node `yaml:"headers"`
	Timeout         yaml.Node `yaml:"timeout"`
	List            yaml.Node `yaml:"list"`
	Found           yaml.Node `yaml:"found"`
	Completed       yaml.Node `yaml:"completed"`
	CompletedValues yaml.Node `yaml:"completed_values"`
	ExternalID      yaml.Node `yaml:"external_id"`
}

// httpVerifier validates an http verifier mapping n (if written).
func (p *parser) httpVerifier(n *yaml.Node, path string) *HTTPVerifier {
	var c httpVerifierConfig
	if ok, _ := p.section(n, path, "a mapping of HTTP verifier fields", &c); !ok {
		return nil
	}
	h := &HTTPVerifier{Method: "GET", Timeout: defaultVerifierTimeout}
	c.request(p, path, h)
	c.answer(p, path, h)
	if !set(&c.URL) {
		p.add(n, join(path, "url"), "missing: an http verifier needs a url holding {operation_key} or {external_id}")
	}
	if !set(&c.ExternalID) {
		p.add(n, join(path, "external_id"), "missing: a pointer to the provider's id of the effect (such as /id) is needed to record a confirmed effect")
	}
	if set(&c.CompletedValues) && !set(&c.Completed) {
		p.add(&c.CompletedValues, join(path, "completed_values"), "needs completed: the pointer to the value compared with these")
	}
	return h
}

// request converts the fields that make the request into h.
func (c *httpVerifierConfig) request(p *parser, path string, h *HTTPVerifier) {
	if s, ok := p.str(&c.Method, join(path, "method")); ok {
		if s != "GET" && s != "POST" {
			p.add(&c.Method, join(path, "method"), "%s is not one of GET, POST", literal(s))
		} else {
			h.Method = s
		}
	}
	if s, ok := p.str(&c.URL, join(path, "url")); ok && p.verifierURL(&c.URL, join(path, "url"), s) {
		h.URL = s
	}
	if set(&c.Headers) {
		h.Headers = p.headers(&c.Headers, join(path, "headers"))
	}
	if d, ok := p.duration(&c.Timeout, join(path, "timeout"), true); ok {
		if d < minVerifierTimeout || d > maxVerifierTimeout {
			p.add(&c.Timeout, join(path, "timeout"), "%s is out of range %s..%s", FormatDuration(d), FormatDuration(minVerifierTimeout), FormatDuration(maxVerifierTimeout))
		} else {
			h.Timeout = d
		}
	}
}

// answer converts the fields that read the answer into h.
func (c *httpVerifierConfig) answer(p *parser, path string, h *HTTPVerifier) {
	if s, ok := p.pointer(&c.List, join(path, "list")); ok {
		if s == "" {
			p.add(&c.List, join(path, "list"), `"" (the whole response) cannot be a list: point to the array of matches inside the response, such as /data, or omit list when the response is the match itself`)
		}
		h.List = s
	}
	if s, ok := p.pointer(&c.Found, join(path, "found")); ok {
		h.Found = s
	}
	if s, ok := p.pointer(&c.Completed, join(path, "completed")); ok {
		if s == "" {
			p.add(&c.Completed, join(path, "completed"), `"" (the match itself) cannot be the completion state: point inside the match, such as /status, or omit completed when a found effect is always completed`)
		}
		h.Completed = s
	}
	if set(&c.CompletedValues) {
		h.CompletedValues = p.completedValues(&c.CompletedValues, join(path, "completed_values"))
	}
	if s, ok := p.pointer(&c.ExternalID, join(path, "external_id")); ok {
		h.ExternalID = s
	}
}

// verifierURL checks a verifier URL template: it must hold a placeholder
// and, expanded with an empty environment, be an absolute http(s) URL
// whose host does not depend on the operation.
func (p *parser) verifierURL(n *yaml.Node, path, tmpl string) bool {
	if !strings.Contains(tmpl, PlaceholderOperationKey) && !strings.Contains(tmpl, PlaceholderExternalID) {
		p.add(n, path, "must contain %s or %s, the value the provider is searched by", PlaceholderOperationKey, PlaceholderExternalID)
		return false
	}
	trial, err := ExpandEnv(tmpl, func(string) (string, bool) { return "", true })
	if err != nil {
		p.add(n, path, "%v", err)
		return false
	}
	const marker = "opjournal-placeholder"
	trial = strings.NewReplacer(PlaceholderOperationKey, marker, PlaceholderExternalID, marker).Replace(trial)
	u, err := url.Parse(trial)
	switch {
	case err != nil:
		p.add(n, path, "is not a valid URL: %v", unwrapURLError(err))
		return false
	case u.Scheme != "http" && u.Scheme != "https":
		p.add(n, path, "must be an absolute http:// or https:// URL (with the environment empty, it reads %s)", literal(trial))
		return false
	case u.Host == "":
		p.add(n, path, "has no host (with the environment empty, it reads %s)", literal(trial))
		return false
	case strings.Contains(u.Host, marker) || u.User != nil:
		p.add(n, path, "the placeholders may only appear in the path or the query, never in the host or user info")
		return false
	}
	return true
}

// unwrapURLError drops url.Error's repetition of the URL.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// headers validates the headers mapping.
func (p *parser) headers(n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	seen := map[string]int{}
	p.fields(n, path, "a mapping from header name to value", func(name string, k, v *yaml.Node) {
		hpath := join(path, name)
		if !isToken(name) {
			p.add(k, hpath, "is not a valid HTTP header name")
			return
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if first, dup := seen[canon]; dup {
			p.add(k, hpath, "duplicate header (first defined at line %d; header names are case-insensitive)", first)
			return
		}
		seen[canon] = k.Line
		switch canon {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			p.add(k, hpath, "is set by the HTTP client and cannot be configured")
			return
		}
		s, ok := p.str(v, hpath)
		if !ok {
			return
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
				p.add(v, hpath, "has a control character at offset %d", i)
				return
			}
		}
		refs, err := EnvRefs(s)
		if err != nil {
			p.add(v, hpath, "%v", err)
			return
		}
		if httpheader.IsSecret(name) && !slices.ContainsFunc(refs, func(r EnvRef) bool { return !r.HasDefault }) {
			// The value is not quoted: it may be a secret.
			p.add(v, hpath, "secrets come from the environment (${VAR}), never from the policy file: write the secret part of this header as ${VAR} (without a :- default)")
			return
		}
		out[canon] = s
	})
	return out
}

// isToken reports whether s is an HTTP token (RFC 9110), the syntax of a
// header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// completedValues validates the completed_values list.
func (p *parser) completedValues(n *yaml.Node, path string) []string {
	if n.Kind == yaml.SequenceNode {
		// Numbers and booleans are compared as text; accept them as
		// written.
		out := make([]string, 0, len(n.Content))
		seen := map[string]int{}
		for i, c := range n.Content {
			ipath := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind != yaml.ScalarNode || c.ShortTag() == "!!null" {
				if c.Kind != yaml.AliasNode {
					p.add(c, ipath, "must be a string, got %s", describe(c))
				}
				continue
			}
			if first, dup := seen[c.Value]; dup {
				p.add(c, ipath, "%q is listed twice (first at line %d)", c.Value, first)
				continue
			}
			seen[c.Value] = c.Line
			out = append(out, c.Value)
		}
		if len(n.Content) == 0 {
			p.add(n, path, "must list at least one value; omit it to accept any truthy value")
		}
		return out
	}
	if n.Kind != yaml.AliasNode {
		p.add(n, path, "must be a list of values, got %s", describe(n))
	}
	return nil
}

// pointer validates a JSON pointer (RFC 6901): "" or "/"-separated
// reference tokens in which '~' is only followed by '0' or '1'.
func (p *parser) pointer(n *yaml.Node, path string) (string, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return "", false
	}
	if err := CheckPointer(s); err != nil {
		p.add(n, path, "%s %v", literal(s), err)
		return "", false
	}
	return s, true
}

// CheckPointer reports whether s is a valid JSON pointer (RFC 6901).
func CheckPointer(s string) error {
	if s == "" {
		return nil
	}
	if s[0] != '/' {
		return fmt.Errorf("is not a JSON pointer: it must be empty or start with '/', such as /data/0/id")
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '~' && (i+1 == len(s) || s[i+1] != '0' && s[i+1] != '1') {
			return fmt.Errorf("is not a JSON pointer: '~' must be followed by 0 (for '~') or 1 (for '/')")
		}
	}
	return nil
}

// duration parses a Go duration that is not negative, and greater than
// zero if positive is set.
func (p *parser) duration(n *yaml.Node, path string, positive bool) (time.Duration, bool) {
	if skip(n) {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.add(n, path, "must be a duration such as 5s or 1m30s, got %s", describe(n))
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		p.add(n, path, "%q is not a duration: write a Go duration such as 5s or 1m30s", n.Value)
		return 0, false
	case d < 0:
		p.add(n, path, "%q must not be negative", n.Value)
		return 0, false
	case d == 0 && positive:
		p.add(n, path, "%q must be greater than zero", n.Value)
		return 0, false
	}
	return d, true
}
