package reconciler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opjournal/opjournal/internal/tracing"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

// Observation is what a provider says about an operation's effect.
type Observation struct {
	// Found: the provider holds the effect.
	Found bool
	// Completed: the effect is complete (not pending on the provider's
	// side). Only meaningful when Found.
	Completed bool
	// ExternalID is the provider's id of the effect. Set whenever Found
	// and Completed; it may be empty when the effect is not completed.
	ExternalID string
	// Resource is the provider's record of the effect when it is a JSON
	// object (the matched item of the search): stored with the success,
	// so that a gateway's replay is the provider's resource (its id and
	// fields), not a made-up answer. Nil when the verifier has none.
	Resource map[string]any
}

// Verifier asks a provider about an operation's effect.
//
// A nil error is a definite answer: found (and completed or not), or not
// found. An error means the answer is unclear (a timeout, a 5xx, an answer
// that cannot be read) and must never be read as absence.
type Verifier interface {
	Find(ctx context.Context, op *opjournalv1.Operation) (Observation, error)
}

// maxResponseBytes bounds how much of a provider's answer is read.
const maxResponseBytes = 1 << 20

// maxExternalIDBytes is the journal's limit on an external_id.
const maxExternalIDBytes = 200

// HTTPVerifier is a Verifier that asks an HTTP JSON API, as configured by
// a policy.HTTPVerifier:
//
//   - the URL template is expanded at request time: ${VAR} and
//     ${VAR:-default} from the environment, then {operation_key} and
//     {external_id}, escaped with url.PathEscape before the '?' and
//     url.QueryEscape after it;
//   - configured headers are sent with their ${VAR} references expanded;
//   - 404 means absent (for a lookup without a list; a search endpoint
//     reports absence with an empty list, so its 404 is unclear);
//   - a 2xx JSON body is read through the configured JSON pointers;
//   - anything else (a 3xx, another 4xx, a 5xx, a body that is not JSON or
//     is over 1 MiB, a list that is not an array, a timeout, a transport
//     error) is an error: the answer is unclear.
//
// Errors never contain header values or the expanded URL, which may carry
// secrets; they name environment variables, not their values.
type HTTPVerifier struct {
	cfg    policy.HTTPVerifier
	client *http.Client
	lookup func(string) (string, bool)
}

// HTTPOption configures an HTTPVerifier.
type HTTPOption func(*HTTPVerifier)

// WithHTTPClient makes the verifier send its requests with c (default: a
// client with the default transport). Redirects are never followed,
// whatever c's CheckRedirect says: a 3xx is an unclear answer.
func WithHTTPClient(c *http.Client) HTTPOption {
	return func(v *HTTPVerifier) {
		if c != nil {
			v.client = c
		}
	}
}

// WithLookupEnv makes the verifier read ${VAR} references with lookup
// instead of os.LookupEnv.
func WithLookupEnv(lookup func(string) (string, bool)) HTTPOption {
	return func(v *HTTPVerifier) {
		if lookup != nil {
			v.lookup = lookup
		}
	}
}

