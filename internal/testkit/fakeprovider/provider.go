package fakeprovider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxBodyBytes is the largest request body the provider reads; a larger
// one gets 413.
const MaxBodyBytes = 1 << 20

// maxIdempotencyKeyLen is the longest Idempotency-Key accepted (as Stripe).
const maxIdempotencyKeyLen = 255

// maxExactInt is the largest integer JSON carries exactly: 2^53 − 1.
const maxExactInt = 1<<53 - 1

// Options configures a Provider.
type Options struct {
	// IndexLag is how old a record must be before search finds it (the
	// eventually consistent search of a real provider). By-id lookups and
	// the control API always see every record at once. Changeable later
	// with SetIndexLag or POST /_control/config; Reset restores it.
	IndexLag time.Duration
	// Seed seeds each probability fault that names no seed of its own.
	Seed int64
	// Logger receives a line per fault fired (info) and per effect stored
	// (debug). Nil discards.
	Logger *slog.Logger
}

// Provider is the test provider: an http.Handler that stores payments,
// emails and applications in memory, can lose answers on request, and
// tells afterwards what really happened. The zero value is not usable;
// call New. A Provider is safe for concurrent use.
type Provider struct {
	opts   Options
	log    *slog.Logger
	mux    *http.ServeMux
	closed chan struct{}
	close  sync.Once

	mu        sync.Mutex
	lag       time.Duration
	all       []*Record            // every record, in creation order
	byID      map[string]*Record   // id -> record
	byEffect  map[string][]*Record // effect key -> records, any kind
	idem      map[string]*idemEntry
	faults    []*faultRule
	fired     map[FaultKind]int
	seq       map[Kind]int // last id number per kind; never reset, so ids are never reused
	faultSeq  int
	lastStamp time.Time
}

// idemEntry is what the provider remembers of an Idempotency-Key.
type idemEntry struct {
	hash string  // of the request body
	rec  *Record // nil while the first request is still in flight
}

// New returns a Provider with an empty store and no faults.
func New(o Options) *Provider {
	p := &Provider{
		opts:   o,
		log:    o.Logger,
		closed: make(chan struct{}),
		seq:    map[Kind]int{},
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.resetLocked()

	mux := http.NewServeMux()
	for path, kind := range resourcePaths {
		mux.HandleFunc("POST "+path, p.handleCreate(kind, path))
		mux.HandleFunc("GET "+path, p.handleSearch(kind, path))
		mux.HandleFunc("GET "+path+"/{id}", p.handleGet(kind))
	}
	mux.HandleFunc("GET /_control/faults", p.handleListFaults)
	mux.HandleFunc("POST /_control/faults", p.handleAddFault)
	mux.HandleFunc("DELETE /_control/faults", p.handleClearFaults)
	mux.HandleFunc("GET /_control/effects", p.handleEffects)
	mux.HandleFunc("POST /_control/reset", p.handleReset)
	mux.HandleFunc("GET /_control/config", p.handleConfig)
	mux.HandleFunc("POST /_control/config", p.handleConfig)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	p.mux = mux
	return p
}

// ServeHTTP serves the provider's HTTP API.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mux.ServeHTTP(w, r)
}

// Close releases every request a fault is holding, at once: a
// commit_then_timeout answers normally, a timeout_before_commit or timeout
// answers 504, a slow request stores its effect and answers. Requests after
// Close are not held. Call it before http.Server.Shutdown so shutdown does
// not wait for the holds. Close is idempotent.
func (p *Provider) Close() {
	p.close.Do(func() { close(p.closed) })
}

// resetLocked empties the store and the faults and restores the options'
// index lag. Id numbers go on from where they were.
func (p *Provider) resetLocked() {
	p.lag = p.opts.IndexLag
	p.all = nil
	p.byID = map[string]*Record{}
	p.byEffect = map[string][]*Record{}
	p.idem = map[string]*idemEntry{}
	p.faults = nil
	p.fired = map[FaultKind]int{}
}

// hold waits for d, the client's disconnection (ctx) or Close, and reports
// whether the client is still there.
func (p *Provider) hold(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-p.closed:
	}
	return ctx.Err() == nil
}

// holdRegardless waits for d or Close, whether or not the client waits.
func (p *Provider) holdRegardless(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.closed:
	}
}

