package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/protocol/policy"
)

// The MCP front door: an MCP server whose tools are those of one or more
// upstream MCP servers. tools/list passes through. A tools/call of a tool
// an action's policy protects (gateway.mcp) becomes an operation whose key
// comes from the policy's key fields of the arguments and the caller's
// scope: sent once, recorded, and answered from the journal on every
// retry. A duplicate in flight, an unknown outcome, a conflicting call or
// one a budget refuses is answered with a tool error (isError) whose text
// tells the model what happened and that it must not rephrase the call to
// get around it.
// Other tools pass straight through.

// Implementation names the gateway to MCP peers.
var Implementation = &mcp.Implementation{Name: "opjournal-gateway", Title: "opjournal gateway", Version: "1"}

// MetaKey is the _meta member of a protected tool's result that says what
// the journal did: {"operation_key": ..., "replayed": true|false}.
const MetaKey = "opjournal/operation"

// toolRoute is one protected tool.
type toolRoute struct {
	action string
	cfg    *policy.GatewayMCP
}

// MCPServer returns an MCP server offering every tool of the upstream
// sessions (listed now), the protected ones journaled (MCPMiddleware).
// Two upstreams offering the same tool name are an error, and so is a
// protected tool no upstream offers.
func (g *Gateway) MCPServer(ctx context.Context, upstreams ...*mcp.ClientSession) (*mcp.Server, error) {
	srv := mcp.NewServer(Implementation, &mcp.ServerOptions{Logger: g.log.With("door", "mcp")})
	seen := map[string]bool{}
	for _, cs := range upstreams {
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return nil, fmt.Errorf("gateway: list the upstream's tools: %w", err)
			}
			if seen[tool.Name] {
				return nil, fmt.Errorf("gateway: two upstream MCP servers offer a tool named %q", tool.Name)
			}
			seen[tool.Name] = true
			t := *tool
			if t.InputSchema == nil {
				t.InputSchema = map[string]any{"type": "object"}
			}
			if route := g.tools[t.Name]; route != nil {
				if arg := route.cfg.ForwardKeyArgument; arg != "" {
					if _, err := hideArgument(t.InputSchema, arg); err != nil {
						return nil, fmt.Errorf("gateway: the input schema of the tool %q: %w", t.Name, err)
					}
					t.Description = hideInDescription(t.Description, arg)
				}
				srv.AddTool(&t, upstreamTool(cs))
			} else {
				srv.AddTool(&t, passTool(cs))
			}
		}
	}
	for name := range g.tools {
		if !seen[name] {
			return nil, fmt.Errorf("gateway: the policy protects the MCP tool %q, which no upstream offers", name)
		}
	}
	srv.AddReceivingMiddleware(g.MCPMiddleware())
	return srv, nil
}

// MCPMiddleware protects the tools of an MCP server written with the MCP
// Go SDK, in its own process: a tools/call of a tool the policy protects
// (an action's gateway.mcp) runs through the journal exactly as at the
// gateway's MCP door (this is the door's own code): its key from the key
// fields of the arguments and the caller's scope, the tool's own handler
// called at most once per key, its result recorded and replayed to every
// retry, and the texts the model reads for an unknown outcome, a call in
// progress or a conflicting one. tools/list hides the argument the
// journal fills (forward_key_argument), and initialize and
// server/discover announce the journal extension (JournalExtension).
// Clients of the sessionful (2025-11-25) and the stateless (2026-07-28)
// revisions get the same calls and keys, each result framed for its
// client's revision. Other methods and tools pass through.
//
//	g, _ := gateway.New(gateway.Config{Journal: journal, Policy: pol, OwnToken: token})
//	srv := mcp.NewServer(impl, nil)
//	mcp.AddTool(srv, &mcp.Tool{Name: "create_payment"}, createPayment)
//	srv.AddReceivingMiddleware(g.MCPMiddleware())
//	// over stdio: srv.Run(ctx, &mcp.StdioTransport{}) (the stdio scope, the own token);
//	// over HTTP: http.Handle("/", g.MCPHandler(srv, opts)) (each caller's own credential)
func (g *Gateway) MCPMiddleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		next = g.announceMiddleware(next)
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				res, err := next(ctx, method, req)
				if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
					g.hideFilledArguments(lr)
				}
				return res, err
			case "tools/call":
				cr, ok := req.(*mcp.CallToolRequest)
				if !ok || cr.Params == nil || g.tools[cr.Params.Name] == nil {
					break
				}
				call := func(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
					raw, err := json.Marshal(p.Arguments)
					if err != nil {
						return nil, err
					}
					q := *cr
					q.Params = &mcp.CallToolParamsRaw{Name: p.Name, Arguments: raw}
					res, err := next(ctx, method, &q)
					if err != nil {
						return nil, err
					}
					tr, ok := res.(*mcp.CallToolResult)
					if !ok {
						return nil, fmt.Errorf("the tool answered a %T", res)
					}
					return tr, nil
				}
				res, err := g.protectedTool(g.tools[cr.Params.Name], call)(ctx, cr)
				if err != nil {
					return nil, err
				}
				return framed(res, statelessSession(cr.Session)), nil
			}
			return next(ctx, method, req)
		}
	}
}

