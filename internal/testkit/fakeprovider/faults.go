package fakeprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// FaultKind names a way the provider loses or spoils an answer.
type FaultKind string

// Fault kinds for POST /payments, /emails and /applications. They apply only
// to a request that would store a new effect: a valid body that is not an
// idempotent replay, a key conflict or a key still in flight.
const (
	// CommitThenTimeout stores the effect, then holds the response for
	// Delay (default 30s) or until the client disconnects; a client still
	// there afterwards gets the normal, late answer. The client times out;
	// the effect exists.
	CommitThenTimeout FaultKind = "commit_then_timeout"
	// TimeoutBeforeCommit holds for Delay (default 30s) or until the client
	// disconnects, stores nothing, then answers 504 if the client is still
	// there. The Idempotency-Key is not held meanwhile: the request never
	// got as far as the provider's processing.
	TimeoutBeforeCommit FaultKind = "timeout_before_commit"
	// Reject answers a definite 422 {"error":"rejected_by_fault"} and stores
	// nothing.
	Reject FaultKind = "reject"
	// ErrorAfterCommit stores the effect, then answers 500: an unclear
	// answer for an effect that exists.
	ErrorAfterCommit FaultKind = "error_after_commit"
	// DropConnectionAfterCommit stores the effect, then closes the TCP
	// connection without writing any response.
	DropConnectionAfterCommit FaultKind = "drop_connection_after_commit"
	// Slow is a slow provider: it holds the Idempotency-Key as in flight
	// (a repeat gets 409) for Delay (default 2s), whether or not the client
	// waits, then stores the effect and answers normally. An effect that
	// appears after the client gave up.
	Slow FaultKind = "slow"
)

// Fault kinds for any route: for a POST they act before anything is stored;
// for the GET routes (search and by-id) before anything is read.
const (
	// Error answers 503 {"error":"unavailable"}.
	Error FaultKind = "error"
	// Timeout (GET only) holds for Delay (default 30s) or until the client
	// disconnects, then answers 504 if the client is still there.
	Timeout FaultKind = "timeout"
)

// kindsFor lists the fault kinds each method accepts.
var kindsFor = map[string][]FaultKind{
	http.MethodPost: {CommitThenTimeout, TimeoutBeforeCommit, Reject, ErrorAfterCommit, DropConnectionAfterCommit, Slow, Error},
	http.MethodGet:  {Error, Timeout},
}

// defaultDelay is the delay of each kind that holds a request.
var defaultDelay = map[FaultKind]time.Duration{
	CommitThenTimeout:   30 * time.Second,
	TimeoutBeforeCommit: 30 * time.Second,
	Timeout:             30 * time.Second,
	Slow:                2 * time.Second,
}

// resourcePaths are the collection paths a fault may name.
var resourcePaths = map[string]Kind{"/payments": KindPayment, "/emails": KindEmail, "/applications": KindApplication, "/v1/charges": KindCharge}

// Fault is one fault rule, as given to Provider.AddFault or
// POST /_control/faults. As JSON:
//
//	{"path": "/payments", "fault": "commit_then_timeout", "count": 1, "delay": "2s"}
//	{"method": "GET", "path": "/emails", "fault": "error", "probability": 0.2, "seed": 42}
//
// Rules are tried in the order they were added; the first that matches the
// request's method and path and fires is applied, and no other.
type Fault struct {
	// Method is POST (the default) or GET.
	Method string
	// Path is a collection path, /payments, /emails or /applications: for
	// POST the create route, for GET the search route. For GET,
	// "/payments/*" (and so on) matches the by-id route.
	Path string
	// Kind is what happens to a request the rule fires on.
	Kind FaultKind
	// Count makes the rule fire on the next Count matching requests, then
	// disappear. Give Count or Probability, not both.
	Count int
	// Probability makes the rule fire on each matching request with this
	// probability (0 < p ≤ 1), drawn from a generator seeded with Seed, so
	// the same sequence of requests meets the same faults. The rule stays
	// until cleared.
	Probability float64
	// Seed seeds Probability's generator; nil means Options.Seed (the
	// server's --seed).
	Seed *int64
	// Delay is how long the holding kinds (commit_then_timeout,
	// timeout_before_commit, slow, timeout) hold; 0 means their default.
	// Other kinds refuse a Delay.
	Delay time.Duration
}

// faultJSON is Fault on the wire: the delay is a Go duration string.
type faultJSON struct {
	Method      string    `json:"method,omitempty"`
	Path        string    `json:"path"`
	Kind        FaultKind `json:"fault"`
	Count       int       `json:"count,omitempty"`
	Probability float64   `json:"probability,omitempty"`
	Seed        *int64    `json:"seed,omitempty"`
	Delay       string    `json:"delay,omitempty"`
}

