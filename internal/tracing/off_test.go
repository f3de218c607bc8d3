package tracing

// This file's tests run first (go test runs a package's tests in the
// order of its files' names): they need the process's OpenTelemetry
// globals as a program starts, before any other test installs a provider.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// remote is a context carrying a sampled remote span context, as an
// incoming traceparent would give.
func remote() context.Context {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	return trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
}

// collector is a fake OTLP/HTTP collector: it counts export requests and
// keeps their bodies (protobuf, whose strings are plain bytes).
type collector struct {
	requests atomic.Int64
	body     atomic.Value // string
}

func newCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			c.requests.Add(1)
			prev, _ := c.body.Load().(string)
			c.body.Store(prev + string(b))
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func (c *collector) received() string { s, _ := c.body.Load().(string); return s }

// TestOffByDefault: without configuration Setup installs nothing, no span
// is recorded or exported, and the propagator, the HTTP transport and the
// gRPC connection add no trace context to anything.
func TestOffByDefault(t *testing.T) {
	if Enabled() {
		t.Fatal("Enabled before anything was set up")
	}
	col, url := newCollector(t)
	for _, env := range []map[string]string{
		{},
		{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": url},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": url},
	} {
		shutdown, err := setup(context.Background(), "opjournal-test", func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%v: %v", env, err)
		}
		if Enabled() {
			t.Fatalf("%v: Setup turned tracing on", env)
		}
		ctx, span := Start(remote(), "probe")
		if span.IsRecording() {
			t.Errorf("%v: a span records", env)
		}
		span.End()
		carrier := propagation.MapCarrier{}
		otel.GetTextMapPropagator().Inject(ctx, carrier)
		if len(carrier) != 0 {
			t.Errorf("%v: the propagator injected %v", env, carrier)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Errorf("%v: shutdown: %v", env, err)
		}
	}
	if n := col.requests.Load(); n != 0 {
		t.Errorf("%d exports while tracing is off", n)
	}

	// The HTTP transport passes the request on as it is.
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(remote(), http.MethodGet, srv.URL, nil)
	res, err := (&http.Client{Transport: Transport(nil)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got.Get("Traceparent") != "" {
		t.Errorf("the transport sent traceparent %q while tracing is off", got.Get("Traceparent"))
	}

	// So does the gRPC connection.
	var md metadata.MD
	cc := WrapConn(invoker(func(ctx context.Context) { md, _ = metadata.FromOutgoingContext(ctx) }))
	if err := cc.Invoke(remote(), "/opjournal.v1.JournalService/Lookup", nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(md.Get("traceparent")) != 0 {
		t.Errorf("the connection sent traceparent %v while tracing is off", md.Get("traceparent"))
	}
	if strings.Contains(col.received(), "probe") {
		t.Error("a span was exported")
	}
}

// invoker is a grpc.ClientConnInterface that only calls f.
type invoker func(ctx context.Context)

func (f invoker) Invoke(ctx context.Context, _ string, _, _ any, _ ...grpc.CallOption) error {
	f(ctx)
	return nil
}

func (f invoker) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, nil
}
