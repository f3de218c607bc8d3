package webhook

import "github.com/prometheus/client_golang/prometheus"

var (
	deliveriesDesc = prometheus.NewDesc("opjournal_webhook_deliveries_total",
		"Approval notifications by outcome: delivered (2xx), retried (a failed attempt that is tried again), failed (410 Gone or no attempt left), dropped (the queue was full; the rescan sends it later).",
		[]string{"outcome"}, nil)
	queueDesc = prometheus.NewDesc("opjournal_webhook_queue_length",
		"Approval notifications in memory: queued or waiting for their next attempt.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *Sender) Describe(ch chan<- *prometheus.Desc) {
	ch <- deliveriesDesc
	ch <- queueDesc
}

// Collect implements prometheus.Collector: every outcome (0 included, so
// that a rate is defined from the start) and the queue's length.
func (s *Sender) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	for _, o := range []Outcome{OutcomeDelivered, OutcomeRetried, OutcomeFailed, OutcomeDropped} {
		ch <- prometheus.MustNewConstMetric(deliveriesDesc, prometheus.CounterValue, float64(st.Deliveries[o]), string(o))
	}
	ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(st.Held))
}