// commitLocked stores a new record. The caller holds p.mu.
func (p *Provider) commitLocked(kind Kind, fields map[string]any, idemKey, hash string) *Record {
	p.seq[kind]++
	now := time.Now()
	// Keep creation times strictly increasing, so that created_at orders
	// records as the store does even on a coarse clock.
	if !now.After(p.lastStamp) {
		now = p.lastStamp.Add(time.Nanosecond)
	}
	p.lastStamp = now
	rec := &Record{
		ID:             fmt.Sprintf("%s_%06d", idPrefix[kind], p.seq[kind]),
		Kind:           kind,
		Status:         status[kind],
		CreatedAt:      now,
		IdempotencyKey: idemKey,
		Fields:         fields,
	}
	switch {
	case (kind == KindPayment || kind == KindCharge) && idemKey != "":
		rec.EffectKey = idemKey
	case kind != KindPayment && kind != KindCharge && rec.Field("reference") != "":
		rec.EffectKey = rec.Field("reference")
	default:
		rec.EffectKey = rec.ID
	}
	p.all = append(p.all, rec)
	p.byID[rec.ID] = rec
	p.byEffect[rec.EffectKey] = append(p.byEffect[rec.EffectKey], rec)
	if idemKey != "" && kind == KindPayment { // charges do not deduplicate
		p.idem[idemKey] = &idemEntry{hash: hash, rec: rec}
	}
	return rec
}

// handleCreate serves POST /payments, /emails and /applications.
func (p *Provider) handleCreate(kind Kind, path string) http.HandlerFunc {
	created := http.StatusCreated
	if kind == KindEmail {
		created = http.StatusAccepted
	}
	return func(w http.ResponseWriter, r *http.Request) {
		read := readObject
		if kind == KindCharge {
			read = readForm
		}
		raw, fields, ok := read(w, r)
		if !ok {
			return
		}
		if status, code, msg := validate(kind, fields); status != 0 {
			writeError(w, status, code, msg)
			return
		}
		var idemKey string
		if kind == KindPayment {
			idemKey = r.Header.Get("Idempotency-Key")
			if len(idemKey) > maxIdempotencyKeyLen {
				writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("Idempotency-Key: longer than %d bytes", maxIdempotencyKeyLen))
				return
			}
		}
		hash := bodyHash(raw, fields)
		// recKey is the key the record is kept under: a payment's
		// Idempotency-Key (which it deduplicates by), a charge's (which it
		// only records).
		recKey := idemKey
		if kind == KindCharge {
			if recKey = r.Header.Get("Idempotency-Key"); len(recKey) > maxIdempotencyKeyLen {
				writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("Idempotency-Key: longer than %d bytes", maxIdempotencyKeyLen))
				return
			}
		}

		p.mu.Lock()
		if idemKey != "" {
			if e := p.idem[idemKey]; e != nil {
				p.mu.Unlock()
				switch {
				case e.hash != hash:
					writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
						"this Idempotency-Key was used with a different request body")
				case e.rec == nil:
					writeError(w, http.StatusConflict, "idempotency_key_in_use",
						"a request with this Idempotency-Key is still being processed; retry later")
				default:
					w.Header().Set("Idempotent-Replayed", "true")
					writeJSON(w, http.StatusOK, e.rec)
				}
				return
			}
		}
		fault := p.pickFaultLocked(http.MethodPost, path)
		if fault == nil {
			rec := p.commitLocked(kind, fields, recKey, hash)
			p.mu.Unlock()
			p.logStored(rec)
			writeJSON(w, created, rec)
			return
		}
		p.logFault(r, fault)
		switch fault.kind {
		case Reject:
			p.mu.Unlock()
			writeError(w, http.StatusUnprocessableEntity, "rejected_by_fault", "the provider rejected the request (injected fault)")
		case Error:
			p.mu.Unlock()
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the provider is unavailable (injected fault)")
		case TimeoutBeforeCommit:
			p.mu.Unlock()
			if p.hold(r.Context(), fault.delay) {
				writeError(w, http.StatusGatewayTimeout, "gateway_timeout", "the provider did not answer in time (injected fault)")
			}
		case Slow:
			if idemKey != "" {
				p.idem[idemKey] = &idemEntry{hash: hash} // in flight: a repeat gets 409
			}
			p.mu.Unlock()
			p.holdRegardless(fault.delay)
			p.mu.Lock()
			var rec *Record
			if e := p.idem[idemKey]; idemKey != "" && e != nil && e.rec != nil {
				rec = e.rec // only after a reset in between
			} else {
				rec = p.commitLocked(kind, fields, recKey, hash)
			}
			p.mu.Unlock()
			p.logStored(rec)
			writeJSON(w, created, rec)
		default: // the kinds that commit first
			rec := p.commitLocked(kind, fields, recKey, hash)
			p.mu.Unlock()
			p.logStored(rec)
			switch fault.kind {
			case CommitThenTimeout:
				if p.hold(r.Context(), fault.delay) {
					writeJSON(w, created, rec)
				}
			case ErrorAfterCommit:
				writeError(w, http.StatusInternalServerError, "internal_error", "the provider failed (injected fault)")
			case DropConnectionAfterCommit:
				dropConnection(w)
			}
		}
	}
}

