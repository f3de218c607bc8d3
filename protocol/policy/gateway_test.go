package policy

import (
	"slices"
	"testing"
)

func TestShippedGateway(t *testing.T) {
	pay, _ := Default().Action("create_payment")
	h, m := pay.Gateway.HTTP, pay.Gateway.MCP
	if h.Method != "POST" || h.Path != "/payments" || h.KeyHeader != "Idempotency-Key" || !h.KeyRequired || h.ForwardKeyHeader != "Idempotency-Key" ||
		h.ExternalID != "/id" || !slices.Equal(h.StoreHeaders, []string{"Content-Type", "Location"}) || h.MaxResponseBytes != 32768 {
		t.Errorf("create_payment http: %+v", h)
	}
	if m.Tool != "create_payment" || !slices.Equal(m.KeyFields, []string{"order_id"}) || m.ForwardKeyArgument != "idempotency_key" || m.ToolErrorsFinal {
		t.Errorf("create_payment mcp: %+v", m)
	}
	mail, _ := Default().Action("send_email")
	if h := mail.Gateway.HTTP; h.KeyRequired || !slices.Equal(h.KeyFields, []string{"to", "subject"}) || h.ForwardKeyField != "reference" {
		t.Errorf("send_email http: %+v", h)
	}
	if a, _ := Default().Action("create_ticket"); a.Gateway != nil {
		t.Errorf("create_ticket has a gateway: %+v", a.Gateway)
	}
}

