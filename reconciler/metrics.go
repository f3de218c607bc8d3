package reconciler

import "github.com/prometheus/client_golang/prometheus"

// metrics are the reconciler's Prometheus counters.
type metrics struct {
	decisions      *prometheus.CounterVec
	passes         prometheus.Counter
	verifierErrors *prometheus.CounterVec
	// policyMismatch is 1 while the journal enforces another policy than
	// the reconciler's (GetPolicy), 0 when they agree.
	policyMismatch prometheus.Gauge
}

// newMetrics creates the counters and registers them with reg, if not nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_reconciler_decisions_total",
			Help: "Operations handled by the reconciler, by action and decision (succeeded, released, rechecked, escalated, skipped, deferred, error).",
		}, []string{"action", "decision"}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opjournal_reconciler_passes_total",
			Help: "Passes over the operations due for a check.",
		}),
		verifierErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_reconciler_verifier_errors_total",
			Help: "Provider checks whose answer was unclear (errors, timeouts, unreadable answers), by action.",
		}, []string{"action"}),
		policyMismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opjournal_reconciler_policy_mismatch",
			Help: "1 while the journal enforces another policy than the reconciler's (the log says how they differ), else 0.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.decisions, m.passes, m.verifierErrors, m.policyMismatch} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
