package server_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/testserver"
)

// FuzzRESTBody sends arbitrary bytes as the body of every REST route of a
// real journal. Whatever arrives, the answer is never a 5xx (bad input is
// the client's fault, and a 5xx would tell an agent "maybe, retry"), and
// the server keeps serving. The seeds run in every `go test`.
func FuzzRESTBody(f *testing.F) {
	j := testserver.Start(f, nil)
	hc := &http.Client{Timeout: 10 * time.Second}
	routes := []string{"register", "claim", "markSucceeded", "markUnknown", "markFailedFinal", "releaseForRetry", "recordCheck", "escalate", "resolve"}
	for _, seed := range []string{
		`{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":1},"claim":{"worker_id":"w"}}`,
		`{"operation_key":"k","attempt":1,"external_id":"x","result":{"a":[1,2,{"b":null}]}}`,
		`{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":4900.0000000000000001}}`,
		`{"operation_key":"k","action_type":"send_email","payload":{"a":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}}`,
		`{"operation_key":"k","attempt":"1"}`,
		`{"operation_key":"k","resolution":"RESOLUTION_SUCCEEDED","actor":"a","reason":"r","external_id":"\u0000"}`,
		`{"payload":1e999}`,
		`[]`, `"`, `{"a":`, "\xff\xfe", `{"operation_key":"k","action_type":"create_payment","payload":{"amount_minor":9007199254740993}}`,
	} {
		for i := range routes {
			f.Add(uint8(i), []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		url := j.HTTPURL + "/v1/operations:" + routes[int(route)%len(routes)]
		resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("POST %s %q: %d %s", url, body, resp.StatusCode, b)
		}
		if resp.StatusCode != http.StatusOK && !bytes.Contains(b, []byte(`"error"`)) {
			t.Fatalf("POST %s %q: %d without an error body: %s", url, body, resp.StatusCode, b)
		}
	})
}
