package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// One MCP door, two revisions of the protocol. A client of 2025-11-25 (or
// older) opens a session with initialize and names it by Mcp-Session-Id;
// a client of 2026-07-28 has no session at all: every request carries
// its protocol version, client info and capabilities in _meta, and the
// MCP-Protocol-Version header says which revision it speaks. The journal
// needs neither: the caller comes from the bearer token of each request
// and the operation key from the tool's key fields and the caller's
// scope, so a call is the same call on any session, on none, and across
// revisions.

// StatelessProtocolVersion is the first MCP revision without sessions
// (2026-07-28): requests of it and later go to the door's stateless
// handler.
const StatelessProtocolVersion = "2026-07-28"

// JournalExtension is the name under which the MCP door announces, in its
// capabilities' extensions (and, for clients of revisions before
// extensions, in capabilities.experimental), what the journal does with
// a tool call: docs/gateway.md, "The journal extension".
const JournalExtension = "io.opjournal/journal"

// The outcomes a protected tool's result names in
// _meta["opjournal/operation"].outcome, so that a client can act on them
// without reading the text written for the model.
const (
	// OutcomeSucceeded: the tool ran and succeeded (now, or earlier and replayed).
	OutcomeSucceeded = "succeeded"
	// OutcomeFailedFinal: the tool definitely refused the call; replayed as is.
	OutcomeFailedFinal = "failed_final"
	// OutcomeUnknown: the call may or may not have happened; it is not
	// sent again, the reconciler (or a person) settles it.
	OutcomeUnknown = "unknown"
	// OutcomeInProgress: the same call is running (started by an earlier
	// request); this one was not sent.
	OutcomeInProgress = "in_progress"
	// OutcomeConflict: the same key fields with other arguments were
	// already called; this one was refused and not sent.
	OutcomeConflict = "conflict"
	// OutcomeAwaitingApproval: a person must approve this exact request
	// (by its request_hash) before it is sent.
	OutcomeAwaitingApproval = "awaiting_approval"
	// OutcomeApprovalRejected: a person rejected the request (or the
	// approval timed out); it was never sent.
	OutcomeApprovalRejected = "approval_rejected"
	// OutcomeBudgetExceeded: the call would pass a budget of its action
	// (named in the _meta's budget); it was not sent, nor registered.
	OutcomeBudgetExceeded = "budget_exceeded"
)

// isStatelessVersion reports whether an MCP-Protocol-Version header names
// a revision without sessions. Revisions are dates (YYYY-MM-DD), ordered
// as strings; anything else is left to the session handler, which refuses
// a version it does not know with 400.
func isStatelessVersion(v string) bool {
	if len(v) != len("2006-01-02") || v[4] != '-' || v[7] != '-' {
		return false
	}
	for i, c := range []byte(v) {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	return v >= StatelessProtocolVersion
}

// revisionRouter sends a request without a session that names a
// stateless revision to the stateless handler, everything else (an
// initialize, a request on a session, an older or unnamed revision) to
// the session handler. A request naming a session is never stateless,
// whatever its header says: the session handler checks the session is
// the caller's.
func revisionRouter(sessions, stateless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") == "" && isStatelessVersion(r.Header.Get("MCP-Protocol-Version")) {
			stateless.ServeHTTP(w, r)
			return
		}
		sessions.ServeHTTP(w, r)
	})
}

