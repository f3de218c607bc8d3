package gateway_test

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestModelTextMissingArgument: a call without its key field is told the
// shared missing_argument text (testdata/model_texts.json), through the
// real MCP door.
func TestModelTextMissingArgument(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../testdata/model_texts.json")
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
