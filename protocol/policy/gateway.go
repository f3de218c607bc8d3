package policy

import (
	"fmt"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/opjournal/opjournal/internal/httpheader"
)

// Gateway says how opjournal-gateway protects an action (gateway:): the
// HTTP route and the MCP tool whose calls become operations of it. An
// agent that never calls an SDK still gets one effect per intent.
type Gateway struct {
	// HTTP is the route of the HTTP front door (nil: none).
	HTTP *GatewayHTTP `json:",omitempty"`
	// MCP is the tool of the MCP front door (nil: none).
	MCP *GatewayMCP `json:",omitempty"`
}

// GatewayHTTP is one protected HTTP route, proxied to an upstream API.
type GatewayHTTP struct {
	// Method and Path are the route ("POST /payments"): an exact path.
	Method, Path string
	// Upstream is the provider's base URL (${VAR} references are expanded
	// when the gateway starts); the request's path and query are appended.
	Upstream string
	// KeyHeader is the request header the client's idempotency key comes
	// in (default Idempotency-Key).
	KeyHeader string
	// KeyRequired refuses a request without KeyHeader (400). It defaults
	// to true when KeyFields is empty.
	KeyRequired bool
	// KeyFields are top-level members of the JSON body that name the
	// intent: without the header, the key is derived from their values and
	// the caller's scope.
	KeyFields []string `json:",omitempty"`
	// ForwardHeaders are the client's request headers sent on to the
	// provider (canonical names, forward_headers): each one is in the
	// request hash, so a retry with another value is another request, and
	// every other client header stays at the gateway. Empty: none.
	ForwardHeaders []string `json:",omitempty"`
	// ForwardKeyHeader sends the operation key to the provider in this
	// header (its own idempotency key); ForwardKeyField writes it into
	// this top-level member of the JSON body (a reference field, for
	// providers without idempotency). Either, both or neither.
	ForwardKeyHeader string `json:",omitempty"`
	ForwardKeyField  string `json:",omitempty"`
	// ExternalID points into the provider's 2xx JSON answer to its id of
	// the effect ("" for none).
	ExternalID string `json:",omitempty"`
	// StoreHeaders are the response headers stored and replayed (default
	// Content-Type and Location). Hop-by-hop and secret headers never are.
	StoreHeaders []string
	// MaxResponseBytes bounds the response body stored for replay (default
	// 32768, at most 60000); a larger one is replayed without its body.
	MaxResponseBytes int
}

// GatewayMCP is one protected MCP tool of an upstream MCP server.
type GatewayMCP struct {
	// Tool is the tool's name.
	Tool string
	// KeyFields are the tool arguments that name the intent (at least
	// one): the key is derived from their values and the caller's scope,
	// never from the model's wording or the JSON-RPC id, which change when
	// a model retries.
	KeyFields []string
	// ForwardKeyArgument writes the operation key into this argument (the
	// upstream tool's idempotency key or reference), "" for none.
	ForwardKeyArgument string `json:",omitempty"`
	// ExternalID points into the result's structuredContent to the
	// provider's id of the effect ("" for none).
	ExternalID string `json:",omitempty"`
	// ToolErrorsFinal: a result with isError is the tool's definite
	// refusal, recorded failed_final and replayed (tool_errors:
	// failed_final). By default (tool_errors: unknown) its outcome is
	// unknown, for the reconciler: MCP servers also answer isError when the
	// API behind them failed or timed out, which may have done the effect.
	// Protocol errors and timeouts are always unknown.
	ToolErrorsFinal bool `json:",omitempty"`
}

// Gateway defaults and bounds.
const (
	defaultKeyHeader          = "Idempotency-Key"
	defaultMaxResponseBytes   = 32 << 10
	maxMaxResponseBytes       = 60000 // under the journal's 64 KiB result limit, with room for status and headers
	toolErrorsFailedFinal     = "failed_final"
	toolErrorsUnknown         = "unknown"
	gatewayFieldNameMaxLength = 64
)

