package gateway

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// What a protected request is made of, read strictly: its route (the path
// in one canonical spelling), its body (a JSON object or a form) and its
// query. Everything that can change what the provider does must be in the
// request hash, and anything the journal and the provider could read
// differently (a duplicate member, a path an upstream router folds onto
// the route) is refused before anything is sent.

// canonicalRoute folds a request's method and path the way a lenient
// upstream router might: the method's case, the path's case, percent
// encodings (repeatedly, so %252F is a slash too), backslashes,
// ";params" of a segment, dot segments, duplicate and trailing slashes.
// Two requests with the same canonical route may reach the same handler
// upstream, so a request whose canonical route is a protected one is
// either that exact route or refused.
func canonicalRoute(method string, u *url.URL) string {
	p := u.EscapedPath()
	for range 4 { // %25 chains: each round undoes one level of encoding
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			break
		}
		p = d
	}
	p = strings.ReplaceAll(p, `\`, "/")
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if i := strings.IndexByte(s, ';'); i >= 0 {
			s = s[:i]
		}
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return strings.ToUpper(method) + " /" + strings.ToLower(strings.Join(segs, "/"))
}

// bodyKind is how a protected request's body is encoded.
type bodyKind int

const (
	bodyJSON bodyKind = iota + 1
	bodyForm
)

// mediaKind reads the request's Content-Type: JSON (application/json or
// any +json type) or a form; 0 for anything else, which a protected
// route refuses (415): a text/plain POST is what a browser sends
// cross-site without asking, and a body the gateway cannot read
// canonically cannot be bound to its key.
func mediaKind(h http.Header) bodyKind {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	switch {
	case err != nil:
		return 0
	case mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return bodyJSON
	case mt == "application/x-www-form-urlencoded":
		return bodyForm
	}
	return 0
}

// crossSite reports whether a browser says the request comes from another
// site: Sec-Fetch-Site: cross-site, or an Origin that is not the
// gateway's own. Agents and server-side clients send neither.
func crossSite(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	o, err := url.Parse(origin)
	return err != nil || o.Host == "" || !strings.EqualFold(o.Host, r.Host)
}

// formPair is one name=value of a form or query, decoded.
type formPair struct{ name, value string }

// parsePairs decodes an application/x-www-form-urlencoded string strictly
// (a bad escape is an error, never skipped as url.ParseQuery does), in
// order. Empty pairs ("a=1&&b=2") are skipped.
func parsePairs(s string) ([]formPair, error) {
	var out []formPair
	for part := range strings.SplitSeq(s, "&") {
		if part == "" {
			continue
		}
		n, v, _ := strings.Cut(part, "=")
		name, err := url.QueryUnescape(n)
		if err != nil {
			return nil, err
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, err
		}
		out = append(out, formPair{name, value})
	}
	return out, nil
}

// pairsObject is the canonical form of pairs: an object of name → value,
// or name → [values, in order] when a name is repeated. Member order
// does not matter (the journal canonicalises); the order of a repeated
// name's values does. Names stay flat: stripe-style a[b]=c is the member
// "a[b]".
func pairsObject(pairs []formPair) map[string]any {
	obj := make(map[string]any, len(pairs))
	for _, p := range pairs {
		switch prev := obj[p.name].(type) {
		case nil:
			obj[p.name] = p.value
		case string:
			obj[p.name] = []any{prev, p.value}
		case []any:
			obj[p.name] = append(prev, p.value)
		}
	}
	return obj
}

// noResend is the upstream transport's guard: net/http's Transport
// re-sends a request by itself when a reused connection breaks and the
// request is "replayable" (no body or a GetBody to rewind it, and an
// idempotent method or an Idempotency-Key / X-Idempotency-Key header), on
// HTTP/1 and HTTP/2 alike, even after the request was written: for a
// provider that committed before the connection dropped, that is a second
// effect. Each request gets a body that cannot be rewound (GetBody nil,
// never nil or NoBody, even when empty), so no re-send ever happens.
// Requests that change nothing (GET, HEAD, OPTIONS) keep net/http's
// behaviour.
type noResend struct{ rt http.RoundTripper }

func (n noResend) RoundTrip(req *http.Request) (*http.Response, error) {
	rt := n.rt
	if rt == nil {
		rt = http.DefaultTransport
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return rt.RoundTrip(req)
	}
	if req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
		return rt.RoundTrip(req)
	}
	out := *req // a RoundTripper must not change the caller's request
	out.GetBody = nil
	if out.Body == nil || out.Body == http.NoBody {
		out.Body = io.NopCloser(bytes.NewReader(nil))
		out.ContentLength = 0
	}
	return rt.RoundTrip(&out)
}
