package fakeprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// EffectCounts is the answer of GET /_control/effects: how many effects
// the provider really performed, per "<kind>:<effect key>", and in all.
type EffectCounts struct {
	Effects map[string]int `json:"effects"` // "payment:<key>" -> count
	Total   int            `json:"total"`
}

// KeyEffects is the answer of GET /_control/effects?key=K: the effects
// stored under one effect key, of any kind, in creation order.
type KeyEffects struct {
	Key     string   `json:"key"`
	Count   int      `json:"count"`
	Records []Record `json:"records"`
}

// Effects counts the stored effects per "<kind>:<effect key>".
func (p *Provider) Effects() EffectCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := EffectCounts{Effects: map[string]int{}, Total: len(p.all)}
	for _, rec := range p.all {
		c.Effects[string(rec.Kind)+":"+rec.EffectKey]++
	}
	return c
}

// Lookup returns the effects stored under an effect key (a payment's
// Idempotency-Key, an email's or application's reference, or a record id),
// whatever the index lag.
func (p *Provider) Lookup(effectKey string) KeyEffects {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := KeyEffects{Key: effectKey, Records: []Record{}}
	for _, rec := range p.byEffect[effectKey] {
		k.Records = append(k.Records, *rec)
	}
	k.Count = len(k.Records)
	return k
}

// Count returns how many effects are stored under an effect key, across
// the three resources.
func (p *Provider) Count(effectKey string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byEffect[effectKey])
}

// AddFault adds a fault rule after the existing ones.
func (p *Provider) AddFault(f Fault) (FaultStatus, error) {
	f, err := f.normalize()
	if err != nil {
		return FaultStatus{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faultSeq++
	r := newFaultRule(fmt.Sprintf("flt_%d", p.faultSeq), f, p.opts.Seed)
	p.faults = append(p.faults, r)
	return r.status(), nil
}

// Faults lists the active fault rules and the faults fired per kind.
func (p *Provider) Faults() FaultList {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faultListLocked()
}

func (p *Provider) faultListLocked() FaultList {
	l := FaultList{Faults: []FaultStatus{}, Fired: map[FaultKind]int{}}
	for _, r := range p.faults {
		l.Faults = append(l.Faults, r.status())
	}
	for k, n := range p.fired {
		l.Fired[k] = n
	}
	return l
}

// ClearFaults removes every fault rule and zeroes the fired counters. It
// returns the list as it was just before.
func (p *Provider) ClearFaults() FaultList {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.faultListLocked()
	p.faults = nil
	p.fired = map[FaultKind]int{}
	return l
}

// Reset forgets every record, Idempotency-Key and fault, and restores
// Options.IndexLag. Record ids are not reused: numbering goes on.
// A request a fault holds at the time stores its effect in the new store.
func (p *Provider) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resetLocked()
}

// SetIndexLag changes the index lag from now on, for old records too.
func (p *Provider) SetIndexLag(d time.Duration) error {
	if d < 0 {
		return errors.New("index_lag: must not be negative")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lag = d
	return nil
}

// IndexLag returns the current index lag.
func (p *Provider) IndexLag() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lag
}

func (p *Provider) handleListFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.Faults())
}

func (p *Provider) handleAddFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if !readControl(w, r, &f) {
		return
	}
	st, err := p.AddFault(f)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_fault", err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, st)
}

func (p *Provider) handleClearFaults(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.ClearFaults())
}

func (p *Provider) handleEffects(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for name := range q {
		if name != "key" {
			writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("unknown parameter %q; this route takes key", name))
			return
		}
	}
	if !q.Has("key") {
		writeJSON(w, http.StatusOK, p.Effects())
		return
	}
	if len(q["key"]) != 1 || q.Get("key") == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "key: give one non-empty value")
		return
	}
	writeJSON(w, http.StatusOK, p.Lookup(q.Get("key")))
}

func (p *Provider) handleReset(w http.ResponseWriter, _ *http.Request) {
	p.Reset()
	writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}

// configJSON is the body of POST /_control/config and the answer of both
// config routes.
type configJSON struct {
	IndexLag *string `json:"index_lag,omitempty"`
}

func (p *Provider) handleConfig(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var c configJSON
		if !readControl(w, r, &c) {
			return
		}
		if c.IndexLag != nil {
			d, err := time.ParseDuration(*c.IndexLag)
			if err == nil {
				err = p.SetIndexLag(d)
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, "invalid_config", "index_lag: "+err.Error())
				return
			}
		}
	}
	lag := p.IndexLag().String()
	writeJSON(w, http.StatusOK, configJSON{IndexLag: &lag})
}

// readControl decodes a control API body strictly into v. On failure it
// has answered 400 or 413.
func readControl(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
		} else {
			writeError(w, http.StatusBadRequest, "invalid_request", "reading the body: "+err.Error())
		}
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "the body: "+err.Error())
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "invalid_request", "the body must be one JSON object, with nothing after it")
		return false
	}
	return true
}