// gatewayConfig is an action's gateway block as written.
type gatewayConfig struct {
	HTTP yaml.Node `yaml:"http"`
	MCP  yaml.Node `yaml:"mcp"`
}

// gateway validates the gateway mapping of an action.
func (p *parser) gateway(n *yaml.Node, path string) *Gateway {
	var c gatewayConfig
	ok, _ := p.section(n, path, "a mapping with http and/or mcp", &c)
	if ok && len(n.Content) == 0 {
		p.add(n, path, "must configure http, mcp or both; omit gateway if the action is not fronted by opjournal-gateway")
	}
	g := &Gateway{HTTP: p.gatewayHTTP(&c.HTTP, join(path, "http")), MCP: p.gatewayMCP(&c.MCP, join(path, "mcp"))}
	if g.HTTP == nil && g.MCP == nil {
		return nil
	}
	return g
}

// gatewayHTTPConfig is a gateway's http route as written.
type gatewayHTTPConfig struct {
	Route            yaml.Node `yaml:"route"`
	Upstream         yaml.Node `yaml:"upstream"`
	KeyHeader        yaml.Node `yaml:"key_header"`
	KeyRequired      yaml.Node `yaml:"key_required"`
	KeyFields        yaml.Node `yaml:"key_fields"`
	ForwardHeaders   yaml.Node `yaml:"forward_headers"`
	ForwardKeyHeader yaml.Node `yaml:"forward_key_header"`
	ForwardKeyField  yaml.Node `yaml:"forward_key_field"`
	ExternalID       yaml.Node `yaml:"external_id"`
	StoreHeaders     yaml.Node `yaml:"store_headers"`
	MaxResponseBytes yaml.Node `yaml:"max_response_bytes"`
}

// refused refuses payload_fields (see payloadFieldsRefused).
func (*gatewayHTTPConfig) refused(key string) string { return refusePayloadFields(key) }

// gatewayHTTP validates the http route n (if written).
func (p *parser) gatewayHTTP(n *yaml.Node, path string) *GatewayHTTP {
	var c gatewayHTTPConfig
	if ok, _ := p.section(n, path, "a mapping of the HTTP route's fields", &c); !ok {
		return nil
	}
	h := &GatewayHTTP{KeyHeader: defaultKeyHeader, StoreHeaders: []string{"Content-Type", "Location"}, MaxResponseBytes: defaultMaxResponseBytes}
	c.request(p, path, h)
	c.response(p, path, h)
	c.check(p, n, path, h)
	return h
}

// request converts the fields about the request into h.
func (c *gatewayHTTPConfig) request(p *parser, path string, h *GatewayHTTP) {
	if s, ok := p.str(&c.Route, join(path, "route")); ok {
		h.Method, h.Path = p.route(&c.Route, join(path, "route"), s)
	}
	if s, ok := p.str(&c.Upstream, join(path, "upstream")); ok && p.upstreamURL(&c.Upstream, join(path, "upstream"), s) {
		h.Upstream = s
	}
	if s, ok := p.headerName(&c.KeyHeader, join(path, "key_header")); ok {
		h.KeyHeader = s
	}
	if set(&c.KeyFields) {
		h.KeyFields = p.memberNames(&c.KeyFields, join(path, "key_fields"))
	}
	if set(&c.ForwardHeaders) {
		h.ForwardHeaders = p.forwardHeaders(&c.ForwardHeaders, join(path, "forward_headers"))
	}
	if s, ok := p.headerName(&c.ForwardKeyHeader, join(path, "forward_key_header")); ok {
		h.ForwardKeyHeader = s
	}
	if s, ok := p.memberName(&c.ForwardKeyField, join(path, "forward_key_field")); ok {
		h.ForwardKeyField = s
	}
}

