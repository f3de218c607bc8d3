package opjournal_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/opjournal/opjournal"
)

// TestNextStepVectors checks protocol/testdata/next_steps.json against NextStepOf:
// the vectors every SDK runs say what the server really answers.
func TestNextStepVectors(t *testing.T) {
	b, err := os.ReadFile("protocol/testdata/next_steps.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs struct {
		Vectors []struct {
			Name   string `json:"name"`
			Answer *struct {
				Next      string `json:"next"`
				Claimed   bool   `json:"claimed"`
				Operation struct {
					Status      string `json:"status"`
					NeedsReview bool   `json:"needs_review"`
				} `json:"operation"`
			} `json:"answer"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, v := range vs.Vectors {
		if v.Answer == nil || v.Answer.Next == "NEXT_STEP_UNSPECIFIED" {
			continue // an error answer, or a step no server sends
		}
		a := v.Answer
		st := opjournal.Status(strings.ToLower(strings.TrimPrefix(a.Operation.Status, "STATUS_")))
		op := &opjournal.Operation{Status: st, NeedsReview: a.Operation.NeedsReview}
		got := opjournal.NextStepOf(op, true, a.Claimed)
		if want := strings.ToLower(strings.TrimPrefix(a.Next, "NEXT_STEP_")); string(got) != want {
			t.Errorf("%s: NextStepOf = %s, the vector says %s", v.Name, got, want)
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d vectors checked", checked)
	}
}
