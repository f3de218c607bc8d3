// Package tracing is opjournal's OpenTelemetry tracing: the set-up every
// binary calls (Setup, from the standard OTEL_* environment variables) and
// the small helpers the server, the stores, the SDK, the reconciler and
// the gateway use to make their spans and carry W3C trace context.
//
// Tracing is off unless configured: Setup installs nothing, the global
// TracerProvider and propagator stay OpenTelemetry's no-op defaults, and
// every helper checks Enabled first and does nothing else (no span, no
// context value, no header). Enabled is true as soon as a real
// TracerProvider is installed globally, by Setup or by the program
// embedding the SDK (otel.SetTracerProvider), so the Go SDK traces inside
// an application that configured OpenTelemetry itself.
//
// Spans never carry payloads, results, error messages, header values,
// URLs with their query, tokens or secrets: only names (method, action
// type, status, codes) and the operation key, an identifier the
// orchestrator chose that the audit log records already.
package tracing

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of opjournal's spans.
const Name = "github.com/opjournal/opjournal"

// Attribute keys of opjournal's own (the others are OpenTelemetry's
// semantic conventions: rpc.*, db.*, http.*, server.*).
const (
	KeyOperationKey = attribute.Key("opjournal.operation.key")
	KeyActionType   = attribute.Key("opjournal.action_type")
	KeyStatus       = attribute.Key("opjournal.status")
	KeyErrorCode    = attribute.Key("opjournal.error_code")
	KeyTransport    = attribute.Key("opjournal.transport")
	KeyBatchSize    = attribute.Key("opjournal.batch.size")
	KeyRule         = attribute.Key("opjournal.rule")
	KeyLink         = attribute.Key("opjournal.link")
	KeyAttempt      = attribute.Key("opjournal.attempt")
	KeyOutcome      = attribute.Key("opjournal.outcome")
)

// initial is the global TracerProvider before anything is installed:
// OpenTelemetry's delegating no-op.
var initial = otel.GetTracerProvider()

// Enabled reports whether spans are recorded: a TracerProvider other than
// the default (or an explicit no-op) is installed globally. It costs an
// atomic load; the hot paths call it before doing anything for tracing.
func Enabled() bool {
	tp := otel.GetTracerProvider()
	if tp == initial {
		return false
	}
	_, isNoop := tp.(noop.TracerProvider)
	return !isNoop
}

type cachedTracer struct {
	tp trace.TracerProvider
	t  trace.Tracer
}

var tracerCache atomic.Pointer[cachedTracer]

// Tracer returns opjournal's tracer from the global TracerProvider.
func Tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if c := tracerCache.Load(); c != nil && c.tp == tp {
		return c.t
	}
	c := &cachedTracer{tp: tp, t: tp.Tracer(Name)}
	tracerCache.Store(c)
	return c.t
}

// Start starts a span with opjournal's tracer.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, opts...)
}

// Fail marks span as failed with code (a short, fixed word such as an
// opjournal error code or "http_503", never an error's message).
func Fail(span trace.Span, code string) {
	span.SetStatus(codes.Error, code)
	if code != "" {
		span.SetAttributes(KeyErrorCode.String(code))
	}
}