// response converts the fields about the provider's answer into h.
func (c *gatewayHTTPConfig) response(p *parser, path string, h *GatewayHTTP) {
	if s, ok := p.pointer(&c.ExternalID, join(path, "external_id")); ok {
		h.ExternalID = s
	}
	if set(&c.StoreHeaders) {
		h.StoreHeaders = p.storeHeaders(&c.StoreHeaders, join(path, "store_headers"))
	}
	if i, ok := p.integer(&c.MaxResponseBytes, join(path, "max_response_bytes")); ok {
		if i < 0 || i > maxMaxResponseBytes {
			p.add(&c.MaxResponseBytes, join(path, "max_response_bytes"), "%d is out of range 0..%d (the journal stores at most 64 KiB of result)", i, maxMaxResponseBytes)
		} else {
			h.MaxResponseBytes = int(i)
		}
	}
}

// check sets h.KeyRequired and checks the route's fields against each
// other; n is the route's mapping.
func (c *gatewayHTTPConfig) check(p *parser, n *yaml.Node, path string, h *GatewayHTTP) {
	if !set(&c.Route) {
		p.add(n, join(path, "route"), `missing: the method and path it protects, such as "POST /payments"`)
	}
	if !set(&c.Upstream) {
		p.add(n, join(path, "upstream"), "missing: the provider's base URL, such as ${PROVIDER_URL}")
	}
	h.KeyRequired = len(h.KeyFields) == 0
	if required, ok := p.boolean(&c.KeyRequired, join(path, "key_required")); ok {
		if !required && len(h.KeyFields) == 0 {
			p.add(&c.KeyRequired, join(path, "key_required"), "false needs key_fields: without the header, the key is derived from them (and the caller's scope); otherwise a request without a key could not be recognised when it is retried")
		}
		h.KeyRequired = required
	}
	// The gateway writes the operation key into forward_key_field and
	// drops a client's value of it: it cannot also name the intent.
	if f := h.ForwardKeyField; f != "" && slices.ContainsFunc(h.KeyFields, func(k string) bool { return strings.EqualFold(k, f) }) {
		p.add(n, join(path, "forward_key_field"), "%q is also a key field; the gateway fills it with the operation key (a client's value is dropped), so it cannot identify the request", f)
	}
	// The gateway sets these itself; a client's value would be a second,
	// unhashed one.
	for _, own := range []string{h.KeyHeader, h.ForwardKeyHeader} {
		if own != "" && slices.Contains(h.ForwardHeaders, own) {
			p.add(n, join(path, "forward_headers"), "%s is the route's key_header or forward_key_header: the gateway reads or sets it itself, so it is never forwarded from the client", own)
		}
	}
}

// refusePayloadFields says why key is refused in a gateway route or tool:
// payload_fields is, every other unknown key is merely unknown ("").
func refusePayloadFields(key string) string {
	if key == "payload_fields" {
		return payloadFieldsRefused
	}
	return ""
}

// payloadFieldsRefused is why payload_fields is refused: the request hash
// (and so an approval, and the 422 of a changed retry) must cover all
// that is sent, and the gateway sends the whole body.
const payloadFieldsRefused = "is not accepted: the request hash must cover everything the gateway sends, and it sends the whole body " +
	"(arguments), so a hash of some members would let a request approved or recorded for them be sent again with other values in the rest. " +
	"Remove it: the hash covers the whole body (or all the arguments)"

// forwardHeaders validates forward_headers: header names a client may
// send on to the provider, each then part of the request hash.
func (p *parser) forwardHeaders(n *yaml.Node, path string) []string {
	return p.headerList(n, path, "forwarded", func(c string) string {
		switch {
		case strings.HasPrefix(c, "Content-") || c == "Digest":
			return "describes the body, which the gateway sends in its canonical form and describes itself"
		case slices.Contains(gatewayOwnHeaders, c) || strings.HasPrefix(c, "Sec-Fetch-"):
			return "is set by the gateway or its HTTP client (the host, the body's length and encoding, the idempotency keys, the credentials), never taken from the client"
		case slices.Contains(methodOverrideHeaders, c):
			return "changes the method the provider runs, and a route protects one method"
		case httpheader.IsSecret(c):
			return "may carry a secret: a forwarded header's value is part of the request the journal stores; give the provider's credential with --upstream-header"
		}
		return ""
	})
}

