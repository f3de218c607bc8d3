package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// The MCP door over HTTP knows who calls the same way as the HTTP door
// (identity.go), through the MCP SDK's own bearer-token middleware, and
// serves the OAuth protected-resource metadata (RFC 9728) that MCP clients
// read to find where to get a token.

// MCPHTTPOptions configure the MCP door's HTTP handler.
type MCPHTTPOptions struct {
	// Resource is the MCP endpoint's public URL, its resource identifier
	// (RFC 9728), e.g. https://gateway.example.com/mcp.
	Resource string
	// AuthorizationServers are the OAuth issuers whose access tokens the
	// journal accepts (advertised to clients; may be empty when callers
	// use journal tokens).
	AuthorizationServers []string
}

// metadataPath is where the protected-resource metadata is served.
const metadataPath = "/.well-known/oauth-protected-resource"

// MCPHandler returns the MCP door's HTTP handler: srv at /mcp over
// streamable HTTP, for clients of the sessionful revisions (2025-11-25 and
// before) and of the stateless one (2026-07-28) alike, every request
// authenticated as the Identity says, and
// the protected-resource metadata at /.well-known/oauth-protected-resource
// (and under it, /mcp, as RFC 9728 section 3.1 places it for a path).
func (g *Gateway) MCPHandler(srv *mcp.Server, opts MCPHTTPOptions) http.Handler {
	mux := http.NewServeMux()
	server := func(*http.Request) *mcp.Server { return srv }
	// One URL for both revisions (mcprevision.go): sessions for clients of
	// 2025-11-25 and before, none for 2026-07-28. Both serve the same
	// server, so a tool call is the same call through either.
	var h http.Handler = revisionRouter(
		mcp.NewStreamableHTTPHandler(server, nil),
		// A stateless request is answered with one JSON body (no event
		// stream): nothing of it outlives the request, and a plain HTTP
		// client (curl, docs/gateway.md) reads it as it is.
		mcp.NewStreamableHTTPHandler(server, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}),
	)
	if g.ids.mode == IdentityJournal {
		meta := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
			Resource: opts.Resource, AuthorizationServers: opts.AuthorizationServers,
			BearerMethodsSupported: []string{"header"}, ResourceName: "opjournal gateway (MCP)",
		})
		mux.Handle("GET "+metadataPath, meta)
		mux.Handle("GET "+metadataPath+"/mcp", meta)
		metaURL := ""
		if base, ok := strings.CutSuffix(opts.Resource, "/mcp"); ok {
			metaURL = base + metadataPath + "/mcp"
		}
		h = auth.RequireBearerToken(g.verifyMCPToken, &auth.RequireBearerTokenOptions{
			ResourceMetadataURL: metaURL, AllowMissingExpiration: true,
		})(h)
	}
	mux.Handle("/mcp", h)
	return mux
}

// verifyMCPToken is the MCP SDK's TokenVerifier: the journal says who the
// token's principal is. The principal id is the session's user, so a
// refreshed token continues the session and another caller cannot.
func (g *Gateway) verifyMCPToken(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	c, err := g.ids.identify(ctx, "Bearer "+token)
	switch {
	case err == nil:
	case errors.Is(err, errBadCredential), errors.Is(err, errNoCredential), errors.Is(err, errNotAnAgent):
		return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
	case errors.Is(err, errJournalNoAuth):
		g.log.Error("misconfigured", "err", err)
		return nil, errors.New("the gateway is misconfigured (see its log)")
	default:
		g.log.Warn("journal unavailable", "door", "mcp", "err", err)
		return nil, errors.New("the journal that authenticates callers cannot be reached; retry")
	}
	// No Expiration: the journal checks the credential on every call
	// made with it, and the identity is asked again after a short while.
	return &auth.TokenInfo{UserID: c.principal, Extra: map[string]any{callerExtra: c}}, nil
}

// callerExtra is the TokenInfo.Extra member holding the caller.
const callerExtra = "opjournal.caller"

// mcpCaller returns the caller of a tool call, or the tool error that
// refuses it.
func (g *Gateway) mcpCaller(req *mcp.CallToolRequest) (*caller, *mcp.CallToolResult) {
	if req.Extra == nil || req.Extra.Header == nil {
		return g.ids.stdio, nil // stdio: the one local agent
	}
	if g.ids.mode == IdentityAnonymous {
		return g.ids.anon, nil
	}
	if ti := req.Extra.TokenInfo; ti != nil {
		if c, ok := ti.Extra[callerExtra].(*caller); ok {
			if !g.ids.allow(c) {
				g.log.Warn("caller over its rate limit", "door", "mcp", "principal", c.principal)
				return nil, toolError("Too many calls from this caller: the gateway's rate limit is %g a second. Nothing was sent. Wait a second, then call again with exactly the same arguments.", float64(g.ids.rps))
			}
			return c, nil
		}
	}
	// Served without MCPHandler's authentication: refuse rather than
	// share a scope.
	return nil, toolError("The gateway cannot tell who is calling (its MCP door is served without authentication). Nothing was sent.")
}
