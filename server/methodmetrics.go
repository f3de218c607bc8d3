package server

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// methodMetrics are one gRPC method's series and facts, found with one
// look-up of its full method name in a map made with the server, instead
// of the metric vectors' label checks, hashing and locking (twice) and the
// audit's string and map work on every call. The series are bound on the
// method's first call, so /metrics shows only methods that were called,
// as before.
type methodMetrics struct {
	full string
	// name is the method without the service ("Register").
	name string
	// audited: a successful call may change an operation and is logged
	// with its principal (audit).
	audited bool
	bound   atomic.Pointer[methodSeries]
	m       *metrics
}

// methodSeries are a method's series: ok counts its successful calls
// (errors are rarer and take the vector's look-up), latency observes
// every call's handling time.
type methodSeries struct {
	ok      prometheus.Counter
	latency prometheus.Observer
}

// series returns the method's series, binding them on first use (two
// calls racing bind the same series twice, harmlessly).
func (mm *methodMetrics) series() *methodSeries {
	if b := mm.bound.Load(); b != nil {
		return b
	}
	b := &methodSeries{ok: mm.m.rpcs.WithLabelValues(mm.full, "OK"), latency: mm.m.latency.WithLabelValues(mm.full)}
	mm.bound.Store(b)
	return b
}

// bindMethods makes the entries of every JournalService method.
func (m *metrics) bindMethods() map[string]*methodMetrics {
	out := make(map[string]*methodMetrics, len(pb.JournalService_ServiceDesc.Methods))
	for _, md := range pb.JournalService_ServiceDesc.Methods {
		full := servicePrefix + md.MethodName
		out[full] = &methodMetrics{full: full, name: md.MethodName, audited: mutations[md.MethodName], m: m}
	}
	return out
}

// methodOf returns the entry of fullMethod, or for a method outside
// JournalService (health checks, reflection) one made now.
func (s *Server) methodOf(fullMethod string) *methodMetrics {
	if mm, ok := s.methods[fullMethod]; ok {
		return mm
	}
	return &methodMetrics{full: fullMethod, name: strings.TrimPrefix(fullMethod, servicePrefix), m: s.metrics}
}

// outcomeKey names one series of opjournal_operations_total.
type outcomeKey struct{ action, outcome string }

// outcomes caches the opjournal_operations_total series by action and
// outcome, bound on first use (so only outcomes that happened show).
type outcomes struct{ by sync.Map } // outcomeKey → prometheus.Counter

func (m *metrics) outcomeCounter(action, outcome string) prometheus.Counter {
	k := outcomeKey{action, outcome}
	if c, ok := m.outcomes.by.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.outcomes.by.LoadOrStore(k, m.operations.WithLabelValues(action, outcome))
	return c.(prometheus.Counter)
}