// headerList validates a list of header names, canonicalised: each a valid
// name, not hop-by-hop (never verb: forwarded or stored), listed once, and
// not refused by refuse (which says why, or "" to accept).
func (p *parser) headerList(n *yaml.Node, path, verb string, refuse func(canonical string) string) []string {
	items, ok := p.stringList(n, path)
	if !ok {
		return nil
	}
	out := []string{}
	for i, s := range items {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		c := textproto.CanonicalMIMEHeaderKey(s.Value)
		if !isToken(s.Value) {
			p.add(s, ipath, "%s is not a valid HTTP header name", literal(s.Value))
			continue
		}
		if httpheader.HopByHop(c) {
			p.add(s, ipath, "%s is hop-by-hop: it describes one connection and is never %s", c, verb)
			continue
		}
		if why := refuse(c); why != "" {
			p.add(s, ipath, "%s %s", c, why)
			continue
		}
		if slices.Contains(out, c) {
			p.add(s, ipath, "%s is listed twice", c)
			continue
		}
		out = append(out, c)
	}
	return out
}

// gatewayOwnHeaders are the request headers the gateway or net/http set
// on a protected request, or that must never reach the provider from the
// client (an idempotency key would make net/http re-send the request).
var gatewayOwnHeaders = []string{"Host", "Transfer-Encoding", "Expect", "Accept-Encoding", "Authorization", "Proxy-Authorization",
	"Cookie", "Origin", "Idempotency-Key", "X-Idempotency-Key"}

// methodOverrideHeaders make some frameworks run another method than the
// request line's.
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// gatewayMCPConfig is a gateway's mcp tool as written.
type gatewayMCPConfig struct {
	Tool               yaml.Node `yaml:"tool"`
	KeyFields          yaml.Node `yaml:"key_fields"`
	ForwardKeyArgument yaml.Node `yaml:"forward_key_argument"`
	ExternalID         yaml.Node `yaml:"external_id"`
	ToolErrors         yaml.Node `yaml:"tool_errors"`
}

// refused refuses payload_fields (see payloadFieldsRefused).
func (*gatewayMCPConfig) refused(key string) string { return refusePayloadFields(key) }

// gatewayMCP validates the mcp tool n (if written).
func (p *parser) gatewayMCP(n *yaml.Node, path string) *GatewayMCP {
	var c gatewayMCPConfig
	if ok, _ := p.section(n, path, "a mapping of the MCP tool's fields", &c); !ok {
		return nil
	}
	return c.validate(p, n, path)
}

// validate converts the tool's fields; n is the tool's mapping.
func (c *gatewayMCPConfig) validate(p *parser, n *yaml.Node, path string) *GatewayMCP {
	m := &GatewayMCP{}
	if s, ok := p.str(&c.Tool, join(path, "tool")); ok {
		if !validToolName(s) {
			p.add(&c.Tool, join(path, "tool"), "%s is not an MCP tool name: 1-128 characters of A-Z, a-z, 0-9, '_', '-' and '.'", literal(s))
		} else {
			m.Tool = s
		}
	}
	if set(&c.KeyFields) {
		m.KeyFields = p.memberNames(&c.KeyFields, join(path, "key_fields"))
		if len(m.KeyFields) == 0 {
			p.add(&c.KeyFields, join(path, "key_fields"), "must name at least one argument: the key of a tool call is derived from the arguments that name the intent")
		}
	}
	if s, ok := p.memberName(&c.ForwardKeyArgument, join(path, "forward_key_argument")); ok {
		m.ForwardKeyArgument = s
	}
	if s, ok := p.pointer(&c.ExternalID, join(path, "external_id")); ok {
		m.ExternalID = s
	}
	if s, ok := p.str(&c.ToolErrors, join(path, "tool_errors")); ok {
		switch s {
		case toolErrorsFailedFinal:
			m.ToolErrorsFinal = true
		case toolErrorsUnknown:
		default:
			p.add(&c.ToolErrors, join(path, "tool_errors"), "%s is not one of %s, %s", literal(s), toolErrorsFailedFinal, toolErrorsUnknown)
		}
	}
	if !set(&c.Tool) {
		p.add(n, join(path, "tool"), "missing: the name of the tool it protects")
	}
	if m.KeyFields == nil {
		p.add(n, join(path, "key_fields"), "missing: the arguments that name the intent (such as [order_id])")
	}
	// The gateway fills forward_key_argument and drops what the model sent
	// in it: it cannot also be an argument the key is made of.
	if a := m.ForwardKeyArgument; a != "" && slices.Contains(m.KeyFields, a) {
		p.add(n, join(path, "forward_key_argument"), "%q is also a key field; the gateway fills it with the operation key (hidden from the model), so it cannot identify the call", a)
	}
	return m
}

