package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opjournal/opjournal/journal"
)

// PurgeConfig makes the server purge expired operations on an interval
// (journal.Purge): terminal, not under review, older than their action's
// retention. With several servers on one PostgreSQL database, one purges
// at a time (the store's lock); the others skip their turn.
type PurgeConfig struct {
	// Interval between passes; 0 turns purging off.
	Interval time.Duration
	// BatchSize is the operations per statement (0: journal.DefaultPurgeBatch).
	BatchSize int
	// Pause is waited between batches.
	Pause time.Duration
}

// purgeMetrics are the retention series.
type purgeMetrics struct {
	operations, events *prometheus.CounterVec
	passes             *prometheus.CounterVec
	oldest             *prometheus.GaugeVec
}

func newPurgeMetrics(r *prometheus.Registry) *purgeMetrics {
	m := &purgeMetrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_purged_operations_total",
			Help: "Terminal operations deleted after their action's retention, by action.",
		}, []string{"action"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_purged_events_total",
			Help: "History entries deleted with them, by action.",
		}, []string{"action"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_purge_passes_total",
			Help: "Purge passes by result: done, skipped (another server was purging), failed.",
		}, []string{"result"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "opjournal_oldest_terminal_age_seconds",
			Help: "Age of the least recently changed terminal operation, by action (0 if none): near the retention when purging keeps up.",
		}, []string{"action"}),
	}
	r.MustRegister(m.operations, m.events, m.passes, m.oldest)
	return m
}

// purgeLoop runs a purge pass every Interval until ctx is done. The first
// pass runs one interval after start, so that a restart loop does not
// purge in a loop.
func (s *Server) purgeLoop(ctx context.Context) {
	s.recordOldestTerminal(ctx)
	every(ctx, s.cfg.Purge.Interval, s.purgePass)
}

// every calls fn every interval, the first time one interval from now,
// until ctx is done: the server's background passes (purge, approval
// timeouts).
func every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn(ctx)
	}
}

// purgePass runs one pass and records it.
func (s *Server) purgePass(ctx context.Context) {
	cfg, m := s.cfg.Purge, s.purgeMetrics
	start := time.Now()
	reports, err := s.svc.Purge(ctx, journal.PurgeOptions{BatchSize: cfg.BatchSize, Pause: cfg.Pause})
	for _, r := range reports {
		m.operations.WithLabelValues(r.Action).Add(float64(r.Operations))
		m.events.WithLabelValues(r.Action).Add(float64(r.Events))
		if r.Operations > 0 {
			s.log.Info("purged", "action", r.Action, "operations", r.Operations, "events", r.Events,
				"retention", r.Retention.String(), "batches", r.Batches, "took", time.Since(start).Round(time.Millisecond).String())
		}
	}
	result := "done"
	defer func() {
		s.purgeHistory.add(journal.PurgePass{At: start, Took: time.Since(start).Round(time.Millisecond), Result: result, Reports: reports})
	}()
	switch {
	case errors.Is(err, journal.ErrPurgeBusy):
		result = "skipped"
		m.passes.WithLabelValues("skipped").Inc()
		s.log.Debug("purge skipped: another server is purging")
	case err != nil && ctx.Err() == nil:
		result = "failed"
		m.passes.WithLabelValues("failed").Inc()
		s.log.Error("purge failed", "err", err)
	case err == nil:
		m.passes.WithLabelValues("done").Inc()
	}
	s.recordOldestTerminal(ctx)
}

// recordOldestTerminal sets the oldest-terminal-age gauges.
func (s *Server) recordOldestTerminal(ctx context.Context) {
	ages, err := s.svc.OldestTerminal(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Error("reading the oldest terminal operation failed", "err", err)
	}
	for _, a := range ages {
		s.purgeMetrics.oldest.WithLabelValues(a.Action).Set(a.Age.Seconds())
	}
}

// purgeHistoryLen is how many passes the console shows.
const purgeHistoryLen = 20

// purgeHistory keeps this server's latest purge passes, newest first.
type purgeHistory struct {
	mu     sync.Mutex
	passes []journal.PurgePass
}

func (h *purgeHistory) add(p journal.PurgePass) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.passes = append([]journal.PurgePass{p}, h.passes...)
	if len(h.passes) > purgeHistoryLen {
		h.passes = h.passes[:purgeHistoryLen]
	}
}

func (h *purgeHistory) list() []journal.PurgePass {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]journal.PurgePass(nil), h.passes...)
}
