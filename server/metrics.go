package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/opjournal/opjournal/journal"
)

// metrics are the service's Prometheus series, on their own registry so
// tests and several servers in one process do not collide.
type metrics struct {
	registry   *prometheus.Registry
	operations *prometheus.CounterVec
	rpcs       *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	approvals  *approvalMetrics // set by New (the series read the store)
	budgets    *budgetMetrics   // set by New
	outcomes   outcomes
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_operations_total",
			Help: "Journal outcomes by action: registered, replayed, conflict, claim_won, claim_lost, stale_attempt, succeeded, duplicate_effect, unknown, failed_final.",
		}, []string{"action", "outcome"}),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_rpc_requests_total",
			Help: "RPCs handled, by method and opjournal error code (OK for success).",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "opjournal_rpc_duration_seconds",
			Help:    "RPC handling time, by method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method"}),
	}
	m.registry.MustRegister(m.operations, m.rpcs, m.latency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// batchCollector exports the store's group-commit figures (store/postgres,
// batch.go): statements run and calls carried per kind, whose ratio is
// the mean batch size, and the calls waiting now.
type batchCollector struct {
	stats                      func() []journal.BatchStat
	statements, calls, waiting *prometheus.Desc
}

func newBatchCollector(stats func() []journal.BatchStat) *batchCollector {
	return &batchCollector{
		stats: stats,
		statements: prometheus.NewDesc("opjournal_store_batch_statements_total",
			"Statements the store ran for calls it groups (PostgreSQL: register, claim, mark_succeeded; SQLite: write, counting transactions), one-call ones included.", []string{"kind"}, nil),
		calls: prometheus.NewDesc("opjournal_store_batch_calls_total",
			"Calls those statements carried; divided by the statements, the mean batch size.", []string{"kind"}, nil),
		waiting: prometheus.NewDesc("opjournal_store_batch_waiting",
			"Calls waiting for the next statement of their kind.", []string{"kind"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *batchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.statements
	ch <- c.calls
	ch <- c.waiting
}

// Collect implements prometheus.Collector.
func (c *batchCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.stats() {
		ch <- prometheus.MustNewConstMetric(c.statements, prometheus.CounterValue, float64(b.Statements), b.Kind)
		ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(b.Calls), b.Kind)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(b.Waiting), b.Kind)
	}
}

func (m *metrics) outcome(action, outcome string) {
	m.outcomeCounter(action, outcome).Inc()
}
