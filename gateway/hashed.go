package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/opjournal/opjournal/protocol/canonjson"
)

// What the provider receives is what was hashed. A protected request is
// read once into its payload: the canonical JSON (RFC 8785) of the body's
// members, with the query's decoded pairs as the member "$query" and the
// route's forward_headers as "$headers". The journal hashes that payload
// (and an approval names the hash), and upstreamRequest builds the
// request the provider receives from that payload alone, plus the
// operation key and the gateway's own configuration. So two requests
// with one key and one hash are one upstream request, byte for byte
// (method, path, query, headers, body), and nothing the hash does not
// cover is ever sent: a client header the route does not forward, a
// second spelling of a member, bytes after the JSON value.
//
// Whatever cannot be read one way only is refused before anything is
// sent: invalid UTF-8 (a JSON decoder would read U+FFFD, the provider
// the raw bytes), member names equal under case folding (canonjson), data
// after the JSON value, a form or query name whose meaning depends on the
// order of other names ("items[][price]"), and a body member named like
// one of the reserved members.

// The payload's reserved members. Each is there only when not empty, so a
// request without a query or forwarded headers hashes as it always did.
const (
	// queryMember carries the query string's decoded pairs.
	queryMember = "$query"
	// headersMember carries the forwarded headers: lower-cased name →
	// value, or → [values] for a header sent on several lines.
	headersMember = "$headers"
)

// refusal is why a protected request is refused before anything is sent.
type refusal struct {
	status              int
	name, title, detail string
	field               string // the payload member, for invalid-request
}

func (f *refusal) write(w http.ResponseWriter) {
	if f.field != "" {
		writeJSONProblem(w, problem{Type: problemBase + f.name, Title: f.title, Status: f.status, Detail: f.detail, Field: f.field})
		return
	}
	writeProblem(w, f.status, f.name, f.title, f.detail, "", 0)
}

// hashedRequest is a protected request as the journal hashes it.
type hashedRequest struct {
	// payload is the canonical JSON the journal hashes (and stores).
	payload []byte
	// obj is the body's members (numbers as json.Number), which the key
	// fields and refs are read from.
	obj map[string]any
}

// readHashed reads a protected request strictly into the payload the
// journal hashes, or says why it is refused.
func readHashed(r *http.Request, route *httpRoute, kind bodyKind, body []byte) (*hashedRequest, *refusal) {
	query, err := parsePairs(r.URL.RawQuery)
	if err != nil {
		return nil, &refusal{status: http.StatusBadRequest, name: probBadQuery, title: "Query does not decode", detail: "the query string has an invalid percent-encoding; nothing was sent"}
	}
	if why := checkPairs(query); why != "" {
		return nil, &refusal{status: http.StatusBadRequest, name: probBadQuery, title: "Query refused", detail: "the query string " + why + "; nothing was sent"}
	}
	var obj map[string]any
	var canonicalBody []byte
	switch kind {
	case bodyJSON:
		_, canonical, err := canonjson.Request(route.action, body, canonjson.Options{})
		if err != nil {
			return nil, bodyRefusal(err)
		}
		canonicalBody = canonical
		var ok bool
		if obj, ok = decodeObject(canonical); !ok { // canonical JSON: decodes exactly
			return nil, &refusal{status: http.StatusBadRequest, name: probBadBody, title: "Body is not a JSON object", detail: "a protected route takes a JSON object body; nothing was sent"}
		}
	case bodyForm:
		pairs, err := parsePairs(string(body))
		if err != nil {
			return nil, &refusal{status: http.StatusBadRequest, name: probBadForm, title: "Form does not decode", detail: "the form body has an invalid percent-encoding; nothing was sent"}
		}
		if why := checkPairs(pairs); why != "" {
			return nil, &refusal{status: http.StatusBadRequest, name: probBadForm, title: "Form refused", detail: "the form body " + why + "; nothing was sent"}
		}
		obj = pairsObject(pairs)
	}
	if f := route.cfg.ForwardKeyField; f != "" {
		// The gateway writes the operation key there: a client's value,
		// in any case, is neither hashed nor sent.
		for name := range obj {
			if strings.EqualFold(name, f) {
				delete(obj, name)
				canonicalBody = nil // the body is no longer the payload as it stands
			}
		}
	}
	for name := range obj {
		if strings.EqualFold(name, queryMember) || strings.EqualFold(name, headersMember) {
			return nil, &refusal{status: http.StatusBadRequest, name: probBadBody, title: "Reserved member in the body",
				detail: fmt.Sprintf("the body has a member named %q, which the gateway reserves for the request's query and headers in the request hash; nothing was sent", name)}
		}
	}
	payload := make(map[string]any, len(obj)+2)
	for k, v := range obj {
		payload[k] = v
	}
	if len(query) > 0 {
		payload[queryMember] = pairsObject(query)
	}
	headers := map[string]any{}
	for _, name := range route.cfg.ForwardHeaders {
		vs := r.Header.Values(name)
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return nil, &refusal{status: http.StatusBadRequest, name: probBadHeader, title: "Header refused",
					detail: name + " has a value that is not UTF-8: the request hash could not cover it as sent; nothing was sent"}
			}
		}
		switch len(vs) {
		case 0:
		case 1:
			headers[strings.ToLower(name)] = vs[0]
		default:
			lines := make([]any, len(vs))
			for i, v := range vs {
				lines[i] = v
			}
			headers[strings.ToLower(name)] = lines
		}
	}
	if len(headers) > 0 {
		payload[headersMember] = headers
	}
	if canonicalBody != nil && len(payload) == len(obj) {
		return &hashedRequest{payload: canonicalBody, obj: obj}, nil // the body alone, already canonical
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, &refusal{status: http.StatusBadRequest, name: probBadBody, title: "Body is not a JSON object", detail: "the body does not encode; nothing was sent"}
	}
	// A form's or query's names folded together (amount, Amount) are two
	// members a case-insensitive reader takes for one: refused here as
	// the journal would.
	_, canonical, err := canonjson.Request(route.action, raw, canonjson.Options{})
	if err != nil {
		return nil, bodyRefusal(err)
	}
	return &hashedRequest{payload: canonical, obj: obj}, nil
}