// hideFilledArguments removes from a tools/list answer the arguments the
// journal fills.
func (g *Gateway) hideFilledArguments(lr *mcp.ListToolsResult) {
	for i, t := range lr.Tools {
		route := g.tools[t.Name]
		if route == nil || route.cfg.ForwardKeyArgument == "" || t.InputSchema == nil {
			continue
		}
		schema, err := hideArgument(t.InputSchema, route.cfg.ForwardKeyArgument)
		if err != nil {
			continue // MCPServer checked the gateway's upstreams; a server's own schema is its own
		}
		c := *t
		c.InputSchema = schema
		c.Description = hideInDescription(c.Description, route.cfg.ForwardKeyArgument)
		lr.Tools[i] = &c
	}
}

// upstreamCall calls a tool's real handler (an upstream server's, or the
// server's own under MCPMiddleware).
type upstreamCall func(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error)

// upstreamTool calls the upstream's tool with the arguments alone (the
// journal's call is a new request, not the client's: no _meta of it).
func upstreamTool(cs *mcp.ClientSession) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return callTool(ctx, cs, &mcp.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments})
	}
}

// hideInDescription drops from a tool's description the sentences that
// name the argument the gateway fills: the schema no longer shows it, and
// a description that still invites the model to send one ("not idempotent
// unless idempotency_key is given") would make it send a value the
// gateway drops, or distrust a retry it must make with the same
// arguments.
func hideInDescription(desc, arg string) string {
	if arg == "" || !namesWord(desc, arg) {
		return desc
	}
	var kept []string
	rest := desc
	for rest != "" {
		// A sentence ends at ". ", "! ", "? " or a new line, or with the text.
		end := len(rest)
		for i := 0; i < len(rest); i++ {
			if rest[i] == '\n' || (strings.ContainsRune(".!?", rune(rest[i])) && (i+1 == len(rest) || rest[i+1] == ' ' || rest[i+1] == '\n')) {
				end = i + 1
				for end < len(rest) && rest[end] == ' ' {
					end++ // the space after it goes with it
				}
				break
			}
		}
		sentence := rest[:end]
		rest = rest[end:]
		if !namesWord(sentence, arg) {
			kept = append(kept, sentence)
		}
	}
	return strings.TrimSpace(strings.Join(kept, ""))
}

// namesWord reports whether s holds word as a whole name: "key" is not
// named by "monkey" or "key_id".
func namesWord(s, word string) bool {
	isName := func(c byte) bool {
		return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; ; {
		j := strings.Index(s[i:], word)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(word)
		if (start == 0 || !isName(s[start-1])) && (end == len(s) || !isName(s[end])) {
			return true
		}
		i = start + 1
	}
}

// hideArgument returns a copy of a tool's input schema without the
// argument the gateway fills (forward_key_argument), in its properties and
// required: a model that sees it writes something there, and whatever it
// writes would be hashed into the call, so that a genuine retry with
// another value looked like a conflicting call.
func hideArgument(schema any, arg string) (any, error) {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, errors.New("is not a JSON object")
	}
	if props, ok := m["properties"].(map[string]any); ok {
		delete(props, arg)
	}
	if req, ok := m["required"].([]any); ok {
		kept := []any{}
		for _, r := range req {
			if r != arg {
				kept = append(kept, r)
			}
		}
		m["required"] = kept
	}
	return m, nil
}

