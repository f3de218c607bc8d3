package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/opjournal/opjournal/internal/testkit/testserver"
)

// BenchmarkRESTFused runs the fused path over the REST mirror, register
// with claim (1 KiB payload) then markSucceeded, against an in-process
// journal (SQLite); with -cpuprofile it shows the share of a REST call's
// CPU that each layer takes (the answer's encoding among them):
//
//	go test -run '^$' -bench RESTFused -benchtime 2000x -cpuprofile rest.pprof ./server/
func BenchmarkRESTFused(b *testing.B) {
	j := testserver.Start(b, nil)
	payload, err := json.Marshal(benchPayload(b).AsMap())
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{}
	post := func(path, body string, out any) {
		resp, err := hc.Post(j.HTTPURL+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		text, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("POST %s: %v %s %s", path, err, resp.Status, text)
		}
		if out != nil {
			if err := json.Unmarshal(text, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		n++
		key := fmt.Sprintf("rest-bench-%d", n)
		var reg struct {
			Claimed bool  `json:"claimed"`
			Attempt int32 `json:"attempt"`
		}
		post("/v1/operations:register", fmt.Sprintf(`{"operation_key":%q,"action_type":"create_payment","payload":%s,"claim":{"worker_id":"bench"}}`, key, payload), &reg)
		if !reg.Claimed {
			b.Fatalf("register of %s not claimed", key)
		}
		post("/v1/operations:markSucceeded", fmt.Sprintf(`{"operation_key":%q,"attempt":%d,"external_id":"pay_1","result":{"payment_id":"pay_1","status":"captured"}}`, key, reg.Attempt), nil)
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(n), "cpu-ns/op")
}
