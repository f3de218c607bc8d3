package linearize

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/model"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/store"
)

// ClockedPolicy is the policy of runs on the test's clock: short leases,
// windows and caps that a run's clock moves pass many times over. One
// action reconciles before a retry and may be released (definitive
// absence after 2 s + 3 s); the other retries with the same key within
// the provider's 20 s dedup window and is never released.
const ClockedPolicy = `
actions:
  pay_reconcile:
    operation_key: required
    lease_seconds: 5
    max_attempt_seconds: 12
    retry:
      reuse_operation_key: true
      on_timeout: reconcile_before_retry
    unknown_after_seconds: 60
    reconcile:
      visibility_lag: 2s
      in_flight_window: 3s
      definitive_absence: true
  pay_retry:
    operation_key: required
    lease_seconds: 5
    max_attempt_seconds: 12
    retry:
      reuse_operation_key: true
      on_timeout: retry_same_key
      provider_dedup_window: 20s
    unknown_after_seconds: 60
  pay_approve:
    lease_seconds: 5
    approval: {required: true, timeout: 8s, on_timeout: reject}
  pay_approve2:
    lease_seconds: 5
    approval: {required: true, two_person: true, timeout: 8s, on_timeout: escalate}
`

// RealTimePolicy is the policy of runs on the journal's own clock (real
// processes): leases, caps and windows so long that none ends within a
// run, so the model's time can stay still.
const RealTimePolicy = `
actions:
  pay_reconcile:
    operation_key: required
    lease_seconds: 3600
    max_attempt_seconds: 7200
    retry:
      reuse_operation_key: true
      on_timeout: reconcile_before_retry
    unknown_after_seconds: 7200
    reconcile:
      visibility_lag: 1h
      in_flight_window: 1h
      definitive_absence: true
  pay_retry:
    operation_key: required
    lease_seconds: 3600
    max_attempt_seconds: 7200
    retry:
      reuse_operation_key: true
      on_timeout: retry_same_key
    unknown_after_seconds: 7200
`

// ModelOf reads the model's view of every action of a policy.
func ModelOf(pol *policy.Policy) *model.Model {
	m := &model.Model{Actions: map[string]model.Action{}}
	for _, name := range pol.Names() {
		a, _ := pol.Action(name)
		m.Actions[name] = model.Action{
			Name: name, LeaseMS: int64(a.LeaseSeconds) * 1000, MaxAttemptMS: a.MaxAttempt.Milliseconds(),
			RetrySameKey: a.AllowsRetryAfterUnknown(), ProviderWindowMS: a.ProviderDedupWindow.Milliseconds(),
			DefinitiveAbsence: a.Reconcile.DefinitiveAbsence, ReleaseAfterMS: a.ReleaseAfter().Milliseconds(),
		}
		if ap := a.Approval; ap != nil {
			if !ap.Required || ap.DistinctFor(false) {
				panic("linearize: the model knows approvals required of everyone, without distinct_from_requester")
			}
			act := m.Actions[name]
			act.Approval, act.TwoPerson, act.Escalates, act.TimeoutMS = true, ap.TwoPerson, ap.OnTimeout == "escalate", ap.Timeout.Milliseconds()
			m.Actions[name] = act
		}
	}
	return m
}

// Keys returns n keys per action of m, named by run and action.
func Keys(m *model.Model, run string, n int) []Key {
	var ks []Key
	for _, name := range []string{"pay_reconcile", "pay_retry", "pay_approve", "pay_approve2"} {
		if _, ok := m.Actions[name]; !ok {
			continue
		}
		for i := range n {
			ks = append(ks, Key{Key: fmt.Sprintf("%s-%s-%d", run, name, i), Action: name})
		}
	}
	return ks
}

// Serve runs the real journal server (the code of `opjournal serve`) on st
// in this process, on free loopback ports, until ctx ends; stop waits for
// it to end.
func Serve(ctx context.Context, st store.Store, pol *policy.Policy) (e Endpoint, stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	svc := journal.New(st, pol, journal.Limits{})
	srv := server.New(svc, server.Config{
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(a server.Addrs) { ready <- a }) }()
	select {
	case a := <-ready:
		expire := func(ctx context.Context, key string) (*opjournal.Operation, error) {
			return svc.ExpireApproval(ctx, "", key)
		}
		return Endpoint{GRPCAddr: a.GRPC.String(), HTTPURL: "http://" + a.HTTP.String(), Expire: expire}, func() { cancel(); <-done }, nil
	case err := <-done:
		cancel()
		return Endpoint{}, nil, err
	case <-time.After(30 * time.Second):
		cancel()
		return Endpoint{}, nil, fmt.Errorf("linearize: the journal is not listening after 30 s")
	}
}