// NewHTTPVerifier returns a verifier for cfg. It checks what the policy
// parser checks (method, URL placeholders, pointers) so that a verifier
// built in code is as safe as one from a policy file; a zero Method is GET
// and a zero Timeout is 5 s.
func NewHTTPVerifier(cfg *policy.HTTPVerifier, opts ...HTTPOption) (*HTTPVerifier, error) {
	if cfg == nil {
		return nil, errors.New("reconciler: nil HTTP verifier configuration")
	}
	v := &HTTPVerifier{cfg: *cfg, lookup: os.LookupEnv}
	v.cfg.Headers = make(map[string]string, len(cfg.Headers))
	for k, val := range cfg.Headers {
		v.cfg.Headers[k] = val
	}
	v.cfg.CompletedValues = append([]string(nil), cfg.CompletedValues...)
	if v.cfg.Method == "" {
		v.cfg.Method = http.MethodGet
	}
	if v.cfg.Timeout <= 0 {
		v.cfg.Timeout = 5 * time.Second
	}
	if v.cfg.Method != http.MethodGet && v.cfg.Method != http.MethodPost {
		return nil, fmt.Errorf("reconciler: verifier method %q is not GET or POST", v.cfg.Method)
	}
	if !strings.Contains(cfg.URL, policy.PlaceholderOperationKey) && !strings.Contains(cfg.URL, policy.PlaceholderExternalID) {
		return nil, fmt.Errorf("reconciler: verifier URL must contain %s or %s", policy.PlaceholderOperationKey, policy.PlaceholderExternalID)
	}
	if _, err := policy.EnvRefs(cfg.URL); err != nil {
		return nil, fmt.Errorf("reconciler: verifier URL: %w", err)
	}
	for k, val := range cfg.Headers {
		if _, err := policy.EnvRefs(val); err != nil {
			return nil, fmt.Errorf("reconciler: verifier header %s: %w", k, err)
		}
	}
	for name, p := range map[string]string{"list": cfg.List, "found": cfg.Found, "completed": cfg.Completed, "external_id": cfg.ExternalID} {
		if err := policy.CheckPointer(p); err != nil {
			return nil, fmt.Errorf("reconciler: verifier %s: %q %w", name, p, err)
		}
	}
	for _, o := range opts {
		o(v)
	}
	if v.client == nil {
		v.client = &http.Client{}
	}
	// Never follow a redirect: a 3xx is unclear, and following one could
	// carry the configured headers elsewhere.
	c := *v.client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// A client span per request, and its traceparent sent, while tracing
	// is on; the URL (which may hold secrets) is never recorded.
	c.Transport = tracing.Transport(c.Transport)
	v.client = &c
	return v, nil
}

// Timeout is the bound on one request.
func (v *HTTPVerifier) Timeout() time.Duration { return v.cfg.Timeout }

// Find asks the provider about op's effect.
func (v *HTTPVerifier) Find(ctx context.Context, op *opjournalv1.Operation) (Observation, error) {
	u, err := v.url(op)
	if err != nil {
		return Observation{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, v.cfg.Method, u, nil)
	if err != nil {
		// The URL may hold secrets from the environment: do not repeat it.
		return Observation{}, errors.New("the expanded verifier URL is not a valid URL")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "opjournal-reconciler")
	for k, tmpl := range v.cfg.Headers {
		val, err := policy.ExpandEnv(tmpl, v.lookup)
		if err != nil {
			return Observation{}, fmt.Errorf("header %s: %w", k, err)
		}
		req.Header.Set(k, val)
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return Observation{}, transportError(ctx, err, v.cfg.Timeout)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return Observation{}, transportError(ctx, err, v.cfg.Timeout)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && v.cfg.List == "":
		return Observation{}, nil
	case resp.StatusCode == http.StatusNotFound:
		return Observation{}, errors.New("provider answered 404 to a search: a search reports absence with an empty list, so the endpoint may be wrong")
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return Observation{}, fmt.Errorf("provider answered HTTP %d", resp.StatusCode)
	case len(body) > maxResponseBytes:
		return Observation{}, errors.New("provider's answer is larger than 1 MiB")
	}
	return v.read(body)
}

// url expands the URL template for op.
func (v *HTTPVerifier) url(op *opjournalv1.Operation) (string, error) {
	tmpl, err := policy.ExpandEnv(v.cfg.URL, v.lookup)
	if err != nil {
		return "", fmt.Errorf("url: %w", err)
	}
	// Values from the environment are inserted as written (PROVIDER_URL
	// is a scheme and a host); one that breaks the URL is a configuration
	// error, reported without the value.
	if strings.ContainsFunc(tmpl, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", errors.New("url: the URL expanded from the environment contains spaces or control characters")
	}
	if strings.Contains(tmpl, policy.PlaceholderExternalID) && op.GetExternalId() == "" {
		return "", errors.New("the verifier searches by {external_id}, and the operation has none")
	}
	expand := func(s string, escape func(string) string) string {
		return strings.NewReplacer(
			policy.PlaceholderOperationKey, escape(op.GetOperationKey()),
			policy.PlaceholderExternalID, escape(op.GetExternalId()),
		).Replace(s)
	}
	path, query, hasQuery := strings.Cut(tmpl, "?")
	u := expand(path, url.PathEscape)
	if hasQuery {
		u += "?" + expand(query, url.QueryEscape)
	}
	return u, nil
}

// transportError describes a failed request without the URL (url.Error
// repeats it, and it may carry secrets).
func transportError(ctx context.Context, err error, timeout time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("provider did not answer within %s", timeout)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("request canceled: %w", ctx.Err())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("provider did not answer within %s", timeout)
	}
	return fmt.Errorf("request failed: %v", err)
}

