package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/policy"
)

// The HTTP front door. A protected route (an action's gateway.http) keeps
// the semantics of the IETF Idempotency-Key header draft: the first
// request is sent once and its answer returned; a retry with the same key
// gets the stored status, headers and body with Idempotent-Replayed: true;
// a duplicate while the first is in flight, or while its outcome is
// unknown, gets 409 and Retry-After; the same key with another body gets
// 422; a missing key where one is required gets 400. Every refusal is a
// problem document (application/problem+json). Other requests pass
// through to the default upstream unchanged.

// maxRequestBytes bounds a protected request's body; the journal bounds
// the payload (64 KiB of canonical JSON) and answers 413 beyond it.
const maxRequestBytes = 1 << 20

// maxUpstreamBytes bounds the upstream's answer read into memory.
const maxUpstreamBytes = 8 << 20

// HeaderOperationKey is set on every answer of a protected route: the
// journal's key of the operation, for support and operators.
const HeaderOperationKey = "Opjournal-Operation-Key"

// httpRoute is one protected route.
type httpRoute struct {
	action string
	cfg    *policy.GatewayHTTP
	up     *upstream
}

// storedAnswer is the journal's result (or refusal) of a protected
// request: {"http_response": ...}, so that a replay tells it from a result
// the reconciler or a person recorded.
type storedAnswer struct {
	Response *storedResponse `json:"http_response"`
}

// storedResponse is what the journal keeps of an answer (the result of a
// success, the refusal of a rejection) to replay it.
type storedResponse struct {
	Status  int                 `json:"status"`
	Headers map[string][]string `json:"headers,omitempty"`
	// Body is a JSON answer; BodyText a text one; BodyOmitted the size of
	// one larger than the route stores (or not text).
	Body        json.RawMessage `json:"body,omitempty"`
	BodyText    *string         `json:"body_text,omitempty"`
	BodyOmitted int             `json:"body_omitted_bytes,omitempty"`
}

// ServeHTTP is the HTTP front door.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Who calls, before anything of the request is read: every request,
	// passed through or not, since the gateway holds the upstream's own
	// credentials.
	c := g.identifyHTTP(w, r)
	if c == nil {
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	route := g.routes[r.Method+" "+r.URL.Path]
	if tracing.Enabled() {
		g.traceHTTP(w, r, route, func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, route) })
		return
	}
	g.serve(w, r, route)
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, route *httpRoute) {
	if route != nil {
		g.serveProtected(w, r, route)
		return
	}
	if g.fallback == nil {
		writeProblem(w, http.StatusNotFound, probNoRoute, "No route", "this gateway has no upstream for "+r.Method+" "+r.URL.Path, "", 0)
		return
	}
	g.passThrough(w, r, g.fallback)
}

// passThrough proxies a request the journal does not protect.
func (g *Gateway) passThrough(w http.ResponseWriter, r *http.Request, up *upstream) {
	target, err := url.Parse(up.base)
	if err != nil {
		writeProblem(w, http.StatusBadGateway, probInternal, "Bad upstream", "the upstream URL does not parse", "", 0)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			g.upstreamHeaders(pr.Out.Header)
		},
		Transport: g.cfg.HTTPClient.Transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeProblem(w, http.StatusBadGateway, probInternal, "Upstream unreachable", "the upstream did not answer", "", 0)
		},
	}
	rp.ServeHTTP(w, r)
}

