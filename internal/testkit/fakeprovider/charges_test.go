package fakeprovider

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestChargesTakeFormsAndCountEveryCharge: POST /v1/charges reads a
// form, answers the charge as JSON, does not deduplicate (two requests
// with one Idempotency-Key are two charges, counted under that key), and
// its search finds charges by that key.
func TestChargesTakeFormsAndCountEveryCharge(t *testing.T) {
	e := newEnv(t, Options{})
	post := func(body, key string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, e.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		b, _ := io.ReadAll(res.Body)
		_ = json.Unmarshal(b, &m)
		return res.StatusCode, m
	}
	for range 2 {
		status, ch := post("amount=1000&currency=usd&metadata[order]=o-1", "k-1")
		if status != http.StatusCreated || ch["object"] != "charge" || ch["amount"] != float64(1000) || ch["metadata[order]"] != "o-1" || ch["idempotency_key"] != "k-1" {
			t.Fatalf("%d %v", status, ch)
		}
	}
	if n := e.p.Count("k-1"); n != 2 {
		t.Fatalf("%d charges under k-1, want 2 (no deduplication)", n)
	}
	if status, _ := post("amount=ten&currency=usd", "k-2"); status != http.StatusBadRequest {
		t.Fatalf("a bad amount: %d", status)
	}
	res, err := http.Get(e.URL + "/v1/charges?idempotency_key=k-1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var found struct{ Data []map[string]any }
	if err := json.NewDecoder(res.Body).Decode(&found); err != nil || len(found.Data) != 2 {
		t.Fatalf("search: %v %+v", err, found)
	}
}
