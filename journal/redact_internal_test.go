package journal

import (
	"encoding/json"
	"testing"
)

func TestMayNameSparesPayloadsWithoutTheNames(t *testing.T) {
	names := []string{"card_number", "cvc"}
	for in, want := range map[string]bool{
		`{"amount_minor":490000,"currency":"RUB"}`:     false,
		`{"card_numbers":"x","xcvc":1}`:                false,
		`{"a":{"card_number":"4111"}}`:                 true,
		`{"note":"cvc"}`:                               true, // a value: checked the slow way
		`{"list":[{"cvc":"123"}],"z":"card_number_x"}`: true,
	} {
		if got := mayName(json.RawMessage(in), names); got != want {
			t.Errorf("%s: %v, want %v", in, got, want)
		}
	}
	if !mayName(json.RawMessage(`{}`), []string{`odd"name`}) || !mayName(json.RawMessage(`{}`), []string{"ключ"}) {
		t.Error("a name canonical JSON may escape must always take the slow way")
	}
}