// serveProtected journals one request of a protected route.
func (g *Gateway) serveProtected(w http.ResponseWriter, r *http.Request, route *httpRoute) {
	cfg := route.cfg
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		writeProblem(w, http.StatusRequestEntityTooLarge, probTooLarge, "Request too large", fmt.Sprintf("a protected request's body is at most %d bytes", maxRequestBytes), "", 0)
		return
	}
	obj, ok := decodeObject(body)
	if !ok {
		writeProblem(w, http.StatusBadRequest, probBadBody, "Body is not a JSON object",
			"a protected route takes a JSON object body: the journal binds its hash to the key", "", 0)
		return
	}
	c := callerOf(r.Context())
	scope := c.scope
	var key string
	var refs map[string]string
	if ck := r.Header.Get(cfg.KeyHeader); ck != "" {
		if key, err = clientKey("http", route.action, scope, ck); err != nil {
			writeProblem(w, http.StatusBadRequest, probKeyInvalid, "Invalid "+cfg.KeyHeader, cfg.KeyHeader+": "+err.Error(), "", 0)
			return
		}
	} else if cfg.KeyRequired {
		writeProblem(w, http.StatusBadRequest, probKeyMissing, "Missing "+cfg.KeyHeader,
			fmt.Sprintf("%s %s needs an %s header: one stable key per intent, the same on every retry, never a new one for a retry", r.Method, r.URL.Path, cfg.KeyHeader), "", 0)
		return
	} else {
		var missing string
		if key, missing = fieldsKey("http", route.action, scope, cfg.KeyFields, obj); missing != "" {
			writeProblem(w, http.StatusBadRequest, probKeyMissing, "Missing key",
				fmt.Sprintf("without an %s header the key is derived from the body's %s, and %q is missing", cfg.KeyHeader, strings.Join(cfg.KeyFields, ", "), missing), "", 0)
			return
		}
	}
	if len(cfg.KeyFields) > 0 {
		refs = refsOf(cfg.KeyFields, obj)
	}
	payload, err := pick(obj, cfg.PayloadFields)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, probBadBody, "Body is not a JSON object", "the body does not encode", key, 0)
		return
	}
	w.Header().Set(HeaderOperationKey, key)
	g.awaitRecord(r.Context(), key)

	var fresh *upstreamAnswer // the upstream's answer to this request, when it was sent
	early := make(chan *upstreamAnswer, 1)
	op := client.Op{Key: key, Action: route.action, Payload: json.RawMessage(payload), Refs: refs}
	out, answered, err := execute(withCaller(r.Context(), c), g, op, early, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		res, rbody, err := g.forward(ctx, r, route, body, obj, a.Key)
		if err != nil {
			return client.Effect{}, client.ClassifyHTTP(nil, err)
		}
		fresh = &upstreamAnswer{status: res.StatusCode, header: res.Header, body: rbody}
		stored := store(res, rbody, cfg)
		if cerr := client.ClassifyHTTP(res, nil); cerr != nil {
			var rej *client.RejectedError
			if errors.As(cerr, &rej) {
				early <- fresh // a definite refusal: the caller may have it now
				return client.Effect{}, client.RejectedWith(rej.Code, storedAnswer{stored}, cerr)
			}
			return client.Effect{}, cerr
		}
		early <- fresh // the effect happened: the caller may have it now
		return client.Effect{ExternalID: externalID(rbody, cfg.ExternalID), Result: storedAnswer{stored}}, nil
	})
	if answered != nil {
		g.log.Info("sent", "door", "http", "action", route.action, "key", key, "status", (*answered).status)
		writeFresh(w, *answered)
		return
	}
	g.answer(w, r, route, key, out, err, fresh)
}

// upstreamAnswer is the upstream's answer to the request being served.
type upstreamAnswer struct {
	status int
	header http.Header
	body   []byte
}