// bodyRefusal turns canonjson's refusal of a payload into the gateway's.
// What makes a body unreadable one way only (a duplicate name, invalid
// JSON or UTF-8, data after the value) is the gateway's refusal; a value
// the journal refuses (a number beyond ±2^53-1, too deep) is the
// journal's invalid-request, with the member it names.
func bodyRefusal(err error) *refusal {
	var ce *canonjson.Error
	if !errors.As(err, &ce) {
		return &refusal{status: http.StatusBadRequest, name: probBadBody, title: "Body refused", detail: "the body does not read as JSON; nothing was sent"}
	}
	switch {
	case errors.Is(err, canonjson.ErrDuplicateName):
		return &refusal{status: http.StatusBadRequest, name: probDuplicateMember, title: "Duplicate member in the request",
			detail: "the request names a member twice (" + ce.Error() + "): exactly, or in another case, which a case-insensitive reader such as Go's encoding/json takes for the same member. " +
				"The journal and the provider could read different values, so it is refused; nothing was sent"}
	case strings.HasPrefix(ce.Msg, "invalid JSON") || strings.HasPrefix(ce.Msg, "unexpected data after") || ce.Msg == "must be a JSON object":
		return &refusal{status: http.StatusBadRequest, name: probBadBody, title: "Body is not a JSON object",
			detail: "a protected route takes one JSON object in UTF-8, and nothing after it (" + ce.Error() + "); nothing was sent"}
	}
	return &refusal{status: http.StatusBadRequest, name: probInvalid, title: "Invalid request", detail: ce.Msg + "; nothing was sent", field: "payload" + ce.Path}
}

// checkPairs says what is wrong with a form's or query's pairs, or "".
// A name or value that is not UTF-8 has no JSON form for the hash (the
// journal would read U+FFFD). A name with "[][" ("items[][price]", an
// array of objects to Rails, PHP or qs) means something that depends on
// the order of the other names' pairs, which the hash does not bind.
func checkPairs(pairs []formPair) string {
	for _, p := range pairs {
		if !utf8.ValidString(p.name) || !utf8.ValidString(p.value) {
			return "has a name or value that is not UTF-8 (after percent-decoding): the request hash could not cover it as sent"
		}
		if strings.Contains(p.name, "[][") {
			return fmt.Sprintf("has the name %q, whose meaning depends on the order of the other names' pairs, which the request hash does not bind; send indexed names (items[0][price])", p.name)
		}
	}
	return ""
}