// passTool forwards a call unchanged.
func passTool(cs *mcp.ClientSession) mcp.ToolHandler {
	return traceTool("", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return callTool(ctx, cs, &mcp.CallToolParams{Meta: forwardedMeta(req.Params.Meta), Name: req.Params.Name, Arguments: req.Params.Arguments})
	})
}

// forwardedMeta is the client's _meta without the members the protocol
// reserves (io.modelcontextprotocol/…): in the stateless revision they
// describe the client's own connection to the gateway (its protocol
// version, info and capabilities), not the gateway's session with the
// upstream, which refuses a version it does not speak on that session.
func forwardedMeta(m mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range m {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			continue
		}
		if out == nil {
			out = mcp.Meta{}
		}
		out[k] = v
	}
	return out
}

// protectedTool journals each call of a protected tool; call is the
// tool's real handler.
func (g *Gateway) protectedTool(route *toolRoute, call upstreamCall) mcp.ToolHandler {
	cfg := route.cfg
	return traceTool(route.action, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := map[string]any{}
		if len(req.Params.Arguments) > 0 {
			var ok bool
			if args, ok = decodeObject(req.Params.Arguments); !ok {
				return toolError("The arguments of %s must be a JSON object. Nothing was sent.", req.Params.Name), nil
			}
		}
		c, refusal := g.mcpCaller(req)
		if refusal != nil {
			return refusal, nil
		}
		// The gateway fills this argument with the operation key; a value
		// the model sent (the schema hides it) is neither hashed nor sent.
		delete(args, cfg.ForwardKeyArgument)
		ids := keyFieldNames(cfg.KeyFields)
		scope := c.scope
		key, missing := fieldsKey("mcp", route.action, scope, cfg.KeyFields, args)
		if missing != "" {
			return toolError("The call of %s needs the argument %q: its identifying arguments (%s) name this action, so that a retry is recognised. Nothing was sent.",
				req.Params.Name, missing, ids), nil
		}
		payload, err := pick(args)
		if err != nil {
			return toolError("The arguments of %s do not encode as JSON. Nothing was sent.", req.Params.Name), nil
		}
		log := g.log.With("door", "mcp", "tool", req.Params.Name, "action", route.action, "key", key)
		g.awaitRecord(ctx, key)
		var fresh *mcp.CallToolResult
		early := make(chan *mcp.CallToolResult, 1)
		out, answered, err := execute(withCaller(ctx, c), g, client.Op{Key: key, Action: route.action, Payload: json.RawMessage(payload), Refs: refsOf(cfg.KeyFields, args)}, early,
			func(ctx context.Context, a client.Attempt) (client.Effect, error) {
				callArgs := args
				if cfg.ForwardKeyArgument != "" {
					callArgs = make(map[string]any, len(args)+1)
					for k, v := range args {
						callArgs[k] = v
					}
					callArgs[cfg.ForwardKeyArgument] = a.Key
				}
				res, err := call(ctx, &mcp.CallToolParams{Name: req.Params.Name, Arguments: callArgs})
				if err != nil {
					return client.Effect{}, &client.UnknownError{Code: "tool_call_failed", Err: err}
				}
				fresh = res
				stored, serr := storedResult(res)
				if res.IsError {
					text := resultText(res)
					if !cfg.ToolErrorsFinal { // isError may be an API failure behind the tool

						return client.Effect{}, &client.UnknownError{Code: "tool_error", Err: errors.New(text)}
					}
					early <- withMeta(res, key, false, OutcomeFailedFinal) // a definite refusal: the model may have it now
					if serr != nil {
						return client.Effect{}, client.Rejected("tool_error", errors.New(text))
					}
					return client.Effect{}, client.RejectedWith("tool_error", stored, errors.New(text))
				}
				early <- withMeta(res, key, false, OutcomeSucceeded) // the effect happened: the model may have it now
				eff := client.Effect{ExternalID: structuredID(res, cfg.ExternalID)}
				if serr == nil {
					eff.Result = stored
				}
				return eff, nil
			})
		if answered != nil {
			log.Info("called")
			return *answered, nil
		}
		var nr *client.NotRecordedError
		if err != nil && out.Kind != client.Succeeded && !errors.As(err, &nr) && g.ids.refusedByJournal(c, err) {
			// Revoked since the gateway last asked: the session's next
			// request is refused with 401 (verifyMCPToken asks again).
			log.Warn("the journal refused the caller's credential; its cached identity is dropped")
			return toolError("The credential of this session is no longer valid (the journal refused it). Nothing was sent."), nil
		}
		return g.toolAnswer(log, req.Params.Name, ids, key, out, err, fresh), nil
	})
}

