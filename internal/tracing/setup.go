package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Setup configures tracing from the standard OpenTelemetry environment
// variables and returns the function that flushes and stops it (call it
// on the way out, with a bounded context). Without configuration it
// changes nothing and returns a no-op: tracing stays off.
//
// Tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset
// and OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is; OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true keep it off.
// Then spans go to an OTLP exporter over HTTP/protobuf, or gRPC with
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (or OTEL_EXPORTER_OTLP_PROTOCOL)
// =grpc, configured by the exporters' own OTEL_EXPORTER_OTLP_* variables
// (endpoint, headers, TLS, timeout); through a batch span processor
// (OTEL_BSP_*); sampled per OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (default: parentbased_always_on); with the
// resource's service.name serviceName unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) says otherwise; and W3C trace context and
// baggage propagated (OTEL_PROPAGATORS may name tracecontext, baggage or
// none).
//
// It returns an error for a configuration it cannot honour (an exporter
// or protocol it does not know), having installed nothing.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	return setup(ctx, serviceName, os.Getenv)
}

func setup(ctx context.Context, serviceName string, getenv func(string) string) (func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	on, err := configured(getenv)
	if err != nil || !on {
		return none, err
	}
	prop, err := propagators(getenv("OTEL_PROPAGATORS"))
	if err != nil {
		return none, err
	}
	var exp sdktrace.SpanExporter
	switch p := protocol(getenv); p {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return none, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL %q is not supported (grpc or http/protobuf)", p)
	}
	if err != nil {
		return none, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return none, fmt.Errorf("tracing: resource: %w", err)
	}
	// The sampler is the SDK's from OTEL_TRACES_SAMPLER (not overridden
	// here), the batch processor's limits from OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		slog.Warn("tracing: export failed", "err", err)
	}))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(prop)
	return tp.Shutdown, nil
}

// configured reports whether the environment asks for traces.
func configured(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	exporters := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if exporters == "" {
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	}
	on := false
	for _, e := range strings.Split(exporters, ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case "none":
			return false, nil
		case "otlp":
			on = true
		case "":
		default:
			return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q is not supported (otlp or none)", e)
		}
	}
	return on, nil
}

// protocol is the OTLP protocol asked for: the traces' own, else the
// general one, else the specification's default, http/protobuf.
func protocol(getenv func(string) string) string {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.ToLower(strings.TrimSpace(getenv(k))); v != "" {
			return v
		}
	}
	return "http/protobuf"
}

// propagators builds OTEL_PROPAGATORS (default tracecontext,baggage).
func propagators(spec string) (propagation.TextMapPropagator, error) {
	if strings.TrimSpace(spec) == "" {
		spec = "tracecontext,baggage"
	}
	var ps []propagation.TextMapPropagator
	for _, p := range strings.Split(spec, ",") {
		switch p = strings.ToLower(strings.TrimSpace(p)); p {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
			return propagation.NewCompositeTextMapPropagator(), nil
		case "":
		default:
			return nil, errors.New("tracing: OTEL_PROPAGATORS " + p + " is not supported (tracecontext, baggage or none)")
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}

// shutdownTimeout bounds the flush of the spans still queued on the way out.
const shutdownTimeout = 5 * time.Second

// SetupMain is Setup for a binary's main: stop flushes and stops tracing,
// waiting at most shutdownTimeout, so that an unreachable collector never
// holds up an exit.
func SetupMain(ctx context.Context, serviceName string) (stop func(), err error) {
	shutdown, err := Setup(ctx, serviceName)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
}