// MarshalJSON writes the fault as POST /_control/faults takes it.
func (f Fault) MarshalJSON() ([]byte, error) {
	w := faultJSON{Method: f.Method, Path: f.Path, Kind: f.Kind, Count: f.Count, Probability: f.Probability, Seed: f.Seed}
	if f.Delay != 0 {
		w.Delay = f.Delay.String()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the fault as POST /_control/faults takes it.
func (f *Fault) UnmarshalJSON(data []byte) error {
	var w faultJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	var delay time.Duration
	if w.Delay != "" {
		d, err := time.ParseDuration(w.Delay)
		if err != nil {
			return fmt.Errorf("delay: %w", err)
		}
		if d <= 0 {
			return errors.New("delay: must be positive")
		}
		delay = d
	}
	*f = Fault{Method: w.Method, Path: w.Path, Kind: w.Kind, Count: w.Count, Probability: w.Probability, Seed: w.Seed, Delay: delay}
	return nil
}

// normalize checks a fault and fills in its defaults.
func (f Fault) normalize() (Fault, error) {
	if f.Method == "" {
		f.Method = http.MethodPost
	}
	f.Method = strings.ToUpper(f.Method)
	kinds, ok := kindsFor[f.Method]
	if !ok {
		return f, fmt.Errorf("method: %q is not POST or GET", f.Method)
	}
	base, byID := strings.CutSuffix(f.Path, "/*")
	if _, ok := resourcePaths[base]; !ok {
		return f, fmt.Errorf("path: %q is not /payments, /emails or /applications (or, for GET, /payments/* and so on)", f.Path)
	}
	if byID && f.Method != http.MethodGet {
		return f, fmt.Errorf("path: %q names the by-id route, which only GET has", f.Path)
	}
	known := false
	for _, k := range kinds {
		known = known || k == f.Kind
	}
	if !known {
		return f, fmt.Errorf("fault: %q is not one of %v for %s", f.Kind, kinds, f.Method)
	}
	switch {
	case f.Count < 0:
		return f, errors.New("count: must be positive")
	case f.Probability < 0 || f.Probability > 1:
		return f, errors.New("probability: must be in (0, 1]")
	case f.Count > 0 && f.Probability > 0:
		return f, errors.New("give count or probability, not both")
	case f.Count == 0 && f.Probability == 0:
		return f, errors.New("give count (the next N requests) or probability (0 < p ≤ 1; 1 means every request)")
	case f.Seed != nil && f.Probability == 0:
		return f, errors.New("seed: only for a probability fault")
	case f.Delay < 0:
		return f, errors.New("delay: must be positive")
	}
	def, holds := defaultDelay[f.Kind]
	if !holds && f.Delay != 0 {
		return f, fmt.Errorf("delay: %s does not hold a request", f.Kind)
	}
	if holds && f.Delay == 0 {
		f.Delay = def
	}
	return f, nil
}

// FaultStatus is a fault rule in the provider's list.
type FaultStatus struct {
	ID          string    `json:"id"` // flt_1, flt_2, …
	Method      string    `json:"method"`
	Path        string    `json:"path"`
	Kind        FaultKind `json:"fault"`
	Count       int       `json:"count,omitempty"`     // as added
	Remaining   int       `json:"remaining,omitempty"` // of Count
	Probability float64   `json:"probability,omitempty"`
	Seed        *int64    `json:"seed,omitempty"`  // the seed in use
	Delay       string    `json:"delay,omitempty"` // for the holding kinds
	Fired       int       `json:"fired"`           // times this rule fired
}

// FaultList is the answer of GET /_control/faults: the rules still active
// (a count rule disappears once it has fired Count times) and how many
// faults of each kind fired since the last clear or reset.
type FaultList struct {
	Faults []FaultStatus     `json:"faults"`
	Fired  map[FaultKind]int `json:"fired"`
}

// faultRule is an active fault.
type faultRule struct {
	id        string
	f         Fault
	seed      int64
	remaining int
	rng       *rand.Rand
	fired     int
}

func newFaultRule(id string, f Fault, defaultSeed int64) *faultRule {
	r := &faultRule{id: id, f: f, remaining: f.Count}
	if f.Probability > 0 {
		r.seed = defaultSeed
		if f.Seed != nil {
			r.seed = *f.Seed
		}
		r.rng = rand.New(rand.NewPCG(uint64(r.seed), 0x6f706a6f75726e6c))
	}
	return r
}

func (r *faultRule) matches(method, path string) bool {
	if r.f.Method != method {
		return false
	}
	if base, byID := strings.CutSuffix(r.f.Path, "/*"); byID {
		id, ok := strings.CutPrefix(path, base+"/")
		return ok && id != "" && !strings.Contains(id, "/")
	}
	return r.f.Path == path
}

func (r *faultRule) status() FaultStatus {
	s := FaultStatus{ID: r.id, Method: r.f.Method, Path: r.f.Path, Kind: r.f.Kind, Count: r.f.Count,
		Remaining: r.remaining, Probability: r.f.Probability, Fired: r.fired}
	if r.rng != nil {
		seed := r.seed
		s.Seed = &seed
	}
	if r.f.Delay != 0 {
		s.Delay = r.f.Delay.String()
	}
	return s
}

// firedFault is a fault applied to one request.
type firedFault struct {
	id    string
	kind  FaultKind
	delay time.Duration
}

// pickFaultLocked finds the fault for a request, if any fires, and counts
// it. The caller holds p.mu.
func (p *Provider) pickFaultLocked(method, path string) *firedFault {
	for i, r := range p.faults {
		if !r.matches(method, path) {
			continue
		}
		if r.rng != nil {
			if r.rng.Float64() >= r.f.Probability {
				continue
			}
		} else {
			r.remaining--
			if r.remaining == 0 {
				p.faults = append(p.faults[:i:i], p.faults[i+1:]...)
			}
		}
		r.fired++
		p.fired[r.f.Kind]++
		return &firedFault{id: r.id, kind: r.f.Kind, delay: r.f.Delay}
	}
	return nil
}
