package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestBatchSpan: a batch's span is a child of its first traced call and
// links to the others, which link back; untraced calls are counted.
func TestBatchSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	var calls []context.Context
	var spans []trace.Span
	calls = append(calls, context.Background()) // a call without a span
	for _, name := range []string{"a", "b", "c"} {
		ctx, s := Start(context.Background(), "Register "+name)
		calls, spans = append(calls, ctx), append(spans, s)
	}
	_, batch := StartBatch(context.Background(), "postgresql", "register", calls)
	EndStore(batch, nil, "")
	for _, s := range spans {
		s.End()
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	b := byName["postgresql register"]
	if b.Parent.SpanID() != spans[0].SpanContext().SpanID() {
		t.Errorf("the batch's parent is %s, want the first traced call's", b.Parent.SpanID())
	}
	if len(b.Links) != 2 || b.Links[0].SpanContext.SpanID() != spans[1].SpanContext().SpanID() || b.Links[1].SpanContext.SpanID() != spans[2].SpanContext().SpanID() {
		t.Errorf("the batch links to %v, want the other two calls", b.Links)
	}
	for _, n := range []string{"Register b", "Register c"} {
		s := byName[n]
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != b.SpanContext.SpanID() {
			t.Errorf("%s links to %v, want the batch", n, s.Links)
		}
	}
	if len(byName["Register a"].Links) != 0 {
		t.Error("the parent call links to the batch too")
	}
	for _, kv := range b.Attributes {
		if kv.Key == KeyBatchSize && kv.Value.AsInt64() != 4 {
			t.Errorf("batch size %d, want 4", kv.Value.AsInt64())
		}
	}
}