// dropConnection closes the client's connection without a response.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 or a wrapper that cannot hijack: abort the response,
		// which the server does by resetting the stream or connection.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close() // a FIN with no response: the client reads EOF
}

// handleSearch serves GET /payments, /emails and /applications.
func (p *Provider) handleSearch(kind Kind, path string) http.HandlerFunc {
	allowed := searchFilters[kind]
	return func(w http.ResponseWriter, r *http.Request) {
		if !p.getFault(w, r, path) {
			return
		}
		filters := map[string]string{}
		for name, values := range r.URL.Query() {
			if !contains(allowed, name) {
				writeError(w, http.StatusBadRequest, "invalid_request",
					fmt.Sprintf("unknown search parameter %q; this route takes %s", name, strings.Join(allowed, ", ")))
				return
			}
			if len(values) != 1 || values[0] == "" {
				writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("%s: give one non-empty value", name))
				return
			}
			filters[name] = values[0]
		}
		p.mu.Lock()
		now, lag := time.Now(), p.lag
		candidates := p.all
		for _, name := range []string{"idempotency_key", "reference"} {
			if v, ok := filters[name]; ok {
				candidates = p.byEffect[v] // a record with this key or reference has it as its effect key
				break
			}
		}
		data := []*Record{}
		for _, rec := range candidates {
			if rec.Kind == kind && (lag == 0 || now.Sub(rec.CreatedAt) >= lag) && matchFilters(rec, filters) {
				data = append(data, rec)
			}
		}
		p.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"data": data})
	}
}

// searchFilters are the query parameters each search takes.
var searchFilters = map[Kind][]string{
	KindPayment:     {"idempotency_key", "order_id"},
	KindEmail:       {"reference", "to"},
	KindApplication: {"reference", "job_id", "candidate"},
	KindCharge:      {"idempotency_key"},
}

func matchFilters(rec *Record, filters map[string]string) bool {
	for name, want := range filters {
		got := rec.Field(name)
		if name == "idempotency_key" {
			got = rec.IdempotencyKey
		}
		if got != want {
			return false
		}
	}
	return true
}

// handleGet serves GET /payments/{id} and so on.
func (p *Provider) handleGet(kind Kind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !p.getFault(w, r, r.URL.Path) {
			return
		}
		p.mu.Lock()
		rec := p.byID[r.PathValue("id")]
		p.mu.Unlock()
		if rec == nil || rec.Kind != kind {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no %s with id %q", kind, r.PathValue("id")))
			return
		}
		writeJSON(w, http.StatusOK, rec)
	}
}

// getFault applies a fault to a GET, if one fires, and reports whether the
// request should go on.
func (p *Provider) getFault(w http.ResponseWriter, r *http.Request, path string) bool {
	p.mu.Lock()
	fault := p.pickFaultLocked(http.MethodGet, path)
	p.mu.Unlock()
	if fault == nil {
		return true
	}
	p.logFault(r, fault)
	switch fault.kind {
	case Timeout:
		if p.hold(r.Context(), fault.delay) {
			writeError(w, http.StatusGatewayTimeout, "gateway_timeout", "the provider did not answer in time (injected fault)")
		}
	default: // Error
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the provider is unavailable (injected fault)")
	}
	return false
}

