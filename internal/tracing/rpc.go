package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetadataCarrier carries trace context in gRPC metadata.
type MetadataCarrier metadata.MD

// Get implements propagation.TextMapCarrier.
func (c MetadataCarrier) Get(key string) string {
	if vs := metadata.MD(c).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Set implements propagation.TextMapCarrier.
func (c MetadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys implements propagation.TextMapCarrier.
func (c MetadataCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// splitMethod splits "/pkg.Service/Method".
func splitMethod(full string) (service, method string) {
	s, m, _ := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return s, m
}

// rpcAttrs are the semantic conventions' attributes of an RPC.
func rpcAttrs(fullMethod string) []attribute.KeyValue {
	svc, m := splitMethod(fullMethod)
	return []attribute.KeyValue{attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", svc), attribute.String("rpc.method", m)}
}

// StartServerRPC starts the server span of a JournalService call, named
// "opjournal.v1.JournalService/Register", as a child of the W3C trace
// context the call came with: in its gRPC metadata, or (for the REST
// mirror, whose HTTP listener extracted it from the request headers with
// ExtractHTTP) already in ctx. transport is "grpc" or "http". Call only
// when Enabled.
func StartServerRPC(ctx context.Context, fullMethod, transport string) (context.Context, trace.Span) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if _, has := md["traceparent"]; has {
			ctx = otel.GetTextMapPropagator().Extract(ctx, MetadataCarrier(md))
		}
	}
	return Start(ctx, strings.TrimPrefix(fullMethod, "/"), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(append(rpcAttrs(fullMethod), KeyTransport.String(transport))...))
}

// EndRPC ends an RPC's span with its outcome: the gRPC status code, and
// for a failure the opjournal error code (code, "" for none). Only a
// server-side fault (INTERNAL, UNAVAILABLE, UNKNOWN, DEADLINE_EXCEEDED,
// DATA_LOSS) marks the span as an error, as the conventions ask for a
// server span: a refusal of the caller's request is an answer.
func EndRPC(span trace.Span, err error, code string) {
	st := status.Code(err)
	span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st)))
	if err != nil {
		if code == "" {
			code = st.String()
		}
		switch st.String() {
		case "Internal", "Unavailable", "Unknown", "DeadlineExceeded", "DataLoss":
			Fail(span, code)
		default:
			span.SetAttributes(KeyErrorCode.String(code))
		}
	}
	span.End()
}

// WrapConn returns cc with a client span around every unary call, named
// like the server's, whose W3C trace context goes in the call's metadata
// (traceparent). While tracing is off it only passes calls on.
func WrapConn(cc grpc.ClientConnInterface) grpc.ClientConnInterface {
	if _, ok := cc.(tracedConn); ok {
		return cc
	}
	return tracedConn{cc}
}

type tracedConn struct{ grpc.ClientConnInterface }

func (t tracedConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if !Enabled() {
		return t.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	}
	ctx, span := Start(ctx, strings.TrimPrefix(method, "/"), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(rpcAttrs(method)...))
	if r, ok := args.(interface{ GetOperationKey() string }); ok && r.GetOperationKey() != "" {
		span.SetAttributes(KeyOperationKey.String(r.GetOperationKey()))
	}
	c := pairs{}
	otel.GetTextMapPropagator().Inject(ctx, &c)
	if len(c.kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, c.kv...)
	}
	err := t.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	st := status.Code(err)
	span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st)))
	if err != nil {
		Fail(span, st.String())
	}
	span.End()
	return err
}

// pairs collects injected headers as metadata key/value pairs.
type pairs struct{ kv []string }

func (p *pairs) Get(string) string { return "" }
func (p *pairs) Set(k, v string)   { p.kv = append(p.kv, strings.ToLower(k), v) }
func (p *pairs) Keys() []string    { return nil }
