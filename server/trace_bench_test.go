package server

import (
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkInterceptorTraced is BenchmarkInterceptor with tracing on (an
// SDK TracerProvider sampling everything, exporting nowhere): the cost of
// the server span. It installs the provider for the rest of the process,
// so run it on its own:
//
//	go test -run '^$' -bench InterceptorTraced ./server/
func BenchmarkInterceptorTraced(b *testing.B) {
	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	benchInterceptor(b)
}
