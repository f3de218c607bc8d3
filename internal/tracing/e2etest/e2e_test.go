// Package e2etest checks tracing across the real parts: the Go SDK, a real
// journal (internal/testkit/testserver: gRPC, the REST mirror, SQLite), the
// gateway, the reconciler's verifier and real HTTP providers, with
// OpenTelemetry's in-memory exporter. It installs a TracerProvider
// globally, so it is a package of its own (internal/tracing's tests check
// that tracing is off until one is installed).
package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/reconciler"
)

// secret is in every payload and result: no span may carry it.
const secret = "s3cret-card-4242"

var (
	exporter = tracetest.NewInMemoryExporter()
	provider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
)

func init() {
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
}

// recorder is an HTTP provider that records the traceparent of each
// request and answers 201 {"id": "pay_1"}.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (p *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, r.Header.Get("Traceparent"))
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, `{"id":"pay_1","status":"succeeded","data":[{"id":"pay_1","status":"succeeded"}]}`)
}

func (p *recorder) traceparents() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func newProvider(t *testing.T) (*recorder, string) {
	p := &recorder{}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// spansOf returns the spans of trace id exported so far.
func spansOf(id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range exporter.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// find returns the one span named name of kind; it fails the test if
// there is none or more than one.
func find(t *testing.T, spans tracetest.SpanStubs, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	var got []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name && s.SpanKind == kind {
			got = append(got, s)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d spans %q (%s), want 1; the trace has:\n%s", len(got), name, kind, describe(spans))
	}
	return got[0]
}

func describe(spans tracetest.SpanStubs) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %q (%s) parent %s\n", s.SpanContext.SpanID(), s.Name, s.SpanKind, s.Parent.SpanID())
	}
	return b.String()
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, key, want string) {
	t.Helper()
	v, ok := attr(s, key)
	if !ok || v.String() != want {
		t.Errorf("span %q: %s = %q (set: %v), want %q", s.Name, key, v.String(), ok, want)
	}
}

func wantChild(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("span %q's parent is %s, want %q (%s)", child.Name, child.Parent.SpanID(), parent.Name, parent.SpanContext.SpanID())
	}
}

// noSecrets fails the test if any span attribute, event or status says secret.
func noSecrets(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	for _, s := range spans {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), secret) {
				t.Errorf("span %q attribute %s carries the payload: %q", s.Name, kv.Key, kv.Value.String())
			}
		}
		for _, e := range s.Events {
			for _, kv := range e.Attributes {
				if strings.Contains(kv.Value.String(), secret) {
					t.Errorf("span %q event %s carries the payload", s.Name, e.Name)
				}
			}
		}
		if strings.Contains(s.Status.Description, secret) {
			t.Errorf("span %q status carries the payload", s.Name)
		}
	}
}

// traceIDOf parses a traceparent header: version-traceid-spanid-flags.
func traceIDOf(t *testing.T, tp string) (trace.TraceID, trace.SpanID) {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		t.Fatalf("traceparent %q is not W3C trace context", tp)
	}
	tid, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		t.Fatalf("traceparent %q: %v", tp, err)
	}
	sid, err := trace.SpanIDFromHex(parts[2])
	if err != nil {
		t.Fatalf("traceparent %q: %v", tp, err)
	}
	return tid, sid
}

