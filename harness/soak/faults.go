package soak

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// faultSet arms the provider's fault rules and counts what fired, across
// the clears that a search outage needs (the provider can only clear all
// rules at once, which also resets its counters).
type faultSet struct {
	cfg     Config
	control *fakeprovider.ControlClient

	mu     sync.Mutex
	epoch  int               // how many times the rules were armed; varies their seeds
	fired  map[string]int    // "POST slow" -> count, over past epochs
	outage string            // the path whose search is down, "" if none
	labels map[string]string // rule id -> its name in the counts, where not "METHOD kind"
}

// The names under which the counts report the slow-lease faults and the
// search outage (the provider knows them all as "slow" or "error").
const (
	FaultSlowLease15 = "POST slow_1.5x_lease"
	FaultSlowLease3  = "POST slow_3x_lease"
	FaultOutage      = "GET outage"
)

// rules returns the rules for the current epoch. A provider tries rules
// in order and applies the first that fires, so rule k gets the
// probability rate_k / (1 − Σ_{j<k} rate_j): each kind then meets exactly
// its configured share of the requests.
func (f *faultSet) rulesLocked() (rules []fakeprovider.Fault, labels []string) {
	r := f.cfg.Faults
	type rule struct {
		kind  fakeprovider.FaultKind
		rate  float64
		label string        // "" for "METHOD kind"
		delay time.Duration // for the kinds that hold
	}
	var out []fakeprovider.Fault
	n := 0
	add := func(method, path string, k rule, used float64) {
		n++
		if k.rate <= 0 {
			return
		}
		p := min(k.rate/(1-used), 1)
		seed := f.cfg.Seed*1_000_003 + int64(f.epoch)*1009 + int64(n)
		out = append(out, fakeprovider.Fault{Method: method, Path: path, Kind: k.kind, Probability: p, Seed: &seed, Delay: k.delay})
		labels = append(labels, k.label)
	}
	for _, a := range actions {
		plan := f.cfg.plan(a.name)
		if a.path == f.outage {
			// First, so that it fires on every search of this path.
			seed := f.cfg.Seed
			out = append(out, fakeprovider.Fault{Method: http.MethodGet, Path: a.path, Kind: fakeprovider.Error, Probability: 1, Seed: &seed})
			labels = append(labels, FaultOutage)
		}
		post := []rule{
			{kind: fakeprovider.CommitThenTimeout, rate: r.CommitThenTimeout, delay: plan.postHold},
			{kind: fakeprovider.TimeoutBeforeCommit, rate: r.TimeoutBeforeCommit, delay: plan.postHold},
			{kind: fakeprovider.Reject, rate: r.Reject},
			{kind: fakeprovider.ErrorAfterCommit, rate: r.ErrorAfterCommit},
			{kind: fakeprovider.DropConnectionAfterCommit, rate: r.DropConnectionAfterCommit},
			{kind: fakeprovider.Slow, rate: r.Slow, delay: f.cfg.SlowDelay},
			{kind: fakeprovider.Error, rate: r.Error},
		}
		if !a.idempotent { // /payments deduplicates: the slow-lease faults are for the others
			post = append(post,
				rule{kind: fakeprovider.Slow, rate: r.SlowLease15, label: FaultSlowLease15, delay: plan.slow15},
				rule{kind: fakeprovider.Slow, rate: r.SlowLease3, label: FaultSlowLease3, delay: plan.slow3})
		}
		get := []rule{
			{kind: fakeprovider.Error, rate: r.SearchError},
			{kind: fakeprovider.Timeout, rate: r.SearchTimeout, delay: f.cfg.HoldDelay},
		}
		used := 0.0
		for _, k := range post {
			add(http.MethodPost, a.path, k, used)
			used += k.rate
		}
		used = 0
		for _, k := range get {
			add(http.MethodGet, a.path, k, used)
			used += k.rate
		}
	}
	return out, labels
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
	rules, labels := f.rulesLocked()
	for i, r := range rules {
		st, err := f.control.AddFault(ctx, r)
		if err != nil {
			return fmt.Errorf("arm fault %s %s %s: %w", r.Method, r.Path, r.Kind, err)
		}
		if labels[i] != "" {
			if f.labels == nil {
				f.labels = map[string]string{}
			}
			f.labels[st.ID] = labels[i]
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

// addLocked adds the fired counts of l's rules to m, by "METHOD kind"; the
// slow-lease rules count as FaultSlowLease15 and FaultSlowLease3, a search
// outage's rule as FaultOutage.
func (f *faultSet) addLocked(m map[string]int, l fakeprovider.FaultList) {
	for _, r := range l.Faults {
		if r.Fired == 0 {
			continue
		}
		name := r.Method + " " + string(r.Kind)
		if label := f.labels[r.ID]; label != "" {
			name = label
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
