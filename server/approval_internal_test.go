package server

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
)

// TestConsoleDecisionsAreCounted: a decision taken in the console (the
// console's Audit hook) lands in the same approval decision series as one
// taken over the API, by outcome; other decisions count nothing there.
func TestConsoleDecisionsAreCounted(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics()}
	s.metrics.approvals = newApprovalMetrics(s.metrics.registry, func(context.Context) ([]journal.ApprovalCount, error) { return nil, nil })
	c := journal.Caller{Tenant: "t", Principal: "alice"}
	for _, d := range []struct {
		method string
		status opjournal.Status
	}{
		{"Approve", opjournal.StatusAwaitingApproval}, // the first of two
		{"Approve", opjournal.StatusPending},
		{"Reject", opjournal.StatusFailedFinal},
		{"Resolve", opjournal.StatusSucceeded},
	} {
		s.auditDecision(context.Background(), d.method, c, &opjournal.Operation{Key: "k", Action: "pay", Status: d.status})
	}
	for outcome, want := range map[string]float64{"approved": 1, "released": 1, "rejected": 1, "timed_out": 0} {
		if got := testutil.ToFloat64(s.metrics.approvals.decisions.WithLabelValues("pay", outcome)); got != want {
			t.Errorf("decisions{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}