// read maps a 2xx JSON body to an Observation.
func (v *HTTPVerifier) read(body []byte) (Observation, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return Observation{}, errors.New("provider's answer is not JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return Observation{}, errors.New("provider's answer is not one JSON value")
	}
	match := doc
	if v.cfg.List != "" {
		l, ok := lookupPointer(doc, v.cfg.List)
		arr, isArr := l.([]any)
		if !ok || !isArr {
			return Observation{}, fmt.Errorf("provider's answer has no array at %s", v.cfg.List)
		}
		if len(arr) == 0 {
			return Observation{}, nil
		}
		match = arr[0]
	}
	found, ok := lookupPointer(match, v.cfg.Found)
	if !ok || !present(found) {
		return Observation{}, nil
	}
	obs := Observation{Found: true, Completed: true}
	if v.cfg.Completed != "" {
		val, ok := lookupPointer(match, v.cfg.Completed)
		if len(v.cfg.CompletedValues) > 0 {
			text, isText := asText(val)
			obs.Completed = ok && isText && contains(v.cfg.CompletedValues, text)
		} else {
			obs.Completed = ok && truthy(val)
		}
	}
	id, idErr := externalID(match, v.cfg.ExternalID)
	obs.ExternalID = id
	if m, ok := match.(map[string]any); ok {
		obs.Resource = m
	}
	if obs.Completed && idErr != nil {
		return Observation{}, idErr
	}
	return obs, nil
}

// externalID reads the provider's id at ptr in match.
func externalID(match any, ptr string) (string, error) {
	val, ok := lookupPointer(match, ptr)
	if !ok || val == nil {
		return "", fmt.Errorf("provider's answer has no external id at %q", ptr)
	}
	var s string
	switch x := val.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	default:
		return "", fmt.Errorf("provider's external id at %q is not a string or a number", ptr)
	}
	if s == "" {
		return "", fmt.Errorf("provider's external id at %q is empty", ptr)
	}
	if len(s) > maxExternalIDBytes || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("provider's external id at %q is not a valid external_id (at most %d bytes of UTF-8 without control characters)", ptr, maxExternalIDBytes)
	}
	return s, nil
}

// lookupPointer evaluates the JSON pointer ptr (RFC 6901) in doc, decoded
// with UseNumber. ok is false if it names nothing.
func lookupPointer(doc any, ptr string) (v any, ok bool) {
	if ptr == "" {
		return doc, true
	}
	if ptr[0] != '/' {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			if cur, ok = c[tok]; !ok {
				return nil, false
			}
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// arrayIndex parses an RFC 6901 array index: "0" or digits without a
// leading zero.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || len(tok) > 1 && tok[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
		n = n*10 + int(tok[i]-'0')
	}
	return n, true
}

// present reports whether a "found" value says the effect exists: anything
// but null, false and "".
func present(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	}
	return true
}

// truthy is present, and also false for the number 0.
func truthy(v any) bool {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		return err != nil || f != 0
	}
	return present(v)
}

// asText renders a scalar as the text compared with completed_values.
func asText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