func TestGatewayInvalid(t *testing.T) {
	base := "actions:\n  a:\n    gateway:\n"
	for _, tc := range []struct{ doc, prefix, words string }{
		{base + "      http: {upstream: \"http://x\"}\n", "policy.yaml:4: actions.a.gateway.http.route: ", "missing"},
		{base + "      http: {route: \"GET /x\", upstream: \"http://x\"}\n", "policy.yaml:4: actions.a.gateway.http.route: ", "do not change anything"},
		{base + "      http: {route: \"POST x\", upstream: \"http://x\"}\n", "policy.yaml:4: actions.a.gateway.http.route: ", "absolute path"},
		{base + "      http: {route: \"POST /x?y=1\", upstream: \"http://x\"}\n", "policy.yaml:4: actions.a.gateway.http.route: ", "without a query"},
		{base + "      http: {route: \"POST /x\", upstream: \"ftp://x\"}\n", "policy.yaml:4: actions.a.gateway.http.upstream: ", "http:// or https://"},
		{base + "      http: {route: \"POST /x\"}\n", "policy.yaml:4: actions.a.gateway.http.upstream: ", "missing"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", key_required: false}\n", "policy.yaml:4: actions.a.gateway.http.key_required: ", "needs key_fields"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", store_headers: [Set-Cookie]}\n", "policy.yaml:4: actions.a.gateway.http.store_headers[0]: ", "never stored"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", store_headers: [Connection]}\n", "policy.yaml:4: actions.a.gateway.http.store_headers[0]: ", "hop-by-hop"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", key_fields: [a], payload_fields: [a]}\n", "policy.yaml:4: actions.a.gateway.http.payload_fields: ", "must cover everything the gateway sends"},
		{base + "      mcp: {tool: t, key_fields: [x], payload_fields: [x]}\n", "policy.yaml:4: actions.a.gateway.mcp.payload_fields: ", "must cover everything the gateway sends"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [\"Bad Name\"]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "not a valid HTTP header name"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [Connection]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "hop-by-hop"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [Stripe-Account, authorization]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[1]: ", "never taken from the client"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [Cookie]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "never taken from the client"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [Host]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "never taken from the client"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [content-length]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "describes the body"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [X-Idempotency-Key]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "never taken from the client"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [X-HTTP-Method-Override]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "changes the method"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [X-Api-Token]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[0]: ", "may carry a secret"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", forward_headers: [Stripe-Version, stripe-version]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers[1]: ", "listed twice"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", key_header: X-Request-Id, forward_headers: [X-Request-Id]}\n", "policy.yaml:4: actions.a.gateway.http.forward_headers: ", "never forwarded from the client"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", max_response_bytes: 100000}\n", "policy.yaml:4: actions.a.gateway.http.max_response_bytes: ", "out of range"},
		{base + "      http: {route: \"POST /x\", upstream: \"http://x\", bogus: 1}\n", "policy.yaml:4: actions.a.gateway.http.bogus: ", "unknown field"},
		{base + "      mcp: {tool: t}\n", "policy.yaml:4: actions.a.gateway.mcp.key_fields: ", "missing"},
		{base + "      mcp: {tool: t, key_fields: []}\n", "policy.yaml:4: actions.a.gateway.mcp.key_fields: ", "at least one"},
		{base + "      mcp: {tool: \"a b\", key_fields: [x]}\n", "policy.yaml:4: actions.a.gateway.mcp.tool: ", "not an MCP tool name"},
		{base + "      mcp: {tool: t, key_fields: [x], tool_errors: maybe}\n", "policy.yaml:4: actions.a.gateway.mcp.tool_errors: ", "not one of"},
		{base + "      mcp: {tool: t, key_fields: [x], forward_key_argument: x}\n", "policy.yaml:4: actions.a.gateway.mcp.forward_key_argument: ", "also a key field"},
		{base + "      {}\n", "policy.yaml:4: actions.a.gateway: ", "must configure http, mcp or both"},
		{"actions:\n  a:\n    gateway: {mcp: {tool: t, key_fields: [x]}}\n  b:\n    gateway: {mcp: {tool: t, key_fields: [x]}}\n",
			"policy.yaml:4: actions.b.gateway.mcp.tool: ", "already the tool of a"},
		{"actions:\n  a:\n    gateway: {http: {route: POST /x, upstream: \"http://x\"}}\n  b:\n    gateway: {http: {route: POST /x, upstream: \"http://y\"}}\n",
			"policy.yaml:4: actions.b.gateway.http.route: ", "already the route of a"},
	} {
		wantProblem(t, tc.doc, tc.prefix, tc.words)
	}
	// A good one, with every field.
	p := mustParse(t, base+`      http:
        route: PUT /orders/pay
        upstream: "${UP:-https://api.example.com/v1}"
        key_header: X-Request-Key
        key_required: false
        key_fields: [order_id]
        forward_headers: [stripe-account, Stripe-Version]
        forward_key_header: Idempotency-Key
        forward_key_field: reference
        external_id: /data/id
        store_headers: [content-type, X-Request-Id]
        max_response_bytes: 0
      mcp:
        tool: pay.v2
        key_fields: [order_id]
        tool_errors: failed_final
`)
	a, _ := p.Action("a")
	if h := a.Gateway.HTTP; h.Method != "PUT" || h.Path != "/orders/pay" || h.KeyHeader != "X-Request-Key" || h.KeyRequired ||
		!slices.Equal(h.StoreHeaders, []string{"Content-Type", "X-Request-Id"}) || h.MaxResponseBytes != 0 ||
		!slices.Equal(h.ForwardHeaders, []string{"Stripe-Account", "Stripe-Version"}) {
		t.Errorf("http: %+v", h)
	}
	if m := a.Gateway.MCP; !m.ToolErrorsFinal || m.Tool != "pay.v2" {
		t.Errorf("mcp: %+v", m)
	}
	// Without tool_errors, or with tool_errors: unknown, a tool's isError
	// is an unknown outcome.
	for _, doc := range []string{base + "      mcp: {tool: t, key_fields: [x]}\n", base + "      mcp: {tool: t, key_fields: [x], tool_errors: unknown}\n"} {
		if a, _ := mustParse(t, doc).Action("a"); a.Gateway.MCP.ToolErrorsFinal {
			t.Errorf("%q: tool errors are final", doc)
		}
	}
}
