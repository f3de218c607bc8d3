package soak

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/opjournal/opjournal/fakeprovider"
)

// faultSet arms the provider's fault rules and counts what fired, across
// the clears that a search outage needs (the provider can only clear all
// rules at once, which also resets its counters).
type faultSet struct {
	cfg     Config
	control *fakeprovider.ControlClient

	mu          sync.Mutex
	epoch       int             // how many times the rules were armed; varies their seeds
	fired       map[string]int  // "POST slow" -> count, over past epochs
	outage      string          // the path whose search is down, "" if none
	outageRules map[string]bool // ids of the outage's rules
}

// rules returns the rules for the current epoch. A provider tries rules
// in order and applies the first that fires, so rule k gets the
// probability rate_k / (1 − Σ_{j<k} rate_j): each kind then meets exactly
// its configured share of the requests.
func (f *faultSet) rulesLocked() (rules []fakeprovider.Fault, outage []bool) {
	r := f.cfg.Faults
	post := []struct {
		kind fakeprovider.FaultKind
		rate float64
	}{
		{fakeprovider.CommitThenTimeout, r.CommitThenTimeout},
		{fakeprovider.TimeoutBeforeCommit, r.TimeoutBeforeCommit},
		{fakeprovider.Reject, r.Reject},
		{fakeprovider.ErrorAfterCommit, r.ErrorAfterCommit},
		{fakeprovider.DropConnectionAfterCommit, r.DropConnectionAfterCommit},
		{fakeprovider.Slow, r.Slow},
		{fakeprovider.Error, r.Error},
	}
	get := []struct {
		kind fakeprovider.FaultKind
		rate float64
	}{
		{fakeprovider.Error, r.SearchError},
		{fakeprovider.Timeout, r.SearchTimeout},
	}
	var out []fakeprovider.Fault
	var isOutage []bool
	n := 0
	add := func(method, path string, kind fakeprovider.FaultKind, rate, used float64) {
		n++
		if rate <= 0 {
			return
		}
		p := min(rate/(1-used), 1)
		seed := f.cfg.Seed*1_000_003 + int64(f.epoch)*1009 + int64(n)
		ft := fakeprovider.Fault{Method: method, Path: path, Kind: kind, Probability: p, Seed: &seed}
		switch kind {
		case fakeprovider.Slow:
			ft.Delay = f.cfg.SlowDelay
		case fakeprovider.CommitThenTimeout, fakeprovider.TimeoutBeforeCommit, fakeprovider.Timeout:
			ft.Delay = f.cfg.HoldDelay
		}
		out = append(out, ft)
		isOutage = append(isOutage, false)
	}
	for _, a := range actions {
		if a.path == f.outage {
			// First, so that it fires on every search of this path.
			seed := f.cfg.Seed
			out = append(out, fakeprovider.Fault{Method: http.MethodGet, Path: a.path, Kind: fakeprovider.Error, Probability: 1, Seed: &seed})
			isOutage = append(isOutage, true)
		}
		used := 0.0
		for _, k := range post {
			add(http.MethodPost, a.path, k.kind, k.rate, used)
			used += k.rate
		}
		used = 0
		for _, k := range get {
			add(http.MethodGet, a.path, k.kind, k.rate, used)
			used += k.rate
		}
	}
	return out, isOutage
}

// arm replaces the provider's rules with the current epoch's, keeping the
// counts of the rules it removes.
func (f *faultSet) arm(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.clearLocked(ctx); err != nil {
		return err
	}
	f.epoch++
	rules, outage := f.rulesLocked()
	for i, r := range rules {
		st, err := f.control.AddFault(ctx, r)
		if err != nil {
			return fmt.Errorf("arm fault %s %s %s: %w", r.Method, r.Path, r.Kind, err)
		}
		if outage[i] {
			if f.outageRules == nil {
				f.outageRules = map[string]bool{}
			}
			f.outageRules[st.ID] = true
		}
	}
	return nil
}

// setOutage makes path's search fail (or, with "", ends the outage).
func (f *faultSet) setOutage(ctx context.Context, path string) error {
	f.mu.Lock()
	f.outage = path
	f.mu.Unlock()
	return f.arm(ctx)
}

// clear removes every rule for good, keeping their counts.
func (f *faultSet) clear(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clearLocked(ctx)
}

func (f *faultSet) clearLocked(ctx context.Context) error {
	l, err := f.control.ClearFaults(ctx)
	if err != nil {
		return fmt.Errorf("clear faults: %w", err)
	}
	f.addLocked(f.fired, l)
	return nil
}

// addLocked adds the fired counts of l's rules to m, by "METHOD kind". A
// search outage's rule counts as "GET outage".
func (f *faultSet) addLocked(m map[string]int, l fakeprovider.FaultList) {
	for _, r := range l.Faults {
		if r.Fired == 0 {
			continue
		}
		name := r.Method + " " + string(r.Kind)
		if f.outageRules[r.ID] {
			name = "GET outage"
		}
		m[name] += r.Fired
	}
}

// counts returns the faults fired so far by "METHOD kind".
func (f *faultSet) counts(ctx context.Context) (map[string]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.fired {
		out[k] = v
	}
	l, err := f.control.Faults(ctx)
	if err != nil {
		return out, err
	}
	f.addLocked(out, l)
	return out, nil
}

// total sums counts.
func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
