package gateway

import (
	"context"
	"maps"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/opjournal/opjournal/internal/tracing"
)

// Tracing at the gateway (while it is on, see internal/tracing).
//
// HTTP door: each request is a server span ("POST /payments" for a
// protected route, the method alone for one passed through), a child of
// the traceparent the agent sent; a protected call's Execute, journal
// calls and provider call are below it, and the upstream request is a
// client span (tracing.Transport on the gateway's HTTP client) whose own
// traceparent REPLACES the agent's in the upstream request, so the
// provider's trace is the agent's.
//
// MCP door: each tools/call is a server span ("tools/call create_payment"),
// a child of the trace context the agent put in the request's _meta
// (traceparent, as MCP's convention has it) if any; the upstream call is
// a client span whose context goes in the upstream request's _meta.

const attrDoor = attribute.Key("opjournal.gateway.door")

// traceHTTP runs the HTTP door's handler in its server span.
func (g *Gateway) traceHTTP(w http.ResponseWriter, r *http.Request, route *httpRoute, serve func(http.ResponseWriter, *http.Request)) {
	name, attrs := "", []attribute.KeyValue{attrDoor.String("http")}
	if route != nil {
		name = r.URL.Path
		attrs = append(attrs, tracing.KeyActionType.String(route.action))
	}
	sw, r, span := tracing.StartHTTPServer(w, r, name, attrs...)
	defer func() {
		if key := sw.Header().Get(HeaderOperationKey); key != "" {
			span.SetAttributes(tracing.KeyOperationKey.String(key))
		}
		tracing.EndHTTPServer(sw, span)
	}()
	serve(sw, r)
}

// metaCarrier carries trace context in an MCP request's _meta.
type metaCarrier struct{ m mcp.Meta }

func (c metaCarrier) Get(key string) string {
	s, _ := c.m[key].(string)
	return s
}

func (c metaCarrier) Set(key, value string) { c.m[key] = value }

func (c metaCarrier) Keys() []string {
	out := make([]string, 0, len(c.m))
	for k := range c.m {
		out = append(out, k)
	}
	return out
}

// traceTool wraps a tool handler in the tools/call server span.
func traceTool(action string, h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if !tracing.Enabled() {
			return h(ctx, req)
		}
		if req.Params != nil && req.Params.Meta != nil {
			if _, ok := req.Params.Meta["traceparent"]; ok {
				ctx = tracing.Extract(ctx, metaCarrier{req.Params.Meta})
			}
		}
		name := ""
		if req.Params != nil {
			name = req.Params.Name
		}
		attrs := []attribute.KeyValue{attrDoor.String("mcp"), attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", name)}
		if action != "" {
			attrs = append(attrs, tracing.KeyActionType.String(action))
		}
		ctx, span := tracing.Start(ctx, "tools/call "+name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		res, err := h(ctx, req)
		switch {
		case err != nil:
			tracing.Fail(span, "error")
		case res != nil && res.IsError:
			span.SetAttributes(attribute.Bool("opjournal.tool_error", true))
		}
		if res != nil {
			if m, ok := res.Meta[MetaKey].(map[string]any); ok {
				if k, ok := m["operation_key"].(string); ok {
					span.SetAttributes(tracing.KeyOperationKey.String(k))
				}
			}
		}
		span.End()
		return res, err
	}
}

// callTool calls an upstream tool, in a client span whose trace context
// goes in the upstream request's _meta (replacing the agent's).
func callTool(ctx context.Context, cs *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	if !tracing.Enabled() {
		return cs.CallTool(ctx, p)
	}
	ctx, span := tracing.Start(ctx, "tools/call "+p.Name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", p.Name)))
	defer span.End()
	q := *p
	q.Meta = maps.Clone(p.Meta)
	if q.Meta == nil {
		q.Meta = mcp.Meta{}
	}
	delete(q.Meta, "traceparent")
	delete(q.Meta, "tracestate")
	tracing.Inject(ctx, metaCarrier{q.Meta})
	res, err := cs.CallTool(ctx, &q)
	switch {
	case err != nil:
		tracing.Fail(span, "tool_call_failed")
	case res != nil && res.IsError:
		span.SetAttributes(attribute.Bool("opjournal.tool_error", true))
	}
	return res, err
}
