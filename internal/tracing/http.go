package tracing

import (
	"context"
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Transport returns rt (nil: http.DefaultTransport) with a client span
// around each request, named by its method, whose W3C trace context
// replaces any traceparent the request carried. The span records the
// method, the server's address and port, the scheme and the response's
// status, never the URL's path or query (a verifier's may hold a secret)
// nor a header. It ends when the response's headers arrive. While
// tracing is off it only passes requests on.
func Transport(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	if _, ok := rt.(*transport); ok {
		return rt
	}
	return &transport{rt}
}

type transport struct{ rt http.RoundTripper }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !Enabled() {
		return t.rt.RoundTrip(req)
	}
	ctx, span := Start(req.Context(), req.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(serverAttrs(req), attribute.String("http.request.method", req.Method))...))
	defer span.End()
	req = req.Clone(ctx) // a RoundTripper must not change the caller's request
	req.Header.Del("Traceparent")
	req.Header.Del("Tracestate")
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	res, err := t.rt.RoundTrip(req)
	if err != nil {
		Fail(span, "transport_error")
		return res, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", res.StatusCode))
	if res.StatusCode >= 400 {
		Fail(span, "http_"+strconv.Itoa(res.StatusCode))
	}
	return res, nil
}

// Unwrap returns the wrapped RoundTripper.
func (t *transport) Unwrap() http.RoundTripper { return t.rt }

func serverAttrs(req *http.Request) []attribute.KeyValue {
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[req.URL.Scheme]
	}
	out := []attribute.KeyValue{attribute.String("server.address", host), attribute.String("url.scheme", req.URL.Scheme)}
	if n, err := strconv.Atoi(port); err == nil {
		out = append(out, attribute.Int("server.port", n))
	}
	return out
}

// StartHTTPServer starts the server span of an incoming request, a child
// of the W3C trace context in its headers, named "METHOD route" (route
// "" names it by the method alone). The returned writer records the
// response's status for EndHTTPServer. Call only when Enabled.
func StartHTTPServer(w http.ResponseWriter, r *http.Request, route string, attrs ...attribute.KeyValue) (*StatusWriter, *http.Request, trace.Span) {
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := r.Method
	attrs = append(attrs, attribute.String("http.request.method", r.Method))
	if route != "" {
		name += " " + route
		attrs = append(attrs, attribute.String("http.route", route))
	}
	if host, _, err := net.SplitHostPort(r.Host); err == nil {
		attrs = append(attrs, attribute.String("server.address", host))
	}
	ctx, span := Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return &StatusWriter{ResponseWriter: w}, r.WithContext(ctx), span
}

// EndHTTPServer ends a span StartHTTPServer started.
func EndHTTPServer(sw *StatusWriter, span trace.Span) {
	st := sw.Status
	if st == 0 {
		st = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", st))
	if st >= 500 {
		Fail(span, "http_"+strconv.Itoa(st))
	}
	span.End()
}

// StatusWriter records the status a handler answered. It unwraps for
// http.ResponseController (flushes, deadlines, as the reverse proxy uses).
type StatusWriter struct {
	http.ResponseWriter
	Status int
}

// WriteHeader implements http.ResponseWriter.
func (s *StatusWriter) WriteHeader(code int) {
	if s.Status == 0 {
		s.Status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (s *StatusWriter) Write(b []byte) (int, error) {
	if s.Status == 0 {
		s.Status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher when the wrapped writer does.
func (s *StatusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the wrapped writer (http.ResponseController).
func (s *StatusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Inject writes ctx's W3C trace context into a carrier (an MCP request's
// _meta, a header map).
func Inject(ctx context.Context, c propagation.TextMapCarrier) {
	otel.GetTextMapPropagator().Inject(ctx, c)
}

// Extract reads W3C trace context from a carrier into ctx.
func Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, c)
}
