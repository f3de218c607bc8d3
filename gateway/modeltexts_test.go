package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/client"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The texts a model reads from the MCP door are shared with the
// TypeScript adapters through protocol/testdata/model_texts.json, and the keys of
// journaled agent tools through protocol/testdata/tool_keys.json. These tests keep
// both files true to the gateway: an adapter's model must read what the
// gateway's would, and derive the same key from the same arguments.

// modelTexts is protocol/testdata/model_texts.json.
type modelTexts struct {
	InProgressMaxSeconds int               `json:"in_progress_max_seconds"`
	Texts                map[string]string `json:"texts"`
}

func readModelTexts(t *testing.T) modelTexts {
	t.Helper()
	b, err := os.ReadFile("../protocol/testdata/model_texts.json")
	if err != nil {
		t.Fatal(err)
	}
	var m modelTexts
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var doc struct {
		Comment string `json:"comment"`
		modelTexts
	}
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("protocol/testdata/model_texts.json: %v", err)
	}
	m = doc.modelTexts
	return m
}

// render fills a template's placeholders; every placeholder must be
// one of vars, so a misspelt one fails here rather than reaching a model.
func render(t *testing.T, name, tmpl string, vars map[string]string) string {
	t.Helper()
	out := tmpl
	for k, v := range vars {
		out = strings.ReplaceAll(out, "{"+k+"}", v)
	}
	if i := strings.IndexByte(out, '{'); i >= 0 && strings.Contains(out[i:], "}") {
		t.Fatalf("template %s keeps a placeholder: %q", name, out[i:])
	}
	return out
}

func answerText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("content %+v", res.Content)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return tc.Text
}