// TestExecuteTrace: one trace holds the agent's span, Execute (SDK), the
// Register client span, the journal's Register server span, the store's
// transaction span, the provider call, and the provider's request carries
// that trace's traceparent; MarkSucceeded joins it too.
func TestExecuteTrace(t *testing.T) {
	j := testserver.Start(t, nil)
	prov, provURL := newProvider(t)
	c := client.New(j.Conn)

	ctx, agent := otel.Tracer("agent").Start(context.Background(), "agent turn")
	key := client.NewKey()
	out, err := c.Execute(ctx, client.Op{Key: key, Action: "create_payment",
		Payload: map[string]any{"order_id": "817", "amount_minor": 4900, "currency": "EUR", "card": secret}},
		func(ctx context.Context, a client.Attempt) (client.Effect, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, provURL+"/payments", strings.NewReader(`{"card":"`+secret+`"}`))
			if err != nil {
				return client.Effect{}, err
			}
			// What otelhttp.NewTransport does: the provider call's trace
			// context in the request's headers.
			otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return client.Effect{}, err
			}
			res.Body.Close()
			return client.Effect{ExternalID: "pay_1", Result: map[string]any{"card": secret}}, nil
		})
	agent.End()
	if err != nil || out.Kind != client.Succeeded {
		t.Fatalf("Execute: %v %v", out.Kind, err)
	}

	id := agent.SpanContext().TraceID()
	spans := spansOf(id)
	t.Logf("the trace:\n%s", describe(spans))
	root := find(t, spans, "agent turn", trace.SpanKindInternal)
	exec := find(t, spans, "opjournal.Execute", trace.SpanKindInternal)
	regClient := find(t, spans, "opjournal.v1.JournalService/Register", trace.SpanKindClient)
	regServer := find(t, spans, "opjournal.v1.JournalService/Register", trace.SpanKindServer)
	storeSpan := find(t, spans, "sqlite register", trace.SpanKindClient)
	call := find(t, spans, "opjournal.provider_call", trace.SpanKindInternal)
	markServer := find(t, spans, "opjournal.v1.JournalService/MarkSucceeded", trace.SpanKindServer)

	wantChild(t, exec, root)
	wantChild(t, regClient, exec)
	wantChild(t, regServer, regClient)
	wantChild(t, storeSpan, regServer)
	wantChild(t, call, exec)
	if !regServer.Parent.IsRemote() {
		t.Error("the Register server span's parent is not remote: the trace context did not come over gRPC")
	}

	wantAttr(t, exec, "opjournal.operation.key", key)
	wantAttr(t, exec, "opjournal.action_type", "create_payment")
	wantAttr(t, exec, "opjournal.outcome", "succeeded")
	wantAttr(t, regServer, "rpc.system", "grpc")
	wantAttr(t, regServer, "rpc.method", "Register")
	wantAttr(t, regServer, "opjournal.transport", "grpc")
	wantAttr(t, regServer, "opjournal.operation.key", key)
	wantAttr(t, regServer, "opjournal.action_type", "create_payment")
	wantAttr(t, regServer, "opjournal.status", "in_progress")
	wantAttr(t, regServer, "rpc.grpc.status_code", "0")
	wantAttr(t, storeSpan, "db.system.name", "sqlite")
	wantAttr(t, storeSpan, "db.operation.name", "register")
	wantAttr(t, storeSpan, "opjournal.batch.size", "1")
	wantAttr(t, markServer, "opjournal.status", "succeeded")
	wantAttr(t, call, "opjournal.attempt", "1")

	seen := prov.traceparents()
	if len(seen) != 1 {
		t.Fatalf("the provider saw %d requests", len(seen))
	}
	tid, sid := traceIDOf(t, seen[0])
	if tid != id {
		t.Errorf("the provider's traceparent has trace id %s, the agent's trace is %s", tid, id)
	}
	if sid != call.SpanContext.SpanID() {
		t.Errorf("the provider's traceparent names span %s, want the provider call's %s", sid, call.SpanContext.SpanID())
	}
	noSecrets(t, spans)
}

// TestRESTTrace: a REST call with a traceparent header gets a server span
// in that trace (through the same interceptor), with the store's below.
func TestRESTTrace(t *testing.T) {
	j := testserver.Start(t, nil)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	key := client.NewKey()
	body := `{"operation_key":"` + key + `","action_type":"create_payment","payload":{"order_id":"817","amount_minor":4900,"currency":"EUR","card":"` + secret + `"}}`
	req, _ := http.NewRequest(http.MethodPost, j.HTTPURL+"/v1/operations:register", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+tid.String()+"-"+sid.String()+"-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("register: HTTP %d", res.StatusCode)
	}
	spans := spansOf(tid)
	srv := find(t, spans, "opjournal.v1.JournalService/Register", trace.SpanKindServer)
	if srv.Parent.SpanID() != sid || !srv.Parent.IsRemote() {
		t.Errorf("the REST call's server span's parent is %s (remote %v), want the traceparent's %s", srv.Parent.SpanID(), srv.Parent.IsRemote(), sid)
	}
	wantAttr(t, srv, "opjournal.transport", "http")
	wantAttr(t, srv, "opjournal.operation.key", key)
	wantAttr(t, srv, "opjournal.status", "pending")
	wantChild(t, find(t, spans, "sqlite register", trace.SpanKindClient), srv)
	noSecrets(t, spans)

	// A refusal is recorded with its code; not an error of the server.
	req, _ = http.NewRequest(http.MethodPost, j.HTTPURL+"/v1/operations:register",
		strings.NewReader(`{"operation_key":"`+key+`","action_type":"create_payment","payload":{"order_id":"817","amount_minor":1,"currency":"EUR"}}`))
	tid2, _ := trace.TraceIDFromHex("5bf92f3577b34da6a3ce929d0e0e4736")
	req.Header.Set("Traceparent", "00-"+tid2.String()+"-"+sid.String()+"-01")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	conflict := find(t, spansOf(tid2), "opjournal.v1.JournalService/Register", trace.SpanKindServer)
	wantAttr(t, conflict, "opjournal.error_code", "PAYLOAD_MISMATCH")
}

