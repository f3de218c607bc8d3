package tracing

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

func TestConfigured(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		on   bool
		fail bool
	}{
		{env: map[string]string{}, on: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: false},
		{env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, on: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, fail: true},
	} {
		on, err := configured(func(k string) string { return c.env[k] })
		if on != c.on || (err != nil) != c.fail {
			t.Errorf("%v: on %v err %v; want on %v, failure %v", c.env, on, err, c.on, c.fail)
		}
	}
	if _, err := setup(context.Background(), "x", func(k string) string {
		return map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}[k]
	}); err == nil || Enabled() {
		t.Errorf("an unsupported protocol: err %v, enabled %v", err, Enabled())
	}
	if _, err := propagators("b3"); err == nil {
		t.Error("OTEL_PROPAGATORS=b3 accepted")
	}
}

// TestSetupExportsOTLPHTTP: OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on,
// spans reach the collector over OTLP/HTTP on shutdown, OTEL_SERVICE_NAME
// names the service, and the W3C propagator is installed.
func TestSetupExportsOTLPHTTP(t *testing.T) {
	col, url := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_SERVICE_NAME", "journal-from-env")
	shutdown, err := Setup(context.Background(), "opjournal-test")
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() {
		t.Fatal("not enabled")
	}
	ctx, span := Start(context.Background(), "probe-http")
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if !strings.HasPrefix(carrier["traceparent"], "00-"+span.SpanContext().TraceID().String()) {
		t.Errorf("traceparent %q", carrier["traceparent"])
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	body := col.received()
	if col.requests.Load() == 0 || !strings.Contains(body, "probe-http") || !strings.Contains(body, "journal-from-env") {
		t.Errorf("%d exports; the span or OTEL_SERVICE_NAME is missing", col.requests.Load())
	}
}

// fakeGRPC is an OTLP/gRPC collector that keeps the span names.
type fakeGRPC struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
	svc   []string
}

func (f *fakeGRPC) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				f.svc = append(f.svc, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				f.names = append(f.names, s.GetName())
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// TestSetupExportsOTLPGRPC: OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over
// gRPC; the service name is Setup's; OTEL_TRACES_SAMPLER is obeyed.
func TestSetupExportsOTLPGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeGRPC{}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, fake)
	go gs.Serve(lis)
	defer gs.Stop()
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_SERVICE_NAME", "")
	shutdown, err := Setup(context.Background(), "opjournal-test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := Start(context.Background(), "probe-grpc")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	names, svc := fake.names, fake.svc
	fake.mu.Unlock()
	if len(names) != 1 || names[0] != "probe-grpc" || len(svc) == 0 || svc[0] != "opjournal-test" {
		t.Errorf("exported %v from %v; want [probe-grpc] from opjournal-test", names, svc)
	}

	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	shutdown, err = Setup(context.Background(), "opjournal-test")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	if _, span := Start(context.Background(), "unsampled"); span.IsRecording() {
		t.Error("OTEL_TRACES_SAMPLER=always_off: the span records")
	}
}