// route parses "METHOD /path".
func (p *parser) route(n *yaml.Node, path, s string) (method, rpath string) {
	method, rpath, ok := strings.Cut(s, " ")
	switch {
	case !ok || strings.Contains(rpath, " "):
		p.add(n, path, `%s is not "METHOD /path", such as "POST /payments"`, literal(s))
	case method == "GET" || method == "HEAD" || method == "OPTIONS":
		p.add(n, path, "%s requests do not change anything and are passed through as they are; protect the route that has the side effect (POST, PUT, PATCH or DELETE)", method)
	case method != "POST" && method != "PUT" && method != "PATCH" && method != "DELETE":
		p.add(n, path, "%s is not one of POST, PUT, PATCH, DELETE", literal(method))
	case !strings.HasPrefix(rpath, "/") || strings.ContainsAny(rpath, "?#") || !validPath(rpath):
		p.add(n, path, "%s is not an absolute path without a query, such as /payments", literal(rpath))
	default:
		return method, rpath
	}
	return "", ""
}

func validPath(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Path == s
}

// providerLink checks a provider_link template: an absolute http(s) URL
// with a host, at least one placeholder, no ${VAR} (the link is shown to
// every operator, so it must not carry a secret) and no userinfo.
func (p *parser) providerLink(n *yaml.Node, path, tmpl string) bool {
	if strings.Contains(tmpl, "${") {
		p.add(n, path, "%s takes no ${VAR}: the link is shown to operators, so it must not carry a secret", literal(tmpl))
		return false
	}
	if !strings.Contains(tmpl, PlaceholderExternalID) && !strings.Contains(tmpl, PlaceholderOperationKey) {
		p.add(n, path, "%s has neither %s nor %s: the link must point at the operation's own record", literal(tmpl), PlaceholderExternalID, PlaceholderOperationKey)
		return false
	}
	trial := strings.NewReplacer(PlaceholderExternalID, "x", PlaceholderOperationKey, "x").Replace(tmpl)
	u, err := url.Parse(trial)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		p.add(n, path, "%s is not an absolute http(s) URL such as https://dashboard.example.com/payments/{external_id}", literal(tmpl))
		return false
	}
	return true
}

// upstreamURL checks an upstream base URL template: expanded with an empty
// environment it must be an absolute http(s) URL without a query.
func (p *parser) upstreamURL(n *yaml.Node, path, tmpl string) bool {
	trial, err := ExpandEnv(tmpl, func(string) (string, bool) { return "", true })
	if err != nil {
		p.add(n, path, "%v", err)
		return false
	}
	if !strings.Contains(trial, "://") && strings.Contains(tmpl, "${") {
		return true // all of it comes from the environment; checked when the gateway starts
	}
	u, err := url.Parse(trial)
	switch {
	case err != nil:
		p.add(n, path, "is not a valid URL: %v", unwrapURLError(err))
		return false
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		p.add(n, path, "must be an absolute http:// or https:// URL (with the environment empty, it reads %s)", literal(trial))
		return false
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		p.add(n, path, "must be a base URL without user info, query or fragment")
		return false
	}
	return true
}

