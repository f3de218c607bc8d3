package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestModelTextMissingArgument: a call without its key field is told the
// shared missing_argument text (protocol/testdata/model_texts.json), through the
// real MCP door.
func TestModelTextMissingArgument(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../protocol/testdata/model_texts.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Texts map[string]string `json:"texts"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer("{tool}", "create_payment", "{argument_quoted}", strconv.Quote("order_id"), "{ids}", "order_id").
		Replace(doc.Texts["missing_argument"])
	e := newEnv(t, testPolicy)
	res := call(t, e.mcpClient(""), "create_payment", map[string]any{"amount_minor": 1, "currency": "RUB"})
	if got := text(res); !res.IsError || got != want {
		t.Fatalf("missing key field:\n gateway %q\n file    %q", got, want)
	}
	if e.allEffects() != 0 {
		t.Fatalf("effects %d, want 0", e.allEffects())
	}
}

// approvalPolicy is the fixture's policy with an approval for payments
// over 1,000.00.
func approvalPolicy(t *testing.T) string {
	t.Helper()
	const head = "  create_payment:\n    lease_seconds: 2\n"
	pol := strings.Replace(testPolicy, head, head+"    approval:\n      when: \"payload.amount_minor > 100000\"\n", 1)
	if pol == testPolicy {
		t.Fatal("the policy edit did not apply")
	}
	return pol
}

// TestModelTextsOfApprovals: through the real MCP door and a real journal,
// a call a person must approve is told the shared awaiting_approval text
// (and nothing is called); approved by an operator, it runs once; another,
// rejected, is told approval_rejected.
func TestModelTextsOfApprovals(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../protocol/testdata/model_texts.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Texts map[string]string `json:"texts"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	names := strings.NewReplacer("{tool}", "create_payment", "{ids}", "order_id")
	held := names.Replace(doc.Texts["awaiting_approval"])
	rejected := strings.ReplaceAll(names.Replace(doc.Texts["approval_rejected"]), "{error_code}", "approval_rejected")
	e := newEnv(t, approvalPolicy(t))
	cs := e.mcpClient("")
	operator := pb.NewJournalServiceClient(client.BearerConn(e.journal.Conn, tokenOpOnly))
	args := func(order string) map[string]any {
		return map[string]any{"order_id": order, "amount_minor": 250000, "currency": "RUB"}
	}
	// awaitingHash checks that key awaits approval and returns its hash.
	awaitingHash := func(key string) string {
		t.Helper()
		res, err := operator.Lookup(context.Background(), &pb.LookupRequest{OperationKey: key})
		if err != nil || res.GetOperation().GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL {
			t.Fatalf("lookup %s: %v %v", key, err, res.GetOperation().GetStatus())
		}
		return res.GetOperation().GetRequestHash()
	}

	res := call(t, cs, "create_payment", args("ap-1"))
	key, _ := meta(t, res)
	if got := text(res); !res.IsError || got != held {
		t.Fatalf("held:\n gateway %q\n file    %q", got, held)
	}
	m := res.Meta[gateway.MetaKey].(map[string]any)
	hash := awaitingHash(key)
	if m["awaiting_approval"] != true || m["request_hash"] != hash {
		t.Fatalf("_meta %v, want awaiting_approval and the request hash %s", m, hash)
	}
	if got := text(call(t, cs, "create_payment", args("ap-1"))); got != held || e.allEffects() != 0 {
		t.Fatalf("the retry: %q, %d effects", got, e.allEffects())
	}
	if _, err := operator.Approve(context.Background(), &pb.ApproveRequest{OperationKey: key, RequestHash: hash, Reason: "checked"}); err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "create_payment", args("ap-1")); res.IsError || e.effects(key) != 1 {
		t.Fatalf("after the approval: %q, %d effects", text(res), e.effects(key))
	}

	res = call(t, cs, "create_payment", args("ap-2"))
	key, _ = meta(t, res)
	if _, err := operator.Reject(context.Background(), &pb.RejectRequest{OperationKey: key, RequestHash: awaitingHash(key), Reason: "too large"}); err != nil {
		t.Fatal(err)
	}
	if res := call(t, cs, "create_payment", args("ap-2")); !res.IsError || text(res) != rejected || e.effects(key) != 0 {
		t.Fatalf("after the rejection:\n gateway %q\n file    %q\n%d effects", text(res), rejected, e.effects(key))
	}
}