// journalExtension describes, for MCP clients, what the journal does
// with a call of each protected tool: what its key is made of, which
// argument the gateway fills, and how each outcome comes back. Clients
// read it from initialize (2025-11-25) or server/discover (2026-07-28).
func (g *Gateway) journalExtension() map[string]any {
	names := make([]string, 0, len(g.tools))
	for name := range g.tools {
		names = append(names, name)
	}
	sort.Strings(names)
	tools := map[string]any{}
	for _, name := range names {
		r := g.tools[name]
		t := map[string]any{"action": r.action, "keyFields": append([]string{}, r.cfg.KeyFields...)}
		if r.cfg.ForwardKeyArgument != "" {
			t["filledArgument"] = r.cfg.ForwardKeyArgument
		}
		if r.cfg.ToolErrorsFinal {
			t["toolErrors"] = "failed_final"
		} else {
			t["toolErrors"] = "unknown"
		}
		tools[name] = t
	}
	return map[string]any{
		"version": "1",
		"spec":    "https://github.com/opjournal/opjournal/blob/main/docs/gateway.md#the-journal-extension-ioopjournaljournal",
		"key": map[string]any{
			"format": "mcp:ACTION:SCOPE:f:HASH",
			"scope":  "the caller's principal, from the bearer token of each request (anon with --anonymous; the stdio scope over stdio)",
			"hash":   "of the tool's keyFields arguments, RFC 8785 canonical JSON",
			"never":  []string{"session id", "JSON-RPC id", "protocol revision", "the other arguments", "the filled argument"},
		},
		"resultMeta": MetaKey,
		"outcomes": map[string]any{
			OutcomeSucceeded:        map[string]any{"isError": false, "sent": "once; every retry with the same key fields gets the recorded result, replayed: true"},
			OutcomeFailedFinal:      map[string]any{"isError": true, "sent": "once; the refusal is replayed"},
			OutcomeUnknown:          map[string]any{"isError": true, "sent": "maybe; never again", "retry": "later, with the same arguments, for the settled result"},
			OutcomeInProgress:       map[string]any{"isError": true, "sent": "not by this request", "retry": "after a few seconds, with the same arguments"},
			OutcomeConflict:         map[string]any{"isError": true, "sent": "no", "retry": "never with these key fields; a new action needs new key fields"},
			OutcomeAwaitingApproval: map[string]any{"isError": true, "sent": "no, until a person approves request_hash", "retry": "later, with the same arguments", "meta": []string{"awaiting_approval", "request_hash"}},
			OutcomeApprovalRejected: map[string]any{"isError": true, "sent": "never"},
			OutcomeBudgetExceeded: map[string]any{"isError": true, "sent": "no, nor registered", "retry": "never split or rephrased; the same call after retry_after_seconds, when the budget names one",
				"meta": []string{"budget"}},
		},
		"tools": tools,
	}
}

// announceJournal adds the journal extension to the capabilities of an
// initialize or server/discover result: in extensions (the framework of
// 2026-07-28) and in experimental, where clients of 2025-11-25 look for
// what a server does beyond the specification.
func (g *Gateway) announceJournal(res mcp.Result) {
	var caps **mcp.ServerCapabilities
	switch r := res.(type) {
	case *mcp.InitializeResult:
		caps = &r.Capabilities
	case *mcp.DiscoverResult:
		caps = &r.Capabilities
	default:
		return
	}
	c := &mcp.ServerCapabilities{}
	if *caps != nil {
		cp := **caps
		c = &cp
	}
	ext := g.journalExtension()
	c.Extensions = maps.Clone(c.Extensions)
	c.AddExtension(JournalExtension, ext)
	c.Experimental = maps.Clone(c.Experimental)
	if c.Experimental == nil {
		c.Experimental = map[string]any{}
	}
	c.Experimental[JournalExtension] = ext
	*caps = c
}

// announceMiddleware announces the journal extension to every client,
// whichever revision it speaks.
func (g *Gateway) announceMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err == nil && (method == "initialize" || method == "server/discover") {
			g.announceJournal(res)
		}
		return res, err
	}
}

// statelessSession reports whether a request's client speaks a stateless
// revision (its _meta, or its initialize, named one).
func statelessSession(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && isStatelessVersion(p.ProtocolVersion)
}

// framed returns a protected tool's result as the client's revision
// frames it: 2026-07-28 requires every result to say resultType
// "complete" (a client of it refuses one without), earlier revisions
// know no such member. The SDK sets it only on what a tool handler
// returns; the door's own answers (an unknown outcome, a call in
// progress, a replay of a result recorded for a client of the other
// revision) are made here, so each is framed for the client asking now.
// The member is unexported in the SDK, hence the round trip through its
// JSON form.
func framed(res *mcp.CallToolResult, stateless bool) *mcp.CallToolResult {
	b, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil {
		return res
	}
	if stateless {
		m["resultType"] = json.RawMessage(`"complete"`)
	} else {
		delete(m, "resultType")
	}
	if b, err = json.Marshal(m); err != nil {
		return res
	}
	out := &mcp.CallToolResult{}
	if json.Unmarshal(b, out) != nil {
		return res
	}
	return out
}
