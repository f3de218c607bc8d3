package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/httpheader"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"github.com/opjournal/opjournal/protocol/policy"
)

// The HTTP front door. A protected route (an action's gateway.http) keeps
// the semantics of the IETF Idempotency-Key header draft: the first
// request is sent once and its answer returned; a retry with the same key
// gets the stored status, headers and body with Idempotent-Replayed: true;
// a duplicate while the first is in flight, or while its outcome is
// unknown, gets 409 and Retry-After; the same key with another body gets
// 422; a missing key where one is required gets 400; a request a budget
// of its action refuses gets 429 and Retry-After (budget.go). Every
// refusal is a problem document (application/problem+json). Other
// requests pass through to the default upstream unchanged.

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
	// escaped is the route's path as a request spells it exactly
	// (url.URL.EscapedPath).
	escaped string
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
	// The body, byte-exact: BodyText when it is UTF-8, BodyBase64
	// otherwise. Body is a JSON answer kept as JSON, for an action with
	// redact_fields only (so that the journal can redact its members; its
	// replay is the canonical JSON, not the provider's bytes). BodyOmitted
	// is the size of a body that was not stored (larger than the route
	// stores, or one that may hold a redacted member but is not JSON).
	Body        json.RawMessage `json:"body,omitempty"`
	BodyText    *string         `json:"body_text,omitempty"`
	BodyBase64  string          `json:"body_base64,omitempty"`
	BodyOmitted int             `json:"body_omitted_bytes,omitempty"`
}