// forward sends the request to the route's upstream, with the operation
// key where the route says, and reads the answer.
func (g *Gateway) forward(ctx context.Context, r *http.Request, route *httpRoute, body []byte, obj map[string]any, key string) (*http.Response, []byte, error) {
	cfg := route.cfg
	if cfg.ForwardKeyField != "" {
		withKey := make(map[string]any, len(obj)+1)
		for k, v := range obj {
			withKey[k] = v
		}
		withKey[cfg.ForwardKeyField] = key
		b, err := json.Marshal(withKey)
		if err != nil {
			return nil, nil, err
		}
		body = b
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, route.up.url(r.URL.Path, r.URL.RawQuery), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for name, vs := range r.Header {
		if policy.HopByHop(name) || http.CanonicalHeaderKey(name) == cfg.KeyHeader {
			continue
		}
		req.Header[name] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	g.upstreamHeaders(req.Header)
	if cfg.ForwardKeyHeader != "" {
		req.Header.Set(cfg.ForwardKeyHeader, key)
	}
	res, err := g.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	rbody, err := io.ReadAll(io.LimitReader(res.Body, maxUpstreamBytes+1))
	if err != nil {
		return nil, nil, err // the answer was lost: unknown
	}
	if len(rbody) > maxUpstreamBytes {
		return nil, nil, fmt.Errorf("the upstream's answer is larger than %d bytes", maxUpstreamBytes)
	}
	return res, rbody, nil
}

// store keeps what the route replays of an answer: its status, the
// headers the policy lists, and the body if it is small enough.
func store(res *http.Response, body []byte, cfg *policy.GatewayHTTP) *storedResponse {
	s := &storedResponse{Status: res.StatusCode}
	for _, h := range cfg.StoreHeaders {
		if vs := res.Header.Values(h); len(vs) > 0 {
			if s.Headers == nil {
				s.Headers = map[string][]string{}
			}
			s.Headers[h] = vs
		}
	}
	switch {
	case len(body) == 0:
	case len(body) > cfg.MaxResponseBytes:
		s.BodyOmitted = len(body)
	case json.Valid(body):
		s.Body = body
	case utf8.Valid(body) && strings.HasPrefix(res.Header.Get("Content-Type"), "text/"):
		t := string(body)
		s.BodyText = &t
	default:
		s.BodyOmitted = len(body)
	}
	return s
}

// externalID reads the provider's id of the effect at ptr ("" for none).
func externalID(body []byte, ptr string) string {
	if ptr == "" {
		return ""
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return ""
	}
	x, ok := lookupPointer(v, ptr)
	if !ok {
		return ""
	}
	switch id := x.(type) {
	case string:
		if len(id) <= opjournal.MaxExternalIDLen {
			return id
		}
	case json.Number:
		return id.String()
	}
	return ""
}

// lookupPointer resolves a JSON pointer (RFC 6901) in v.
func lookupPointer(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i := -1
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// answer writes the outcome of a protected request.
func (g *Gateway) answer(w http.ResponseWriter, r *http.Request, route *httpRoute, key string, out client.Outcome, err error, fresh *upstreamAnswer) {
	log := g.log.With("door", "http", "route", r.Method+" "+r.URL.Path, "action", route.action, "key", key)
	var nr *client.NotRecordedError
	switch {
	case errors.As(err, &nr):
		// Sent, but the journal did not take the outcome: it is unknown
		// to the journal until the reconciler settles it. The provider's
		// own answer, if it came, is still the truth for this caller.
		log.Error("the outcome was not recorded", "err", err)
		if fresh != nil && fresh.status < 300 {
			writeFresh(w, fresh)
			return
		}
		writeProblem(w, http.StatusConflict, probOutcomeUnknown, "Outcome unknown", unknownDetail, key, defaultRetry)
		return
	case err != nil && out.Kind != client.Succeeded:
		g.journalProblem(w, log, key, err)
		return
	}
	switch out.Kind {
	case client.Succeeded, client.FailedFinal:
		if !out.Replayed && fresh != nil {
			log.Info("sent", "status", fresh.status, "outcome", out.Kind.String())
			writeFresh(w, fresh)
			return
		}
		var sa storedAnswer
		if out.Result != nil && json.Unmarshal(out.Result, &sa) == nil && sa.Response != nil && sa.Response.Status != 0 {
			log.Info("replayed", "status", sa.Response.Status, "outcome", out.Kind.String())
			writeStored(w, sa.Response)
			return
		}
		if out.Kind == client.FailedFinal {
			writeProblem(w, http.StatusUnprocessableEntity, probRejected, "Rejected earlier",
				"the provider refused this request earlier ("+out.ErrorCode+"); it was not sent again", key, 0)
			return
		}
		// Recorded without an answer to replay (settled by the
		// reconciler or a person): the effect is confirmed.
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		b, _ := json.Marshal(map[string]any{"operation_key": key, "status": "succeeded", "external_id": out.ExternalID,
			"detail": "the effect is confirmed (settled by the journal); the provider's original answer was not stored"})
		_, _ = w.Write(b)
	case client.InProgressElsewhere:
		writeProblem(w, http.StatusConflict, probInProgress, "Request in progress",
			"a request with this key is being processed; it was not sent again. Retry later with the same key, never a new one", key, min(out.RetryAfter, maxInProgressRetry))
	case client.VerificationRequired:
		log.Info("outcome unknown", "code", out.ErrorCode, "needs_review", out.NeedsReview)
		writeProblem(w, http.StatusConflict, probOutcomeUnknown, "Outcome unknown", unknownDetail, key, defaultRetry)
	case client.Conflict:
		writeProblem(w, http.StatusUnprocessableEntity, probKeyReused, "Key reused with another request",
			"this key was used with a different request; nothing was sent. A new intent needs a new key", key, 0)
	default:
		writeProblem(w, http.StatusInternalServerError, probInternal, "Internal error", "unexpected outcome", key, 0)
	}
}

// maxInProgressRetry caps the Retry-After of a request in progress: the
// journal's hint is the rest of the lease, but most calls end long before
// it, and a retry is cheap (the journal answers it without a call).
const maxInProgressRetry = 2 * time.Second

// defaultRetry is the Retry-After of an unknown outcome: the reconciler
// checks within seconds.
const defaultRetry = 5_000_000_000 // 5 s

// unknownDetail tells a client what an unknown outcome means.
const unknownDetail = "the provider did not give a definite answer (a timeout, a lost connection, a 5xx), so the request may have taken effect. " +
	"It was not sent again. Do NOT retry with a new key: that could do it twice. Retry later with the SAME key: " +
	"once the journal has verified what happened (or a person has decided), the retry gets the settled answer"

// journalProblem answers an error from the journal: nothing was sent.
func (g *Gateway) journalProblem(w http.ResponseWriter, log interface {
	Warn(string, ...any)
	Error(string, ...any)
}, key string, err error) {
	var oe *opjournal.Error
	errors.As(err, &oe)
	field, msg := "", "the request was refused"
	if oe != nil {
		field, msg = oe.Field, oe.Message
	}
	switch client.CodeOf(err) {
	case opjournal.CodeInvalidArgument:
		p := problem{Type: problemBase + probInvalid, Title: "Invalid request", Status: http.StatusBadRequest, Detail: msg + "; nothing was sent", OperationKey: key, Field: field}
		writeJSONProblem(w, p)
	case opjournal.CodeTooLarge:
		writeProblem(w, http.StatusRequestEntityTooLarge, probTooLarge, "Request too large", msg+"; nothing was sent", key, 0)
	case opjournal.CodeUnavailable, opjournal.CodeRateLimited:
		log.Warn("journal unavailable", "err", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable, "Journal unavailable",
			"the journal that protects this route cannot be reached; nothing was sent. Retry with the same key", key, defaultRetry)
	default:
		log.Error("the journal refused the gateway", "code", client.CodeOf(err), "err", err)
		writeProblem(w, http.StatusBadGateway, probInternal, "Gateway misconfigured",
			"the journal refused the gateway's call (see the gateway's log); nothing was sent", key, 0)
	}
}

func writeJSONProblem(w http.ResponseWriter, p problem) {
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}

// writeFresh writes the upstream's own answer with its end-to-end headers.
func writeFresh(w http.ResponseWriter, a *upstreamAnswer) {
	for name, vs := range a.header {
		if policy.HopByHop(name) || name == "Content-Length" {
			continue
		}
		w.Header()[name] = vs
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// writeStored replays a stored answer.
func writeStored(w http.ResponseWriter, s *storedResponse) {
	for name, vs := range s.Headers {
		w.Header()[http.CanonicalHeaderKey(name)] = vs
	}
	w.Header().Set("Idempotent-Replayed", "true")
	if s.BodyOmitted > 0 {
		w.Header().Set("Opjournal-Body-Omitted", fmt.Sprint(s.BodyOmitted))
	}
	w.WriteHeader(s.Status)
	switch {
	case s.Body != nil:
		_, _ = w.Write(s.Body)
	case s.BodyText != nil:
		_, _ = io.WriteString(w, *s.BodyText)
	}
}
