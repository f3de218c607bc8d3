package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/tracing"
)

// queryTracer gives each statement the store sends a span (pgx's
// QueryTracer), "postgresql get" or "postgresql SELECT", a child of the
// calling RPC's span. A batched statement has the batch's span instead
// (tracing.StartBatch, in execBounded): its parent is one of the calls
// and it links to the others. While tracing is off it does nothing.
type queryTracer struct{}

type querySpanKey struct{}

func (queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !tracing.Enabled() || tracing.InBatch(ctx) {
		return ctx
	}
	verb := sqlVerb(data.SQL)
	what := tracing.StatementName(ctx)
	if what == "" {
		what = verb
	}
	ctx, span := tracing.StartBatch(ctx, "postgresql", what, nil)
	if rule := tracing.StatementRule(ctx); rule != "" {
		span.SetAttributes(tracing.KeyRule.String(rule))
	}
	return context.WithValue(ctx, querySpanKey{}, span)
}

func (queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ctx.Value(querySpanKey{}).(trace.Span)
	if !ok {
		return
	}
	code := ""
	if data.Err != nil {
		code = string(opjournal.ErrorCode(classify("statement", data.Err)))
	}
	tracing.EndStore(span, data.Err, code)
}

// sqlVerb is a statement's first word (SELECT, WITH, INSERT, BEGIN).
func sqlVerb(sql string) string {
	sql = strings.TrimSpace(sql)
	if i := strings.IndexAny(sql, " \t\n("); i > 0 {
		sql = sql[:i]
	}
	return strings.ToUpper(sql)
}