// ServeHTTP is the HTTP front door.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if decisionRoute(r.URL) {
		// Whoever asks: no approval or rejection goes through a door that
		// agents use (approval.go).
		writeDecisionRefused(w)
		return
	}
	// Who calls, before anything of the request is read: every request,
	// passed through or not, since the gateway holds the upstream's own
	// credentials.
	c := g.identifyHTTP(w, r)
	if c == nil {
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	if r.URL.Path == IdempotencyPolicyPath {
		g.servePolicy(w, r)
		return
	}
	route := g.routes[r.Method+" "+r.URL.Path]
	if route != nil && r.URL.EscapedPath() != route.escaped {
		route = nil // the route's path spelled with other escapes (%2F for a slash, say)
	}
	if route == nil {
		if near := g.canonical[canonicalRoute(r.Method, r.URL)]; near != nil {
			// Another spelling of a protected route: an upstream router
			// that folds case, slashes or encodings would run the action
			// without the journal, so it is never passed through.
			writeProblem(w, http.StatusBadRequest, probNonCanonicalPath, "Not the protected route's path",
				fmt.Sprintf("this request may reach %s %s at the provider, which this gateway protects: send it as exactly %s %s", near.cfg.Method, near.cfg.Path, near.cfg.Method, near.cfg.Path), "", 0)
			return
		}
	}
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
	if crossSite(r) {
		writeProblem(w, http.StatusForbidden, probCrossSite, "Cross-site request refused",
			"a browser sent this request from another site (Origin or Sec-Fetch-Site); a protected route takes no cross-site requests", "", 0)
		return
	}
	kind := mediaKind(r.Header)
	if kind == 0 {
		writeProblem(w, http.StatusUnsupportedMediaType, probMediaType, "Unsupported Content-Type",
			"a protected route takes Content-Type: application/json (or a +json type) or application/x-www-form-urlencoded", "", 0)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		writeProblem(w, http.StatusRequestEntityTooLarge, probTooLarge, "Request too large", fmt.Sprintf("a protected request's body is at most %d bytes", maxRequestBytes), "", 0)
		return
	}
	hr, refused := readHashed(r, route, kind, body)
	if refused != nil {
		refused.write(w)
		return
	}
	obj := hr.obj
	c := callerOf(r.Context())
	scope := c.scope
	var key string
	var refs map[string]string
	if lines := r.Header.Values(cfg.KeyHeader); len(lines) > 0 {
		ck, err := readClientKey(lines)
		if err != nil {
			describedBy(w)
			writeProblem(w, http.StatusBadRequest, probKeyInvalid, "Invalid "+cfg.KeyHeader, cfg.KeyHeader+" "+err.Error()+"; nothing was sent", "", 0)
			return
		}
		key = clientKey("http", route.action, scope, ck)
	} else if cfg.KeyRequired {
		describedBy(w)
		writeProblem(w, http.StatusBadRequest, probKeyMissing, "Missing "+cfg.KeyHeader,
			fmt.Sprintf("%s %s needs an %s header: one stable key per intent, the same on every retry, never a new one for a retry", r.Method, r.URL.Path, cfg.KeyHeader), "", 0)
		return
	} else {
		var missing string
		if key, missing = fieldsKey("http", route.action, scope, cfg.KeyFields, obj); missing != "" {
			describedBy(w)
			writeProblem(w, http.StatusBadRequest, probKeyMissing, "Missing key",
				fmt.Sprintf("without an %s header the key is derived from the body's %s, and %q is missing", cfg.KeyHeader, strings.Join(cfg.KeyFields, ", "), missing), "", 0)
			return
		}
	}
	if len(cfg.KeyFields) > 0 {
		refs = refsOf(cfg.KeyFields, obj)
	}
	w.Header().Set(HeaderOperationKey, key)
	g.awaitRecord(r.Context(), key)

	var fresh *upstreamAnswer // the upstream's answer to this request, when it was sent
	early := make(chan *upstreamAnswer, 1)
	// The upstream request, made now from the hashed payload: a request
	// the gateway could not make is refused before the journal hears of it.
	up, err := g.upstreamRequest(route, kind, hr.payload, key)
	if err != nil {
		g.log.Error("the upstream request could not be made", "action", route.action, "key", key, "err", err)
		writeProblem(w, http.StatusInternalServerError, probInternal, "Internal error", "the gateway could not make the provider's request; nothing was sent", key, 0)
		return
	}
	op := client.Op{Key: key, Action: route.action, Payload: json.RawMessage(hr.payload), Refs: refs}
	out, answered, err := execute(withCaller(r.Context(), c), g, op, early, func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		res, rbody, err := g.forward(ctx, up)
		if err != nil {
			return client.Effect{}, client.ClassifyHTTP(nil, err)
		}
		fresh = &upstreamAnswer{status: res.StatusCode, header: res.Header, body: rbody}
		stored := g.store(res, rbody, route, a.Key)
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

// forward sends a protected request to the route's upstream (up, made
// from the hashed payload by upstreamRequest, hashed.go, with the
// operation key, which is every attempt's key) and reads the answer.
//
// The request is sent once or not at all: its body cannot be rewound
// (GetBody is nil), so net/http's Transport never re-sends it by itself on
// a reused connection that drops after the request was written (it would
// for a POST carrying an Idempotency-Key or X-Idempotency-Key header); see
// noResend for every other request, and the client follows no redirect.
func (g *Gateway) forward(ctx context.Context, up *outgoing) (*http.Response, []byte, error) {
	req, err := up.request(ctx)
	if err != nil {
		return nil, nil, err
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

// maxStoredBytes bounds the stored answer as the journal keeps it (its
// result limit is 64 KiB of canonical JSON): a body whose encoding (JSON
// string escapes, base64) would exceed it is omitted.
const maxStoredBytes = 63 << 10

// store keeps what the route replays of an answer: its status, the
// headers the policy lists, and the body's bytes if they are small
// enough. A body it does not keep is logged (the replay says so too).
func (g *Gateway) store(res *http.Response, body []byte, route *httpRoute, key string) *storedResponse {
	cfg := route.cfg
	s := &storedResponse{Status: res.StatusCode}
	for _, h := range cfg.StoreHeaders {
		if vs := res.Header.Values(h); len(vs) > 0 {
			if s.Headers == nil {
				s.Headers = map[string][]string{}
			}
			s.Headers[h] = vs
		}
	}
	omit := func(why string) {
		s.Body, s.BodyText, s.BodyBase64 = nil, nil, ""
		s.BodyOmitted = len(body)
		g.log.Warn("the answer's body is not stored; a replay goes without it", "action", route.action, "key", key, "status", res.StatusCode, "bytes", len(body), "reason", why)
	}
	var redacts []string
	if act, ok := g.cfg.Policy.Action(route.action); ok {
		redacts = act.RedactFields
	}
	switch {
	case len(body) == 0:
		return s
	case len(body) > cfg.MaxResponseBytes:
		omit("larger than max_response_bytes")
		return s
	case len(redacts) > 0:
		// The journal redacts members of JSON only: a body that holds a
		// redacted member is kept as JSON, so that the journal replaces
		// its value (and the replay is that canonical JSON). Any other
		// body is kept byte-exact: it carries nothing to redact.
		if c, err := canonjson.Canonicalize(body, canonjson.Options{}); err == nil {
			if namesMember(c, redacts) {
				s.Body = c
			} else {
				s.storeBytes(body)
			}
		} else if !mayHoldName(body, redacts) {
			s.storeBytes(body)
		} else {
			omit("the action redacts fields and the body is not canonical JSON")
			return s
		}
	default:
		s.storeBytes(body)
	}
	if b, err := json.Marshal(storedAnswer{s}); err != nil || len(b) > maxStoredBytes {
		omit("its encoding is larger than the journal stores")
	}
	return s
}

// storeBytes keeps body byte-exact: as text when it is UTF-8.
func (s *storedResponse) storeBytes(body []byte) {
	if utf8.Valid(body) {
		t := string(body)
		s.BodyText = &t
		return
	}
	s.BodyBase64 = base64.StdEncoding.EncodeToString(body)
}

// namesMember reports whether canonical JSON has a string equal to one of
// names (every member name is one): as the journal's own test for
// whether a result needs redacting, it errs only towards keeping the
// body as JSON.
func namesMember(canonical []byte, names []string) bool {
	dec := json.NewDecoder(bytes.NewReader(canonical))
	for {
		tok, err := dec.Token()
		if err != nil {
			return err != io.EOF // a body that does not read is kept as JSON
		}
		if str, ok := tok.(string); ok && slices.Contains(names, str) {
			return true
		}
	}
}

// mayHoldName reports whether any of names occurs in body at all.
func mayHoldName(body []byte, names []string) bool {
	for _, n := range names {
		if bytes.Contains(bytes.ToLower(body), bytes.ToLower([]byte(n))) {
			return true
		}
	}
	return false
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
		if g.ids.refusedByJournal(callerOf(r.Context()), err) {
			// Revoked since the gateway last asked who it is: refused as
			// ServeHTTP refuses an unknown credential, never taken for a
			// misconfigured gateway.
			log.Warn("the journal refused the caller's credential; its cached identity is dropped")
			writeUnauthenticated(w, errBadCredential)
			return
		}
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
			if replayable(sa.Response, out.Kind) {
				log.Info("replayed", "status", sa.Response.Status, "outcome", out.Kind.String())
				writeStored(w, route.cfg, sa.Response)
				return
			}
			// Not an answer the gateway would have stored (a redirect, a
			// 1xx or 5xx, a status out of range): whoever recorded it,
			// it is not replayed.
			log.Warn("the stored answer is not replayed: its status is not one the gateway stores", "status", sa.Response.Status, "outcome", out.Kind.String())
		}
		if out.Kind == client.FailedFinal {
			p := problem{Type: problemBase + probRejected, Title: "Rejected earlier", Status: http.StatusUnprocessableEntity, OperationKey: key, ErrorCode: out.ErrorCode,
				Detail: "the provider refused this request earlier (" + out.ErrorCode + "); it was not sent again"}
			if rejectedByApproval(out) {
				log.Info("rejected by approval", "code", out.ErrorCode)
				p.Title, p.Detail = "Rejected by a person", fmt.Sprintf(rejectedByApprovalDetail, out.ErrorCode)
			}
			writeProblemDoc(w, p, 0)
			return
		}
		// Recorded without an answer to replay (settled by the
		// reconciler or a person): the effect is confirmed. The
		// provider's resource, when the settlement holds it, is the
		// answer; otherwise the client is told plainly that there is
		// none, never given a made-up resource.
		if res := settledResource(out.Result); res != nil {
			log.Info("replayed the settled resource", "outcome", out.Kind.String())
			writeReplayHeaders(w)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Opjournal-Replay-Source", "settlement")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(append(res, '\n'))
			return
		}
		log.Warn("succeeded without a stored answer to replay", "outcome", out.Kind.String())
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSONProblem(w, problem{Type: problemBase + probAnswerNotStored, Title: "Succeeded; the answer was not stored",
			Status: http.StatusConflict, OperationKey: key, ExternalID: out.ExternalID,
			Detail: "this request already succeeded (the effect is confirmed, see external_id), but the provider's original answer was not stored, so it cannot be replayed. " +
				"It was not sent again. Do NOT retry with a new key: that would do it twice. Read the resource from the provider by its external_id"})
	case client.InProgressElsewhere:
		// The draft's 409 for a request still outstanding, always with a
		// Retry-After (at least a second: a 0 would invite a busy loop).
		describedBy(w)
		writeProblem(w, http.StatusConflict, probInProgress, "Request in progress",
			"a request with this key is being processed; it was not sent again. Retry later with the same key, never a new one", key, max(time.Second, min(out.RetryAfter, maxInProgressRetry)))
	case client.VerificationRequired:
		log.Info("outcome unknown", "code", out.ErrorCode, "needs_review", out.NeedsReview)
		describedBy(w)
		writeProblem(w, http.StatusConflict, probOutcomeUnknown, "Outcome unknown", unknownDetail, key, defaultRetry)
	case client.AwaitingApproval:
		log.Info("held for approval", "retry_after", out.RetryAfter)
		writeApprovalPending(w, key, out)
	case client.BudgetExceeded:
		writeBudgetExceeded(w, log, key, out)
	case client.Conflict:
		describedBy(w)
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
		if httpheader.HopByHop(name) || name == "Content-Length" {
			continue
		}
		w.Header()[name] = vs
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// replayable reports whether s is an answer the gateway itself would have
// stored for an outcome of kind: a 2xx for a success, a 4xx for a
// refusal. Anything else in the journal (a 3xx with a Location, a 5xx)
// was put there by someone else and is not replayed.
func replayable(s *storedResponse, kind client.OutcomeKind) bool {
	if kind == client.Succeeded {
		return s.Status >= 200 && s.Status <= 299
	}
	return s.Status >= 400 && s.Status <= 499
}

// settledResource returns the provider's resource a settlement recorded
// (the reconciler's {"resource": {...}}), or nil.
func settledResource(result json.RawMessage) json.RawMessage {
	var r struct {
		Resource json.RawMessage `json:"resource"`
	}
	if result == nil || json.Unmarshal(result, &r) != nil || len(r.Resource) == 0 || r.Resource[0] != '{' {
		return nil
	}
	return r.Resource
}

func writeReplayHeaders(w http.ResponseWriter) {
	w.Header().Set("Idempotent-Replayed", "true")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// writeStored replays a stored answer: only the headers the route stores
// (whatever else the stored result holds: the journal's result can be
// written by any caller of the gateway's tenant), and a Content-Type from
// them or from the body's kind.
func writeStored(w http.ResponseWriter, cfg *policy.GatewayHTTP, s *storedResponse) {
	for name, vs := range s.Headers {
		c := http.CanonicalHeaderKey(name)
		if !slices.Contains(cfg.StoreHeaders, c) || httpheader.HopByHop(c) || c == "Set-Cookie" || httpheader.IsSecret(c) {
			continue
		}
		w.Header()[c] = vs
	}
	writeReplayHeaders(w)
	if s.BodyOmitted > 0 {
		w.Header().Set("Opjournal-Body-Omitted", fmt.Sprint(s.BodyOmitted))
	}
	var body []byte
	kindType := ""
	switch {
	case s.Body != nil:
		body, kindType = s.Body, "application/json"
	case s.BodyText != nil:
		body, kindType = []byte(*s.BodyText), "text/plain; charset=utf-8"
		if json.Valid(body) {
			kindType = "application/json"
		}
	case s.BodyBase64 != "":
		b, err := base64.StdEncoding.DecodeString(s.BodyBase64)
		if err == nil {
			body, kindType = b, "application/octet-stream"
		}
	}
	if w.Header().Get("Content-Type") == "" && body != nil {
		w.Header().Set("Content-Type", kindType)
	}
	w.WriteHeader(s.Status)
	_, _ = w.Write(body)
}

// IdempotencyPolicyPath is where the HTTP door publishes its idempotency
// specification, as draft-ietf-httpapi-idempotency-key-header asks of a
// resource: per protected route, the key's header, syntax and scope, the
// fingerprint, and when a key expires (the action's retention). Its
// refusals about keys link to it (Link: rel="describedby").
const IdempotencyPolicyPath = "/.well-known/opjournal-idempotency"

// idempotencyDraft is the revision of the draft the HTTP door was checked
// against (docs/gateway.md has the table, point by point).
const idempotencyDraft = "draft-ietf-httpapi-idempotency-key-header-09"

// describedBy links a refusal about an idempotency key to the published
// specification, the draft's alternative to a link in the body (whose
// type is a URN, which no client dereferences).
func describedBy(w http.ResponseWriter) {
	w.Header().Set("Link", "<"+IdempotencyPolicyPath+`>; rel="describedby"; type="application/json"`)
}

// idempotencyPolicy is the document at IdempotencyPolicyPath.
type idempotencyPolicy struct {
	Specification string        `json:"specification"`
	Routes        []routePolicy `json:"routes"`
}

// routePolicy is the idempotency specification of one protected route.
type routePolicy struct {
	Route       string   `json:"route"`
	Action      string   `json:"action"`
	KeyHeader   string   `json:"key_header"`
	KeyRequired bool     `json:"key_required"`
	KeyFields   []string `json:"key_fields,omitempty"`
	// KeySyntax and KeyMaxLength say what readClientKey accepts.
	KeySyntax    string `json:"key_syntax"`
	KeyMaxLength int    `json:"key_max_length"`
	KeyScope     string `json:"key_scope"`
	// KeyExpiresAfterSeconds is the action's retention: how long after
	// its operation last changed a key is remembered (KeyExpiry says the
	// rest).
	KeyExpiresAfterSeconds int64  `json:"key_expires_after_seconds"`
	KeyExpiry              string `json:"key_expiry"`
	Fingerprint            string `json:"fingerprint"`
	Replays                string `json:"replays"`
}

// The texts of the published specification, the same for every route.
const (
	keySyntaxText = `an RFC 8941 structured-field string ("8e03978e-40d5-43e8-bc93-6894a57f9324"), or, for clients written for Stripe, ` +
		`a bare value of visible ASCII characters; a value that starts with a quote must be one sf-string without parameters; ` +
		`the two spellings are two keys; the header must be sent once`
	keyScopeText  = "the caller's principal: two callers' equal keys are two intents"
	keyExpiryText = "a key is remembered for key_expires_after_seconds after its operation last changed, then forgotten once the operation has ended " +
		"(succeeded or refused) and no person must look at it; an operation that has not ended is never forgotten. " +
		"A forgotten key is new again: the same key and request are then sent again"
	fingerprintText = "SHA-256 of the RFC 8785 canonical JSON of the body's members (a form's pairs), with the query's pairs as $query and " +
		"the forwarded headers as $headers: the same key with another fingerprint is 422"
	replaysText = "a 2xx or 4xx answer is replayed with Idempotent-Replayed: true; a request still in flight, or whose outcome is unknown, is 409 with Retry-After"
)

// servePolicy answers GET IdempotencyPolicyPath.
func (g *Gateway) servePolicy(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeProblem(w, http.StatusMethodNotAllowed, probMethod, "Method not allowed", "the idempotency specification is read with GET", "", 0)
		return
	}
	doc := idempotencyPolicy{Specification: idempotencyDraft, Routes: []routePolicy{}}
	for _, route := range g.routes {
		cfg := route.cfg
		rp := routePolicy{Route: cfg.Method + " " + cfg.Path, Action: route.action, KeyHeader: cfg.KeyHeader, KeyRequired: cfg.KeyRequired,
			KeyFields: cfg.KeyFields, KeySyntax: keySyntaxText, KeyMaxLength: maxClientKeyLen, KeyScope: keyScopeText,
			KeyExpiry: keyExpiryText, Fingerprint: fingerprintText, Replays: replaysText}
		if act, ok := g.cfg.Policy.Action(route.action); ok {
			rp.KeyExpiresAfterSeconds = int64(act.Retention / time.Second)
		}
		doc.Routes = append(doc.Routes, rp)
	}
	slices.SortFunc(doc.Routes, func(a, b routePolicy) int { return strings.Compare(a.Route, b.Route) })
	b, _ := json.MarshalIndent(doc, "", "  ")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(append(b, '\n'))
	}
}