const gatewayPolicy = `actions:
  create_payment:
    lease_seconds: 5
    integer_fields: [amount_minor]
    gateway:
      http:
        route: POST /payments
        upstream: "${UPSTREAM}"
        forward_key_header: Idempotency-Key
        external_id: /id
`

// TestGatewayTrace: the agent's traceparent reaches the gateway; the
// gateway's request span, Execute, the journal's Register and the
// upstream call are one trace, and the upstream receives that trace's
// traceparent (the gateway's own, not the agent's).
func TestGatewayTrace(t *testing.T) {
	prov, provURL := newProvider(t)
	pol, err := policy.Parse([]byte(gatewayPolicy), "trace-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := testserver.Start(t, pol)
	g, err := gateway.New(gateway.Config{Journal: client.New(j.Conn), Policy: pol, Identity: gateway.IdentityAnonymous,
		LookupEnv: func(string) (string, bool) { return provURL, true }})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g)
	t.Cleanup(front.Close)
	t.Cleanup(g.Wait)

	ctx, agent := otel.Tracer("agent").Start(context.Background(), "agent tool call")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/payments",
		bytes.NewReader([]byte(`{"amount_minor":4900,"currency":"EUR","card":"`+secret+`"}`)))
	req.Header.Set("Idempotency-Key", "order-817")
	req.Header.Set("Content-Type", "application/json")
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer map[string]any
	_ = json.NewDecoder(res.Body).Decode(&answer)
	res.Body.Close()
	agent.End()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("gateway: HTTP %d %v", res.StatusCode, answer)
	}
	g.Wait() // the record is written in the background

	id := agent.SpanContext().TraceID()
	spans := spansOf(id)
	t.Logf("the trace:\n%s", describe(spans))
	door := find(t, spans, "POST /payments", trace.SpanKindServer)
	exec := find(t, spans, "opjournal.Execute", trace.SpanKindInternal)
	reg := find(t, spans, "opjournal.v1.JournalService/Register", trace.SpanKindServer)
	call := find(t, spans, "opjournal.provider_call", trace.SpanKindInternal)
	up := find(t, spans, "POST", trace.SpanKindClient)
	wantChild(t, door, find(t, spans, "agent tool call", trace.SpanKindInternal))
	wantChild(t, exec, door)
	wantChild(t, up, call)
	if reg.SpanContext.TraceID() != id {
		t.Error("the journal's Register is not in the agent's trace")
	}
	wantAttr(t, door, "http.route", "/payments")
	wantAttr(t, door, "http.response.status_code", "201")
	wantAttr(t, door, "opjournal.action_type", "create_payment")
	wantAttr(t, up, "http.response.status_code", "201")
	if _, ok := attr(door, "opjournal.operation.key"); !ok {
		t.Error("the gateway's span does not name the operation key")
	}

	seen := prov.traceparents()
	if len(seen) != 1 {
		t.Fatalf("the upstream saw %d requests", len(seen))
	}
	tid, sid := traceIDOf(t, seen[0])
	if tid != id || sid != up.SpanContext.SpanID() {
		t.Errorf("the upstream's traceparent is %s, want trace %s span %s (the gateway's upstream call)", seen[0], id, up.SpanContext.SpanID())
	}
	noSecrets(t, spans)
}

// TestVerifierTrace: the reconciler's verifier request is a client span
// and sends its traceparent; the URL's query (which may hold a secret)
// is not recorded.
func TestVerifierTrace(t *testing.T) {
	prov, provURL := newProvider(t)
	v, err := reconciler.NewHTTPVerifier(&policy.HTTPVerifier{
		URL: provURL + "/payments?idempotency_key={operation_key}&token=" + secret, List: "/data", Found: "/id",
		Completed: "/status", CompletedValues: []string{"succeeded"}, ExternalID: "/id", Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := otel.Tracer("test").Start(context.Background(), "reconcile")
	obs, err := v.Find(ctx, &opjournalv1.Operation{OperationKey: "op_1", ActionType: "create_payment"})
	root.End()
	if err != nil || obs.ExternalID != "pay_1" {
		t.Fatalf("Find: %+v %v", obs, err)
	}
	spans := spansOf(root.SpanContext().TraceID())
	get := find(t, spans, "GET", trace.SpanKindClient)
	wantChild(t, get, find(t, spans, "reconcile", trace.SpanKindInternal))
	wantAttr(t, get, "http.request.method", "GET")
	wantAttr(t, get, "http.response.status_code", "201")
	tid, sid := traceIDOf(t, prov.traceparents()[0])
	if tid != root.SpanContext().TraceID() || sid != get.SpanContext.SpanID() {
		t.Errorf("the provider's traceparent %s is not the verifier call's", prov.traceparents()[0])
	}
	noSecrets(t, spans)
}
