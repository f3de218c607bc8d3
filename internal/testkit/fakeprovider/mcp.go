package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// NewMCPServer returns an MCP server whose tools call the provider's HTTP
// API at baseURL, so that the provider's faults apply to tool calls too:
//
//	create_payment {order_id, amount_minor, currency, idempotency_key?}  → POST /payments
//	send_email     {to, subject?, reference?}                            → POST /emails
//
// A definite refusal of the provider (a 4xx) is a tool error (isError);
// anything unclear (a 5xx, a timeout, a dropped connection) is a protocol
// error, as a real tool server would report it. Effects are counted by
// the provider as usual (the payment's idempotency_key, the email's
// reference).
func NewMCPServer(baseURL string, hc *http.Client) *mcp.Server {
	if hc == nil {
		hc = http.DefaultClient
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "opjournal-fakeprovider", Version: "1"}, nil)
	str := map[string]any{"type": "string"}
	srv.AddTool(&mcp.Tool{
		Name:        "create_payment",
		Description: "Charge a customer (the test provider's POST /payments). Not idempotent unless idempotency_key is given.",
		InputSchema: map[string]any{"type": "object", "required": []string{"order_id", "amount_minor", "currency"},
			"properties": map[string]any{"order_id": str, "amount_minor": map[string]any{"type": "integer"}, "currency": str, "idempotency_key": str}},
	}, toolCall(hc, baseURL+"/payments", "idempotency_key"))
	srv.AddTool(&mcp.Tool{
		Name:        "send_email",
		Description: "Send an email (the test provider's POST /emails). Never idempotent; reference only labels it.",
		InputSchema: map[string]any{"type": "object", "required": []string{"to"},
			"properties": map[string]any{"to": str, "subject": str, "reference": str}},
	}, toolCall(hc, baseURL+"/emails", ""))
	return srv
}

// toolCall POSTs the arguments to url; keyArg, if set, goes out as the
// Idempotency-Key header instead of in the body.
func toolCall(hc *http.Client, url, keyArg string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := map[string]any{}
		if len(req.Params.Arguments) > 0 {
			dec := json.NewDecoder(bytes.NewReader(req.Params.Arguments))
			dec.UseNumber()
			if err := dec.Decode(&args); err != nil {
				return errorResult("the arguments must be a JSON object"), nil
			}
		}
		key := ""
		if keyArg != "" {
			key, _ = args[keyArg].(string)
			delete(args, keyArg)
		}
		body, _ := json.Marshal(args)
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		hreq.Header.Set("Content-Type", "application/json")
		if key != "" {
			hreq.Header.Set("Idempotency-Key", key)
		}
		res, err := hc.Do(hreq)
		if err != nil {
			return nil, fmt.Errorf("the provider did not answer: %w", err)
		}
		defer res.Body.Close()
		rb, err := io.ReadAll(io.LimitReader(res.Body, MaxBodyBytes))
		if err != nil {
			return nil, fmt.Errorf("the provider's answer was lost: %w", err)
		}
		switch {
		case res.StatusCode >= 500:
			return nil, fmt.Errorf("the provider answered %d", res.StatusCode)
		case res.StatusCode >= 400:
			return errorResult(fmt.Sprintf("the provider refused the request (HTTP %d): %s", res.StatusCode, strings.TrimSpace(string(rb)))), nil
		}
		var rec map[string]any
		if err := json.Unmarshal(rb, &rec); err != nil {
			return nil, fmt.Errorf("the provider's answer is not JSON")
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%v %v %v", rec["object"], rec["id"], rec["status"])}},
			StructuredContent: rec,
		}, nil
	}
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}
