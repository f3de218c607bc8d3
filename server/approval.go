package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The approvals' timeout sweep and series. A sweep applies the timeout of
// every approval whose deadline has passed on the database clock
// (journal.ExpireApprovals); several servers may sweep at once, since the
// protocol table decides each operation once and refuses the others
// (nothing to lock).

// approvalMetrics are the approvals' series.
type approvalMetrics struct {
	decisions *prometheus.CounterVec
}

func newApprovalMetrics(r *prometheus.Registry, counts func(context.Context) ([]journal.ApprovalCount, error)) *approvalMetrics {
	m := &approvalMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_approval_decisions_total",
			Help: "Decisions on operations awaiting approval, by action and outcome: approved (the first of two), released (pending), rejected, timed_out (the deadline passed: rejected or escalated).",
		}, []string{"action", "outcome"}),
	}
	r.MustRegister(m.decisions, &approvalCollector{counts: counts,
		awaiting: prometheus.NewDesc("opjournal_approvals_awaiting", "Operations awaiting approval, by action (every tenant).", []string{"action"}, nil),
		oldest: prometheus.NewDesc("opjournal_approval_oldest_age_seconds",
			"How long the oldest operation awaiting approval has waited since its registration (database clock), by action.", []string{"action"}, nil),
	})
	return m
}

// decisionOutcome is the outcome label of a decision by method (Approve
// or Reject) that left the operation in status: approved (the first of
// two, still awaiting), released (pending) or rejected; "" for any other
// method, which counts nothing.
func decisionOutcome(method string, status opjournal.Status) string {
	switch {
	case method == "Reject":
		return "rejected"
	case method != "Approve":
		return ""
	case status == opjournal.StatusAwaitingApproval:
		return "approved"
	}
	return "released"
}

// decision counts one decision.
func (m *metrics) decision(action, outcome string) {
	if m.approvals != nil {
		m.approvals.decisions.WithLabelValues(action, outcome).Inc()
	}
}

// approvalCollector reads the awaiting approvals at each scrape: one
// grouped query over the rows awaiting approval (a partial index holds
// only them).
type approvalCollector struct {
	counts           func(context.Context) ([]journal.ApprovalCount, error)
	awaiting, oldest *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *approvalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.awaiting
	ch <- c.oldest
}

// Collect implements prometheus.Collector. A scrape that cannot read the
// store reports nothing for these series rather than failing.
func (c *approvalCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.counts(ctx)
	if err != nil {
		return
	}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.awaiting, prometheus.GaugeValue, float64(r.Count), r.Action)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, r.OldestAge.Seconds(), r.Action)
	}
}

// approvalSweep runs one sweep and counts what it did.
func (s *Server) approvalSweep(ctx context.Context) {
	res, err := s.svc.ExpireApprovals(ctx)
	for action, n := range res.TimedOut {
		s.metrics.approvals.decisions.WithLabelValues(action, "timed_out").Add(float64(n))
	}
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "approval timeout sweep failed", "err", err)
	}
}

func (s *journalServer) Approve(ctx context.Context, req *pb.ApproveRequest) (*pb.ApproveResponse, error) {
	res, err := s.svc.Approve(ctx, journal.DecisionRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), RequestHash: req.GetRequestHash(), Reason: req.GetReason(), Actor: req.GetActor(),
	})
	if err != nil {
		return nil, err
	}
	s.metrics.decision(res.Operation.Action, decisionOutcome("Approve", res.Operation.Status))
	pop, err := operationPB(res.Operation)
	return &pb.ApproveResponse{Operation: pop, Released: res.Released}, err
}

func (s *journalServer) Reject(ctx context.Context, req *pb.RejectRequest) (*pb.RejectResponse, error) {
	op, err := s.svc.Reject(ctx, journal.DecisionRequest{
		Caller: callerOf(ctx), Key: req.GetOperationKey(), RequestHash: req.GetRequestHash(), Reason: req.GetReason(),
		ErrorCode: req.GetErrorCode(), Actor: req.GetActor(),
	})
	if err != nil {
		return nil, err
	}
	s.metrics.decision(op.Action, decisionOutcome("Reject", op.Status))
	pop, err := operationPB(op)
	return &pb.RejectResponse{Operation: pop}, err
}
