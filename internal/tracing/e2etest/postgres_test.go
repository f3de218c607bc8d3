package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store/postgres"
)

// TestPostgresBatchTrace: PostgreSQL's batched register statement is one
// span with the batch size, a child of one of the calls it carried and
// linked to the others, which link back; a call that ran alone has a
// statement span of its own.
func TestPostgresBatchTrace(t *testing.T) {
	s, err := postgres.Open(context.Background(), pgtest.NewSchema(t)+"&opjournal_batch_workers=1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	payload := json.RawMessage(`{"amount_minor":4900,"card":"` + secret + `"}`)
	register := func(ctx context.Context, key string) {
		_, err := s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "create_payment", RequestHash: "h", Payload: payload,
			Claim: true, WorkerID: "w", LeaseSeconds: 30})
		if err != nil {
			t.Error(err)
		}
	}

	// Alone: a statement span below the caller's.
	ctx, alone := otel.Tracer("test").Start(context.Background(), "alone")
	register(ctx, "k-alone")
	alone.End()
	spans := spansOf(alone.SpanContext().TraceID())
	st := find(t, spans, "postgresql register", trace.SpanKindClient)
	wantChild(t, st, find(t, spans, "alone", trace.SpanKindInternal))
	wantAttr(t, st, "db.system.name", "postgresql")
	wantAttr(t, st, "opjournal.batch.size", "1")
	wantAttr(t, st, "opjournal.rule", "Register: new, claimed")
	noSecrets(t, spans)

	// Concurrent calls share statements (how many depends on timing: try
	// a few rounds until one batch carries several).
	for round := 0; round < 20; round++ {
		const n = 16
		callers := make([]trace.Span, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			ctx, span := otel.Tracer("test").Start(context.Background(), fmt.Sprintf("call %d.%d", round, i))
			callers[i] = span
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				register(ctx, fmt.Sprintf("k-%d-%d", round, i))
			}()
		}
		close(start)
		wg.Wait()
		bySpan := map[trace.SpanID]tracetest.SpanStub{}
		for _, c := range callers {
			c.End()
		}
		all := exporter.GetSpans()
		for _, sp := range all {
			bySpan[sp.SpanContext.SpanID()] = sp
		}
		for _, c := range callers {
			for _, sp := range spansOf(c.SpanContext().TraceID()) {
				v, _ := attr(sp, "opjournal.batch.size")
				if sp.Name != "postgresql register" || v.AsInt64() < 2 {
					continue
				}
				// A batch: its parent is a caller, its links the others,
				// each of which links back.
				if len(sp.Links) == 0 || int64(len(sp.Links)) != v.AsInt64()-1 {
					t.Fatalf("a batch of %d links to %d calls", v.AsInt64(), len(sp.Links))
				}
				for _, l := range sp.Links {
					other, ok := bySpan[l.SpanContext.SpanID()]
					if !ok {
						t.Fatalf("the batch links to an unknown span")
					}
					back := false
					for _, ol := range other.Links {
						back = back || ol.SpanContext.SpanID() == sp.SpanContext.SpanID()
					}
					if !back {
						t.Errorf("%q does not link back to its batch", other.Name)
					}
				}
				t.Logf("round %d: a batch of %d, parent %q, %d links", round, v.AsInt64(), bySpan[sp.Parent.SpanID()].Name, len(sp.Links))
				return
			}
		}
	}
	t.Fatal("20 rounds of 16 concurrent registers never shared a statement")
}