// keyFieldNames lists a tool's key fields for the texts the model reads
// ("order_id", "to, subject"): every refusal names what identifies the
// call, so the model knows what must stay the same on a retry and what a
// separate action must change.
func keyFieldNames(fields []string) string { return strings.Join(fields, ", ") }

// toolAnswer turns the journal's outcome into the tool's result; ids
// names the tool's identifying arguments (keyFieldNames).
func (g *Gateway) toolAnswer(log *slog.Logger, tool, ids, key string, out client.Outcome, err error, fresh *mcp.CallToolResult) *mcp.CallToolResult {
	var nr *client.NotRecordedError
	switch {
	case errors.As(err, &nr):
		log.Error("the outcome was not recorded", "err", err)
		if fresh != nil && !fresh.IsError {
			return withMeta(fresh, key, false, OutcomeSucceeded)
		}
		return withMeta(toolError(unknownText, tool, ids), key, false, OutcomeUnknown)
	case err != nil && out.Kind != client.Succeeded:
		switch client.CodeOf(err) {
		case opjournal.CodeInvalidArgument, opjournal.CodeTooLarge:
			var oe *opjournal.Error
			msg := "the journal refused the arguments"
			if errors.As(err, &oe) {
				msg = strings.TrimSpace(oe.Field + ": " + oe.Message)
			}
			return toolError("The call of %s was refused before anything was sent: %s. Correct the arguments and call again.", tool, msg)
		case opjournal.CodeUnavailable, opjournal.CodeRateLimited:
			log.Warn("journal unavailable", "err", err)
			return toolError("The journal that protects %s cannot be reached, so nothing was sent. Call again in a few seconds with exactly the same arguments.", tool)
		}
		log.Error("the journal refused the gateway", "code", client.CodeOf(err), "err", err)
		return toolError("The gateway could not record the call of %s (it is misconfigured; see its log). Nothing was sent.", tool)
	}
	switch out.Kind {
	case client.Succeeded, client.FailedFinal:
		if !out.Replayed && fresh != nil {
			log.Info("called", "outcome", out.Kind.String())
			return withMeta(fresh, key, false, outcomeOf(out.Kind))
		}
		if res, ok := replayedResult(out.Result); ok {
			log.Info("replayed", "outcome", out.Kind.String())
			return withMeta(res, key, true, outcomeOf(out.Kind))
		}
		if rejectedByApproval(out) {
			log.Info("rejected by approval", "code", out.ErrorCode)
			return withMeta(toolError(approvalRejectedText, tool, ids, out.ErrorCode), key, true, OutcomeApprovalRejected)
		}
		if out.Kind == client.FailedFinal {
			return withMeta(toolError("This call of %s was already made and the tool refused it (%s). It was not called again; the answer will not change.", tool, out.ErrorCode), key, true, OutcomeFailedFinal)
		}
		settled := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
			Text: fmt.Sprintf("This call of %s was already made and it succeeded (external id %q). It was not called again.", tool, out.ExternalID)}}}
		// The provider's resource, as the reconciler found it, is what the
		// tool's own result would have carried.
		if res := settledResource(out.Result); res != nil {
			var sc map[string]any
			if json.Unmarshal(res, &sc) == nil {
				settled.StructuredContent = sc
			}
		}
		return withMeta(settled, key, true, OutcomeSucceeded)
	case client.InProgressElsewhere:
		return withMeta(toolError("This call of %s (the same identifying arguments: %s) is already in progress (started by an earlier request) and was NOT sent again. "+
			"Wait about %d seconds, then call again with exactly the same arguments to get its result. "+
			"Do not change or rephrase the arguments to get around this: that would do it twice.", tool, ids, int(min(max(out.RetryAfter, time.Second), maxInProgressRetry)/time.Second)), key, false, OutcomeInProgress)
	case client.VerificationRequired:
		log.Info("outcome unknown", "code", out.ErrorCode, "needs_review", out.NeedsReview)
		return withMeta(toolError(unknownText, tool, ids), key, false, OutcomeUnknown)
	case client.AwaitingApproval:
		log.Info("held for approval", "retry_after", out.RetryAfter)
		res := withMeta(toolError(awaitingApprovalText, tool, ids), key, false, OutcomeAwaitingApproval)
		// What a client's UI shows beside the text: the request a person
		// must approve, by its hash (never its arguments).
		m := res.Meta[MetaKey].(map[string]any)
		m["awaiting_approval"], m["request_hash"] = true, out.Operation.GetRequestHash()
		return res
	case client.BudgetExceeded:
		return budgetToolError(log, tool, key, out)
	case client.Conflict:
		return withMeta(toolError("A call of %s with the same identifying arguments (%s) but different other arguments was already made, so this one is refused and nothing was sent. "+
			"Do not retry it with rephrased arguments. If this really is a new, separate action, it needs its own %s; if not, the earlier call stands.", tool, ids, ids), key, false, OutcomeConflict)
	}
	return toolError("The gateway got an unexpected answer for %s; nothing was sent.", tool)
}