// TestModelTextsMatchTheMCPDoor renders each shared template for samples
// and compares it with what toolAnswer tells the model for the outcome.
func TestModelTextsMatchTheMCPDoor(t *testing.T) {
	m := readModelTexts(t)
	if m.InProgressMaxSeconds != int(maxInProgressRetry/time.Second) {
		t.Errorf("in_progress_max_seconds %d, the gateway caps at %v", m.InProgressMaxSeconds, maxInProgressRetry)
	}
	g := &Gateway{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const key = "mcp:create_payment:p1:f:00"
	checked := map[string]bool{}
	for _, ids := range []string{"order_id", "to, subject"} {
		for _, tool := range []string{"create_payment", "send_email"} {
			base := map[string]string{"tool": tool, "ids": ids}
			with := func(k, v string) map[string]string {
				out := map[string]string{k: v}
				for bk, bv := range base {
					out[bk] = bv
				}
				return out
			}
			// budget is a budget_exceeded case: the refusal the journal
			// gives, and the words the model must read for it.
			budget := func(name string, used, limit int64, window, retry time.Duration, windowWords, retryWords string) (map[string]string, client.Outcome) {
				vars := map[string]string{"budget": name, "used": strconv.FormatInt(used, 10), "limit": strconv.FormatInt(limit, 10),
					"window": windowWords, "retry": retryWords}
				for bk, bv := range base {
					vars[bk] = bv
				}
				return vars, client.Outcome{Kind: client.BudgetExceeded, RetryAfter: retry,
					Budget: &client.BudgetRefusal{Budget: name, Action: "create_payment", Limit: limit, Used: used, Window: window, Message: "the journal's words"}}
			}
			bDay, oDay := budget("daily-payments", 5, 5, 24*time.Hour, 86400*time.Second, "24h", " It may fit again in about 86400 seconds.")
			bWeek, oWeek := budget("weekly-spend", 480000, 500000, 7*24*time.Hour, 90*time.Second+300*time.Millisecond, "7d", " It may fit again in about 91 seconds.")
			bTwoDays, oTwoDays := budget("b", 1, 1, 48*time.Hour, 1500*time.Millisecond, "48h", " It may fit again in about 2 seconds.")
			bHalfHour, oHalfHour := budget("per-half-hour", 3, 3, 30*time.Minute, 2*time.Second, "30m", " It may fit again in about 2 seconds.")
			bOdd, oOdd := budget("odd-window", 2, 2, 90*time.Second, 0, "1m30s", "")
			// The amount alone is over the limit: no hint, it never fits.
			bNever, oNever := budget("daily-spend", 0, 500000, 24*time.Hour, 0, "24h", "")
			cases := []struct {
				name string
				vars map[string]string
				out  client.Outcome
				err  error
			}{
				{"unknown", base, client.Outcome{Kind: client.VerificationRequired, ErrorCode: "timeout"}, nil},
				{"in_progress", with("seconds", "1"), client.Outcome{Kind: client.InProgressElsewhere}, nil},
				{"in_progress", with("seconds", "1"), client.Outcome{Kind: client.InProgressElsewhere, RetryAfter: 1500 * time.Millisecond}, nil},
				{"in_progress", with("seconds", "2"), client.Outcome{Kind: client.InProgressElsewhere, RetryAfter: 30 * time.Second}, nil},
				{"conflict", base, client.Outcome{Kind: client.Conflict}, nil},
				{"replayed_refused", with("error_code", "card_declined"), client.Outcome{Kind: client.FailedFinal, Replayed: true, ErrorCode: "card_declined"}, nil},
				{"replayed_succeeded", with("external_id_quoted", strconv.Quote(`pay_"1"`)), client.Outcome{Kind: client.Succeeded, Replayed: true, ExternalID: `pay_"1"`}, nil},
				{"refused_arguments", with("detail", "payload/amount_minor: must be an integer"), client.Outcome{},
					&opjournal.Error{Code: opjournal.CodeInvalidArgument, Field: "payload/amount_minor", Message: "must be an integer"}},
				{"refused_arguments", with("detail", ": payload is too large"), client.Outcome{},
					&opjournal.Error{Code: opjournal.CodeTooLarge, Message: "payload is too large"}},
				{"awaiting_approval", base, client.Outcome{Kind: client.AwaitingApproval, RetryAfter: 30 * time.Second}, nil},
				{"approval_rejected", with("error_code", "approval_rejected"), client.Outcome{Kind: client.FailedFinal, Replayed: true, ErrorCode: "approval_rejected"}, nil},
				{"approval_rejected", with("error_code", "approval_timeout"), client.Outcome{Kind: client.FailedFinal, Replayed: true, ErrorCode: "approval_timeout"}, nil},
				// A person's own error code: the operation needed an
				// approval and was never attempted.
				{"approval_rejected", with("error_code", "too_risky"), client.Outcome{Kind: client.FailedFinal, Replayed: true, ErrorCode: "too_risky",
					Operation: &pb.Operation{Status: pb.Status_STATUS_FAILED_FINAL, ErrorCode: "too_risky", Approval: &pb.Approval{Required: true}}}, nil},
				// The provider's refusal of an approved request is the
				// provider's, not a person's.
				{"replayed_refused", with("error_code", "card_declined"), client.Outcome{Kind: client.FailedFinal, Replayed: true, ErrorCode: "card_declined",
					Operation: &pb.Operation{Status: pb.Status_STATUS_FAILED_FINAL, ErrorCode: "card_declined", AttemptCount: 1, Approval: &pb.Approval{Required: true}}}, nil},
				{"budget_exceeded", bDay, oDay, nil},
				{"budget_exceeded", bWeek, oWeek, nil},
				{"budget_exceeded", bTwoDays, oTwoDays, nil},
				{"budget_exceeded", bHalfHour, oHalfHour, nil},
				{"budget_exceeded", bOdd, oOdd, nil},
				{"budget_exceeded", bNever, oNever, nil},
				{"journal_unavailable", base, client.Outcome{}, &opjournal.Error{Code: opjournal.CodeUnavailable, Message: "down"}},
				{"journal_unavailable", base, client.Outcome{}, &opjournal.Error{Code: opjournal.CodeRateLimited, Message: "slow down"}},
			}
			for _, c := range cases {
				tmpl, ok := m.Texts[c.name]
				if !ok {
					t.Fatalf("protocol/testdata/model_texts.json has no text %q", c.name)
				}
				checked[c.name] = true
				want := render(t, c.name, tmpl, c.vars)
				got := answerText(t, g.toolAnswer(log, tool, ids, key, c.out, c.err, nil))
				if got != want {
					t.Errorf("%s (%s, %s):\n gateway %q\n file    %q", c.name, tool, ids, got, want)
				}
			}
		}
	}
	checked["missing_argument"] = true // TestModelTextMissingArgument, through the door
	for name := range m.Texts {
		if !checked[name] {
			t.Errorf("protocol/testdata/model_texts.json: the text %q is checked against nothing", name)
		}
	}
}

// TestToolKeyVectors derives each key of protocol/testdata/tool_keys.json as the
// MCP door derives its keys, under the door name "tool".
func TestToolKeyVectors(t *testing.T) {
	b, err := os.ReadFile("../protocol/testdata/tool_keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []struct {
			Action    string          `json:"action"`
			Scope     string          `json:"scope"`
			KeyFields []string        `json:"key_fields"`
			Arguments json.RawMessage `json:"arguments"`
			Key       string          `json:"key"`
			Missing   string          `json:"missing"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for i, v := range doc.Vectors {
		obj, ok := decodeObject(v.Arguments)
		if !ok {
			t.Fatalf("vector %d: arguments are not an object", i)
		}
		key, missing := fieldsKey("tool", v.Action, v.Scope, v.KeyFields, obj)
		if key != v.Key || missing != v.Missing {
			t.Errorf("vector %d (%s): key %q missing %q, the file says %q %q", i, v.Arguments, key, missing, v.Key, v.Missing)
		}
	}
}