// CheckUpstream validates an expanded upstream URL (at gateway start).
func CheckUpstream(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("is not a valid URL: %v", unwrapURLError(err))
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("must be an absolute http:// or https:// URL")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return fmt.Errorf("must be a base URL without user info, query or fragment")
	}
	return nil
}

// headerName validates a header name the gateway reads or writes.
func (p *parser) headerName(n *yaml.Node, path string) (string, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return "", false
	}
	if !isToken(s) {
		p.add(n, path, "%s is not a valid HTTP header name", literal(s))
		return "", false
	}
	if httpheader.HopByHop(s) {
		p.add(n, path, "%s is a hop-by-hop header", literal(s))
		return "", false
	}
	return textproto.CanonicalMIMEHeaderKey(s), true
}

// storeHeaders validates the list of response headers to store.
func (p *parser) storeHeaders(n *yaml.Node, path string) []string {
	return p.headerList(n, path, "stored", func(c string) string {
		if c == "Set-Cookie" || httpheader.IsSecret(c) {
			return "may carry a secret and is never stored"
		}
		return ""
	})
}

// memberNames validates a list of JSON member names.
func (p *parser) memberNames(n *yaml.Node, path string) []string {
	items, ok := p.stringList(n, path)
	if !ok {
		return nil
	}
	out := []string{}
	for i, s := range items {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case s.Value == "" || len(s.Value) > gatewayFieldNameMaxLength:
			p.add(s, ipath, "must be a member name of 1-%d characters", gatewayFieldNameMaxLength)
		case slices.Contains(out, s.Value):
			p.add(s, ipath, "%q is listed twice", s.Value)
		default:
			out = append(out, s.Value)
		}
	}
	return out
}

func (p *parser) memberName(n *yaml.Node, path string) (string, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return "", false
	}
	if s == "" || len(s) > gatewayFieldNameMaxLength {
		p.add(n, path, "must be a member name of 1-%d characters", gatewayFieldNameMaxLength)
		return "", false
	}
	return s, true
}

// validToolName is MCP's tool name syntax (SEP-986).
func validToolName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// checkGatewayRoutes reports two actions fronting the same route or tool.
func (p *parser) checkGatewayRoutes(actions []*Action, nodes map[string]*yaml.Node) {
	routes, tools := map[string]string{}, map[string]string{}
	for _, a := range actions {
		g := a.Gateway
		if g == nil {
			continue
		}
		if h := g.HTTP; h != nil && h.Method != "" {
			r := h.Method + " " + h.Path
			if other, dup := routes[r]; dup {
				p.add(nodes[a.Name], "actions."+a.Name+".gateway.http.route", "%s is already the route of %s: one route, one action", r, other)
			} else {
				routes[r] = a.Name
			}
		}
		if m := g.MCP; m != nil && m.Tool != "" {
			if other, dup := tools[m.Tool]; dup {
				p.add(nodes[a.Name], "actions."+a.Name+".gateway.mcp.tool", "%s is already the tool of %s: one tool, one action", m.Tool, other)
			} else {
				tools[m.Tool] = a.Name
			}
		}
	}
}

// clone returns a deep copy of g.
func (g *Gateway) clone() *Gateway {
	if g == nil {
		return nil
	}
	c := &Gateway{}
	if g.HTTP != nil {
		h := *g.HTTP
		h.KeyFields, h.ForwardHeaders, h.StoreHeaders = slices.Clone(h.KeyFields), slices.Clone(h.ForwardHeaders), slices.Clone(h.StoreHeaders)
		c.HTTP = &h
	}
	if g.MCP != nil {
		m := *g.MCP
		m.KeyFields = slices.Clone(m.KeyFields)
		c.MCP = &m
	}
	return c
}
