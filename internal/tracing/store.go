package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Store spans.
//
// A store statement or transaction that carries one call is a child of
// that call's span (the RPC's server span). One that carries a batch of
// calls (PostgreSQL's batched register, claim and mark succeeded; SQLite's
// group commit) is ONE span, "postgresql register" or "sqlite write" with
// opjournal.batch.size, whose parent is the first traced call of the batch
// (the one that waited longest) and which links to every other call's
// span; each of those calls' spans gets the reverse link (attribute
// opjournal.link=store.batch), so every Register RPC's trace leads to the
// statement that wrote it, and the statement's to every call it carried.

type batchKey struct{}

// StartBatch starts the span of a statement or transaction run by system
// ("postgresql", "sqlite") for the calls whose contexts are calls, on ctx
// (the statement's own context, detached from the callers'): see above.
// Call only when Enabled.
func StartBatch(ctx context.Context, system, what string, calls []context.Context) (context.Context, trace.Span) {
	var parent trace.SpanContext
	var links []trace.Link
	var others []trace.Span
	for _, c := range calls {
		sc := trace.SpanContextFromContext(c)
		if !sc.IsValid() {
			continue
		}
		if !parent.IsValid() {
			parent = sc
			continue
		}
		links = append(links, trace.Link{SpanContext: sc})
		if s := trace.SpanFromContext(c); s.IsRecording() {
			others = append(others, s)
		}
	}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	ctx, span := Start(ctx, system+" "+what, trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("db.system.name", system), attribute.String("db.operation.name", what),
			KeyBatchSize.Int(max(1, len(calls)))))
	if len(others) > 0 {
		back := trace.Link{SpanContext: span.SpanContext(), Attributes: []attribute.KeyValue{KeyLink.String("store.batch")}}
		for _, s := range others {
			s.AddLink(back)
		}
	}
	return context.WithValue(ctx, batchKey{}, true), span
}

// InBatch reports whether ctx is a batch's (StartBatch): its statements
// need no span of their own.
func InBatch(ctx context.Context) bool { return ctx.Value(batchKey{}) != nil }

// EndStore ends a store span, failed with code when err is not nil.
func EndStore(span trace.Span, err error, code string) {
	if err != nil {
		Fail(span, code)
	}
	span.End()
}

type stmtKey struct{}

type stmtName struct{ what, rule string }

// WithStatementName names the statements run on ctx (a store's "get",
// "claim") and the protocol rule they apply ("Claim: win"; "" for none),
// for their spans. Call only when Enabled.
func WithStatementName(ctx context.Context, what, rule string) context.Context {
	return context.WithValue(ctx, stmtKey{}, stmtName{what, rule})
}

// StatementName is the name WithStatementName gave ctx, or "".
func StatementName(ctx context.Context) string {
	if n, ok := ctx.Value(stmtKey{}).(stmtName); ok {
		return n.what
	}
	return ""
}

// StatementRule is the rule WithStatementName gave ctx, or "".
func StatementRule(ctx context.Context) string {
	if n, ok := ctx.Value(stmtKey{}).(stmtName); ok {
		return n.rule
	}
	return ""
}