// upstreamRequest builds the request a protected route sends, from the
// hashed payload alone (and the operation key, the route and the
// gateway's configuration): the route's method and path; the query
// re-encoded from "$query"; the forwarded headers from "$headers"; the
// body as the canonical JSON of the other members (or, for a form, their
// pairs re-encoded), with forward_key_field set to the key. It is the one
// place a protected request is made, so what two requests with one hash
// send cannot differ.
func (g *Gateway) upstreamRequest(route *httpRoute, kind bodyKind, payload []byte, key string) (*outgoing, error) {
	cfg := route.cfg
	var members map[string]json.RawMessage
	if err := json.Unmarshal(payload, &members); err != nil {
		return nil, fmt.Errorf("the hashed payload does not decode: %w", err)
	}
	query, err := rawPairs(members[queryMember])
	if err != nil {
		return nil, err
	}
	var headers map[string]json.RawMessage
	if h := members[headersMember]; h != nil {
		if err := json.Unmarshal(h, &headers); err != nil {
			return nil, fmt.Errorf("the hashed headers do not decode: %w", err)
		}
	}
	delete(members, queryMember)
	delete(members, headersMember)
	if f := cfg.ForwardKeyField; f != "" {
		members[f], _ = json.Marshal(key) // readHashed dropped any client's value of it
	}
	var body []byte
	contentType := "application/json"
	switch kind {
	case bodyForm:
		contentType = "application/x-www-form-urlencoded"
		raw, err := json.Marshal(members)
		if err != nil {
			return nil, err
		}
		pairs, err := rawPairs(raw)
		if err != nil {
			return nil, err
		}
		body = []byte(encodePairs(pairs))
	default:
		raw, err := json.Marshal(members)
		if err != nil {
			return nil, err
		}
		if body, err = canonjson.Canonicalize(raw, canonjson.Options{}); err != nil {
			return nil, err
		}
	}
	out := &outgoing{method: cfg.Method, url: route.up.url(cfg.Path, encodePairs(query)), header: http.Header{}, body: body}
	if _, err := url.Parse(out.url); err != nil {
		return nil, err
	}
	for name, v := range headers {
		lines, err := stringsOf(v)
		if err != nil {
			return nil, err
		}
		out.header[http.CanonicalHeaderKey(name)] = lines
	}
	out.header.Set("Content-Type", contentType)
	g.upstreamHeaders(out.header)
	if cfg.ForwardKeyHeader != "" {
		out.header.Set(cfg.ForwardKeyHeader, key)
	}
	return out, nil
}

// outgoing is a protected request as upstreamRequest made it.
type outgoing struct {
	method, url string
	header      http.Header
	body        []byte
}

// request returns a new *http.Request of o, whose body cannot be rewound
// (GetBody nil): net/http's Transport never re-sends it by itself.
func (o *outgoing) request(ctx context.Context) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, o.method, o.url, bytes.NewReader(o.body))
	if err != nil {
		return nil, err
	}
	req.GetBody = nil // never replayable: sent at most once
	req.Header = o.header.Clone()
	return req, nil
}

// rawPairs reads the pairs of a form-like object of the payload (name →
// value, or → [values]) in canonical order: names sorted by their bytes,
// a repeated name's values in their order. nil is no pairs.
func rawPairs(obj json.RawMessage) ([]formPair, error) {
	if obj == nil {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, fmt.Errorf("the hashed pairs do not decode: %w", err)
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []formPair
	for _, n := range names {
		vs, err := stringsOf(m[n])
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			out = append(out, formPair{n, v})
		}
	}
	return out, nil
}

// stringsOf reads a string or an array of strings.
func stringsOf(v json.RawMessage) ([]string, error) {
	var one string
	if json.Unmarshal(v, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(v, &many); err != nil {
		return nil, errors.New("a form, query or header value of the hashed payload is not a string or a list of strings")
	}
	return many, nil
}

// encodePairs writes pairs (in rawPairs' canonical order: names sorted,
// a name's values in order) as application/x-www-form-urlencoded, which
// is url.Values' own order.
func encodePairs(pairs []formPair) string {
	v := url.Values{}
	for _, p := range pairs {
		v.Add(p.name, p.value)
	}
	return v.Encode()
}
