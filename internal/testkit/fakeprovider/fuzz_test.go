package fakeprovider

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRequests sends arbitrary bodies, headers and queries to every route:
// the provider must answer JSON with a known status and never panic (a
// panic fails the fuzz target even though net/http would recover it).
func FuzzRequests(f *testing.F) {
	for _, s := range []struct{ path, body, key string }{
		{"/payments", `{"amount_minor": 1}`, "k"},
		{"/payments", `{"amount_minor": 1e400}`, ""},
		{"/payments", `{"amount_minor": 1, "card": "declined"}`, "k"},
		{"/payments", `{"amount_minor": 1, "card": {"x": 1}}`, "k"},
		{"/payments", "\xff\xfe", "\x00"},
		{"/emails", `{"to": "a", "reference": "r"}`, ""},
		{"/emails", `{"to": ["a"]}`, ""},
		{"/applications", `{"job_id": "j", "candidate": "c", "reference": "r"}`, ""},
		{"/applications", `{"job_id": "j", "candidate": "c", "reference": {"$ref": 1}}`, ""},
		{"/_control/faults", `{"path": "/emails", "fault": "reject", "probability": 1e-300}`, ""},
		{"/_control/faults", `{"path": "/emails", "fault": "slow", "count": 1, "delay": "1ns"}`, ""},
		{"/_control/faults", `{"path": "/emails", "fault": "reject", "count": 9223372036854775807}`, ""},
		{"/_control/config", `{"index_lag": "9999999h"}`, ""},
		{"/_control/config", `{"index_lag": null}`, ""},
	} {
		f.Add(s.path, s.body, s.key, "reference=r")
	}
	f.Fuzz(func(t *testing.T, path, body, key, query string) {
		p := New(Options{})
		defer p.Close()
		for _, method := range []string{"POST", "GET", "DELETE"} {
			req := httptest.NewRequest(method, "http://fake/", strings.NewReader(body))
			req.URL.Path, req.URL.RawQuery = path, query
			req.Header.Set("Idempotency-Key", key)
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, req)
			if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("%s %s %q: %d %s", method, path, body, rec.Code, rec.Body)
			}
			if rec.Header().Get("Content-Type") == "application/json" && !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s: invalid JSON %q", method, path, rec.Body)
			}
		}
		// Whatever rule got in, the store still answers.
		_ = p.Effects()
		_ = p.Faults()
	})
}