func (p *Provider) logFault(r *http.Request, f *firedFault) {
	p.log.Info("fault fired", "fault", f.kind, "rule", f.id, "method", r.Method, "path", r.URL.Path)
}

func (p *Provider) logStored(rec *Record) {
	p.log.Debug("effect stored", "id", rec.ID, "effect_key", rec.EffectKey)
}

// readObject reads a request body that must be one JSON object. On failure
// it has answered and ok is false.
func readObject(w http.ResponseWriter, r *http.Request) (raw []byte, fields map[string]any, ok bool) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		} else {
			writeError(w, http.StatusBadRequest, "invalid_request", "reading the body: "+err.Error())
		}
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil || fields == nil {
		msg := "the body must be a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, "invalid_request", msg)
		return nil, nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "invalid_request", "the body must be one JSON object, with nothing after it")
		return nil, nil, false
	}
	return raw, fields, true
}

// readForm reads a form body (a charge's), as readObject reads JSON:
// each name once is a string, a repeated name a list in order, and an
// amount a number, as the provider's answer shows it.
func readForm(w http.ResponseWriter, r *http.Request) (raw []byte, fields map[string]any, ok bool) {
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(mt) != "application/x-www-form-urlencoded" {
		writeError(w, http.StatusUnsupportedMediaType, "invalid_request", "the body must be application/x-www-form-urlencoded")
		return nil, nil, false
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		return nil, nil, false
	}
	vals, err := url.ParseQuery(string(raw))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "the form does not decode")
		return nil, nil, false
	}
	fields = make(map[string]any, len(vals))
	for name, vs := range vals {
		if len(vs) == 1 {
			fields[name] = vs[0]
		} else {
			list := make([]any, len(vs))
			for i, v := range vs {
				list[i] = v
			}
			fields[name] = list
		}
	}
	if a, ok := fields["amount"].(string); ok {
		fields["amount"] = json.Number(a)
		if _, err := strconv.ParseInt(a, 10, 64); err != nil {
			fields["amount"] = a // not a number: validate says so
		}
	}
	return raw, fields, true
}

// bodyHash fingerprints a request body independent of key order and
// whitespace (encoding/json writes map keys sorted).
func bodyHash(raw []byte, fields map[string]any) string {
	canon, err := json.Marshal(fields)
	if err != nil { // cannot happen for decoded JSON; fall back to the bytes
		canon = raw
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// validate checks a create request. A non-zero status is a definite
// rejection: nothing is stored.
func validate(kind Kind, f map[string]any) (status int, code, msg string) {
	bad := func(msg string) (int, string, string) {
		return http.StatusBadRequest, "invalid_request", msg
	}
	var required, optional []string
	switch kind {
	case KindPayment:
		n, ok := f["amount_minor"].(json.Number)
		if !ok {
			return bad("amount_minor: required, a positive integer (minor units)")
		}
		if v, err := strconv.ParseInt(n.String(), 10, 64); err != nil || v <= 0 || v > maxExactInt {
			return bad(fmt.Sprintf("amount_minor: %s is not a positive integer up to 2^53-1", n))
		}
		optional = []string{"currency", "order_id", "card"}
		if f["card"] == "declined" {
			return http.StatusPaymentRequired, "card_declined", "the card was declined"
		}
	case KindEmail:
		required, optional = []string{"to"}, []string{"subject", "reference"}
	case KindCharge:
		n, ok := f["amount"].(json.Number)
		if v, err := strconv.ParseInt(string(n), 10, 64); !ok || err != nil || v <= 0 || v > maxExactInt {
			return bad("amount: required, a positive integer (the smallest currency unit)")
		}
		required = []string{"currency"}
	case KindApplication:
		required, optional = []string{"job_id", "candidate"}, []string{"reference"}
	}
	for _, name := range required {
		if s, ok := f[name].(string); !ok || s == "" {
			return bad(name + ": required, a non-empty string")
		}
	}
	for _, name := range optional {
		if v := f[name]; v != nil { // absent or null is fine
			if _, isString := v.(string); !isString {
				return bad(name + ": must be a string")
			}
		}
	}
	return 0, "", ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":"internal_error","message":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// writeError answers {"error": code, "message": msg}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": code, "message": msg})
}
