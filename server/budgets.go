package server

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// budgetPB converts one budget counter for the wire.
func budgetPB(b journal.Budget) *pb.BudgetUsage {
	return &pb.BudgetUsage{
		ActionType: b.Action, Budget: b.Budget, Scope: b.Scope, Limit: b.Limit,
		WindowSeconds: int64(b.Window / time.Second), Used: b.Used, ReservedUnknown: b.ReservedUnknown,
		Operations: b.Operations, OnExceed: b.Policy.OnExceed, Sum: b.Policy.Sum,
	}
}

// heldBudgets adds the counters of the budgets an operation holds to its
// answer (Lookup).
func (s *journalServer) heldBudgets(ctx context.Context, op *opjournal.Operation, out *pb.Operation) error {
	bs, err := s.svc.HeldBudgets(ctx, tenantOf(ctx), op)
	if err != nil {
		return err
	}
	for _, b := range bs {
		for _, h := range out.Budgets {
			if h.Budget == b.Budget && h.Scope == b.Scope && h.Usage == nil {
				h.Usage = budgetPB(b)
				break
			}
		}
	}
	return nil
}

// ListBudgets lists the caller's tenant's budget counters.
func (s *journalServer) ListBudgets(ctx context.Context, req *pb.ListBudgetsRequest) (*pb.ListBudgetsResponse, error) {
	bs, err := s.svc.ListBudgets(ctx, tenantOf(ctx), journal.BudgetFilter{Action: req.GetActionType(), Budget: req.GetBudget()})
	if err != nil {
		return nil, err
	}
	out := &pb.ListBudgetsResponse{}
	for _, b := range bs {
		out.Budgets = append(out.Budgets, budgetPB(b))
	}
	return out, nil
}

// budgetMetrics are the budgets' series.
type budgetMetrics struct {
	exceeded *prometheus.CounterVec
}

func newBudgetMetrics(r *prometheus.Registry, totals func(context.Context) ([]journal.Budget, error)) *budgetMetrics {
	m := &budgetMetrics{
		exceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opjournal_budget_exceeded_total",
			Help: "Registrations that did not fit a budget, by action, budget and what they got: refused (on_exceed reject, BUDGET_EXCEEDED) or approval (on_exceed approval: created awaiting a person).",
		}, []string{"action", "budget", "outcome"}),
	}
	r.MustRegister(m.exceeded, &budgetCollector{totals: totals,
		used: prometheus.NewDesc("opjournal_budget_used",
			"What counts in each budget within its window now (database clock), summed over every tenant and scope, by action and budget.", []string{"action", "budget"}, nil),
		unknown: prometheus.NewDesc("opjournal_budget_reserved_unknown",
			"The part of opjournal_budget_used held by operations whose outcome is not yet known (given back if they fail finally).", []string{"action", "budget"}, nil),
		limit: prometheus.NewDesc("opjournal_budget_limit", "Each budget's limit per scope, by action and budget.", []string{"action", "budget"}, nil),
	})
	return m
}

// budgetCollector reads the budgets' use at scrape time.
type budgetCollector struct {
	totals               func(context.Context) ([]journal.Budget, error)
	used, unknown, limit *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.used
	ch <- c.unknown
	ch <- c.limit
}

// Collect implements prometheus.Collector. A scrape that cannot read the
// store reports nothing for these series rather than failing.
func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.totals(ctx)
	if err != nil {
		return
	}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(r.Used), r.Action, r.Budget)
		ch <- prometheus.MustNewConstMetric(c.unknown, prometheus.GaugeValue, float64(r.ReservedUnknown), r.Action, r.Budget)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(r.Limit), r.Action, r.Budget)
	}
}

// budgetExceeded counts a registration that did not fit a budget: err a
// BUDGET_EXCEEDED refusal, or else op created awaiting approval because
// of budgets.
func (m *metrics) budgetExceeded(action string, err error, op *opjournal.Operation) {
	if m.budgets == nil {
		return
	}
	var e *opjournal.Error
	if errors.As(err, &e) && e.Code == opjournal.CodeBudgetExceeded {
		m.budgets.exceeded.WithLabelValues(action, e.Details["budget"], "refused").Inc()
		return
	}
	if op != nil && op.Approval != nil {
		for _, b := range op.Approval.Budgets {
			m.budgets.exceeded.WithLabelValues(op.Action, b, "approval").Inc()
		}
	}
}