// outcomeOf names an outcome with a result of its own (settled, or
// refused by a budget) for a result's _meta.
func outcomeOf(k client.OutcomeKind) string {
	switch k {
	case client.FailedFinal:
		return OutcomeFailedFinal
	case client.BudgetExceeded:
		return OutcomeBudgetExceeded
	}
	return OutcomeSucceeded
}

// unknownText tells a model what an unknown outcome means.
const unknownText = "The outcome of this call of %s is UNKNOWN: the tool did not give a definite answer (a timeout or a lost answer), so it may or may not have happened. " +
	"It was NOT sent again. Do not call it again with changed or rephrased arguments to get around this: that could do it twice. " +
	"The journal is verifying what happened (or a person will decide). Call again later with exactly the same arguments (the identifying ones: %s) to get the settled result, and tell the user the outcome is pending."

// toolError is a tool error result with the text.
func toolError(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// withMeta marks a result with what the journal did: its key, whether
// the result is replayed, and the outcome (Outcome*) a client can act on
// without reading the text written for the model.
func withMeta(res *mcp.CallToolResult, key string, replayed bool, outcome string) *mcp.CallToolResult {
	c := *res
	m := mcp.Meta{}
	for k, v := range res.Meta {
		m[k] = v
	}
	m[MetaKey] = map[string]any{"operation_key": key, "replayed": replayed, "outcome": outcome}
	c.Meta = m
	return &c
}

// storedResult is a tool result as the journal stores it:
// {"tool_result": CallToolResult}, so that a replay tells it from a result
// the reconciler or a person recorded.
//
// The journal refuses numbers beyond ±(2^53−1) (they would be rounded by
// some JSON implementation on the way), and the SDK then records the
// effect without its result: the replay lost the tool's content and
// structuredContent. Such numbers, common in structured results (ids,
// nanosecond timestamps, 1e300), are stored as their JSON text, their
// places listed in "numbers_as_text" (JSON pointers into tool_result), and
// put back as numbers by replayedResult. The rest stays JSON the journal
// can redact member by member.
func storedResult(res *mcp.CallToolResult) (json.RawMessage, error) {
	c := *res
	c.Meta = nil
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	if m, ok := tree.(map[string]any); ok {
		// How the answer was framed for its client's revision, not the
		// tool's answer: a replay is framed for the retry's client (framed).
		delete(m, "resultType")
	}
	var texts []string
	tree = numbersAsText(tree, "", &texts)
	doc := map[string]any{"tool_result": tree}
	if len(texts) > 0 {
		doc["numbers_as_text"] = texts
	}
	return json.Marshal(doc)
}

// replayedResult decodes a stored tool result (storedResult); ok is false
// when raw holds none (a result the reconciler or a person recorded).
func replayedResult(raw json.RawMessage) (res *mcp.CallToolResult, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var stored struct {
		ToolResult    any      `json:"tool_result"`
		NumbersAsText []string `json:"numbers_as_text"`
	}
	if raw == nil || dec.Decode(&stored) != nil || stored.ToolResult == nil {
		return nil, false
	}
	for _, ptr := range stored.NumbersAsText {
		restoreNumber(stored.ToolResult, ptr)
	}
	b, err := json.Marshal(stored.ToolResult)
	if err != nil {
		return nil, false
	}
	res = &mcp.CallToolResult{}
	if json.Unmarshal(b, res) != nil {
		return nil, false
	}
	return res, true
}

// maxSafeInteger is the journal's bound on numbers, 2^53−1.
const maxSafeInteger = 1<<53 - 1

// safeNumber reports whether the journal stores n as it is.
func safeNumber(n json.Number) bool {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i <= maxSafeInteger && i >= -maxSafeInteger
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return err == nil && f <= maxSafeInteger && f >= -maxSafeInteger
}

// numbersAsText replaces the numbers of v the journal would refuse by
// their text, appending their JSON pointers (below ptr) to texts.
func numbersAsText(v any, ptr string, texts *[]string) any {
	switch x := v.(type) {
	case json.Number:
		if !safeNumber(x) {
			*texts = append(*texts, ptr)
			return string(x)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = numbersAsText(e, ptr+"/"+pointerEscaper.Replace(k), texts)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersAsText(e, ptr+"/"+strconv.Itoa(i), texts)
		}
	}
	return v
}

var (
	pointerEscaper   = strings.NewReplacer("~", "~0", "/", "~1")
	pointerUnescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

// restoreNumber turns the text at ptr in v back into the number it was.
// A place that holds no number's text any more (redacted, say) is left.
func restoreNumber(v any, ptr string) {
	if !strings.HasPrefix(ptr, "/") {
		return
	}
	tokens := strings.Split(ptr[1:], "/")
	for i, tok := range tokens {
		tok = pointerUnescaper.Replace(tok)
		last := i == len(tokens)-1
		switch x := v.(type) {
		case map[string]any:
			if last {
				if s, ok := x[tok].(string); ok && json.Valid([]byte(s)) && isNumberText(s) {
					x[tok] = json.Number(s)
				}
				return
			}
			v = x[tok]
		case []any:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 || n >= len(x) {
				return
			}
			if last {
				if s, ok := x[n].(string); ok && json.Valid([]byte(s)) && isNumberText(s) {
					x[n] = json.Number(s)
				}
				return
			}
			v = x[n]
		default:
			return
		}
	}
}

// isNumberText reports whether s (valid JSON) is a number.
func isNumberText(s string) bool {
	return s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9')
}

// resultText joins a result's text content, for the error of a refusal.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return shorten(strings.Join(parts, " "), 200)
}

// structuredID reads the provider's id at ptr in structuredContent.
func structuredID(res *mcp.CallToolResult, ptr string) string {
	if ptr == "" || res.StructuredContent == nil {
		return ""
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return ""
	}
	return externalID(b, ptr)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
