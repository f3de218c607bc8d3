package reconciler

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	opjournalv1 "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/policy"
)

// provider is an httptest server whose answer a test sets, recording the
// requests it receives.
type provider struct {
	*httptest.Server
	mu       sync.Mutex
	status   int
	body     string
	delay    time.Duration
	requests []*http.Request
}

func newProvider(t *testing.T) *provider {
	p := &provider{status: 200, body: `{"data":[]}`}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests = append(p.requests, r.Clone(context.Background()))
		status, body, delay := p.status, p.body, p.delay
		p.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		if status >= 300 && status < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) answer(status int, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status, p.body = status, body
}

func (p *provider) last(t *testing.T) *http.Request {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.requests) == 0 {
		t.Fatal("the provider received no request")
	}
	return p.requests[len(p.requests)-1]
}

// search is the fake provider's payment search.
func search(url string) *policy.HTTPVerifier {
	return &policy.HTTPVerifier{
		URL:  url + "/payments?idempotency_key={operation_key}",
		List: "/data", Found: "/id", Completed: "/status", CompletedValues: []string{"succeeded"}, ExternalID: "/id",
	}
}

func op(key string) *opjournalv1.Operation {
	return &opjournalv1.Operation{OperationKey: key, ActionType: "create_payment", AttemptCount: 1}
}

func mustVerifier(t *testing.T, cfg *policy.HTTPVerifier, opts ...HTTPOption) *HTTPVerifier {
	t.Helper()
	v, err := NewHTTPVerifier(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestHTTPVerifierAnswers(t *testing.T) {
	p := newProvider(t)
	v := mustVerifier(t, search(p.URL))
	byID := mustVerifier(t, &policy.HTTPVerifier{URL: p.URL + "/payments/{operation_key}", Completed: "/status", CompletedValues: []string{"succeeded"}, ExternalID: "/id"})
	bareID := mustVerifier(t, &policy.HTTPVerifier{URL: p.URL + "/ids?k={operation_key}", List: "/ids", ExternalID: ""})
	truthy := mustVerifier(t, &policy.HTTPVerifier{URL: p.URL + "/p/{operation_key}", Completed: "/done", ExternalID: "/n"})
	tests := []struct {
		name    string
		v       *HTTPVerifier
		status  int
		body    string
		want    Observation
		wantErr string
	}{
		{"empty list is absent", v, 200, `{"data":[]}`, Observation{}, ""},
		{"found and completed, string id", v, 200, `{"data":[{"id":"pay_000001","status":"succeeded","amount_minor":490000}]}`,
			Observation{Found: true, Completed: true, ExternalID: "pay_000001"}, ""},
		{"found and completed, numeric id", byID, 200, `{"id":9007199254740993,"status":"succeeded"}`,
			Observation{Found: true, Completed: true, ExternalID: "9007199254740993"}, ""},
		{"found, pending", v, 200, `{"data":[{"id":"pay_1","status":"pending"}]}`,
			Observation{Found: true, ExternalID: "pay_1"}, ""},
		{"found, status missing", v, 200, `{"data":[{"id":"pay_1"}]}`,
			Observation{Found: true, ExternalID: "pay_1"}, ""},
		{"found is null", v, 200, `{"data":[{"id":null,"status":"succeeded"}]}`, Observation{}, ""},
		{"found is empty", v, 200, `{"data":[{"id":"","status":"succeeded"}]}`, Observation{}, ""},
		{"found is missing", v, 200, `{"data":[{"status":"succeeded"}]}`, Observation{}, ""},
		{"first match counts", v, 200, `{"data":[{"id":"a","status":"succeeded"},{"id":"b","status":"failed"}]}`,
			Observation{Found: true, Completed: true, ExternalID: "a"}, ""},
		{"lookup by id: 404 is absent", byID, 404, `{"error":"not found"}`, Observation{}, ""},
		{"lookup by id: 200 without status", byID, 200, `{"id":"x"}`, Observation{Found: true, ExternalID: "x"}, ""},
		{"bare ids", bareID, 200, `{"ids":["p_9"]}`, Observation{Found: true, Completed: true, ExternalID: "p_9"}, ""},
		{"truthy completed", truthy, 200, `{"done":true,"n":7}`, Observation{Found: true, Completed: true, ExternalID: "7"}, ""},
		{"falsy completed", truthy, 200, `{"done":0,"n":7}`, Observation{Found: true, ExternalID: "7"}, ""},
		{"search answering 404 is unclear", v, 404, `{}`, Observation{}, "answered 404 to a search"},
		{"500", v, 500, `{"data":[]}`, Observation{}, "provider answered HTTP 500"},
		{"503", v, 503, ``, Observation{}, "provider answered HTTP 503"},
		{"400", v, 400, `{"data":[]}`, Observation{}, "provider answered HTTP 400"},
		{"302", v, 302, ``, Observation{}, "provider answered HTTP 302"},
		{"204 without a body", v, 204, ``, Observation{}, "not JSON"},
		{"garbage", v, 200, `<html>oops</html>`, Observation{}, "not JSON"},
		{"two JSON values", v, 200, `{"data":[]} {"data":[]}`, Observation{}, "not one JSON value"},
		{"list is an object", v, 200, `{"data":{"id":"x"}}`, Observation{}, "no array at /data"},
		{"list is null", v, 200, `{"data":null}`, Observation{}, "no array at /data"},
		{"list is missing", v, 200, `{"items":[]}`, Observation{}, "no array at /data"},
		{"completed without an id", v, 200, `{"data":[{"id":{"x":1},"status":"succeeded"}]}`, Observation{}, "not a string or a number"},
		{"completed id too long", byID, 200, `{"id":"` + strings.Repeat("x", 201) + `","status":"succeeded"}`, Observation{}, "not a valid external_id"},
		{"completed id missing", byID, 200, `{"status":"succeeded"}`, Observation{}, `no external id at "/id"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.answer(tt.status, tt.body)
			got, err := tt.v.Find(context.Background(), op("k1"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Find = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				if !reflect.DeepEqual(got, Observation{}) {
					t.Errorf("Find returned %+v with its error", got)
				}
				return
			}
			// A found effect comes with the provider's record of it.
			if got.Found && tt.name != "bare ids" && got.Resource == nil {
				t.Errorf("Find = %+v: a found effect without its resource", got)
			}
			got.Resource = nil
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Find = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestHTTPVerifierBodyLimit(t *testing.T) {
	p := newProvider(t)
	v := mustVerifier(t, search(p.URL))
	p.answer(200, `{"data":[],"pad":"`+strings.Repeat("x", 1<<20)+`"}`)
	if _, err := v.Find(context.Background(), op("k")); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Fatalf("Find = %v, want the 1 MiB error", err)
	}
	// Just under the limit is read.
	p.answer(200, `{"data":[],"pad":"`+strings.Repeat("x", 1<<20-30)+`"}`)
	if obs, err := v.Find(context.Background(), op("k")); err != nil || obs.Found {
		t.Fatalf("Find = %+v, %v", obs, err)
	}
}

func TestHTTPVerifierTimeout(t *testing.T) {
	p := newProvider(t)
	cfg := search(p.URL)
	cfg.Timeout = time.Second
	v := mustVerifier(t, cfg)
	p.mu.Lock()
	p.delay = 3 * time.Second
	p.mu.Unlock()
	start := time.Now()
	_, err := v.Find(context.Background(), op("k"))
	if err == nil || !strings.Contains(err.Error(), "did not answer within 1s") {
		t.Fatalf("Find = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("Find took %s with a 1s timeout", d)
	}
}

func TestHTTPVerifierTransportError(t *testing.T) {
	p := newProvider(t)
	url := p.URL
	p.Close()
	v := mustVerifier(t, search(url))
	_, err := v.Find(context.Background(), op("k"))
	if err == nil || !strings.Contains(err.Error(), "request failed") {
		t.Fatalf("Find = %v, want a transport error", err)
	}
	if strings.Contains(err.Error(), "idempotency_key") {
		t.Errorf("the error repeats the URL: %v", err)
	}
}

func TestHTTPVerifierEscaping(t *testing.T) {
	p := newProvider(t)
	v := mustVerifier(t, &policy.HTTPVerifier{
		URL: p.URL + "/by/{operation_key}/x/{external_id}?k={operation_key}&e={external_id}", ExternalID: "/id",
	})
	key := "payment:order 817/intent+01?&=#%"
	o := op(key)
	o.ExternalId = "pay/1 2"
	p.answer(404, "")
	if obs, err := v.Find(context.Background(), o); err != nil || obs.Found {
		t.Fatalf("Find = %+v, %v", obs, err)
	}
	r := p.last(t)
	if want := "/by/payment:order%20817%2Fintent+01%3F&=%23%25/x/pay%2F1%202"; r.URL.RawPath != want && r.URL.EscapedPath() != want {
		t.Errorf("path = %q (raw %q), want %q", r.URL.EscapedPath(), r.URL.RawPath, want)
	}
	if want := "k=payment%3Aorder+817%2Fintent%2B01%3F%26%3D%23%25&e=pay%2F1+2"; r.URL.RawQuery != want {
		t.Errorf("query = %q, want %q", r.URL.RawQuery, want)
	}
	// The server decodes them back to the exact values.
	if got := r.URL.Query().Get("k"); got != key {
		t.Errorf("query k decodes to %q, want %q", got, key)
	}
	if got := r.URL.Query().Get("e"); got != "pay/1 2" {
		t.Errorf("query e decodes to %q", got)
	}

	// {external_id} without one is unclear, and asks nothing.
	n := len(p.requests)
	if _, err := v.Find(context.Background(), op("k")); err == nil || !strings.Contains(err.Error(), "has none") {
		t.Errorf("Find without an external_id = %v", err)
	}
	if len(p.requests) != n {
		t.Error("a request was sent without an external_id")
	}
}

func TestHTTPVerifierEnvironment(t *testing.T) {
	p := newProvider(t)
	env := map[string]string{"PROVIDER_URL": p.URL, "PROVIDER_TOKEN": "tok-1", "TENANT": "t1"}
	var mu sync.Mutex
	lookup := func(k string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		v, ok := env[k]
		return v, ok
	}
	cfg := &policy.HTTPVerifier{
		Method:  "POST",
		URL:     "${PROVIDER_URL:-http://127.0.0.1:1}/payments?idempotency_key={operation_key}&tenant=${TENANT}",
		Headers: map[string]string{"Authorization": "Bearer ${PROVIDER_TOKEN}", "X-Region": "${REGION:-eu}"},
		List:    "/data", ExternalID: "/id",
	}
	v := mustVerifier(t, cfg, WithLookupEnv(lookup))
	if _, err := v.Find(context.Background(), op("k1")); err != nil {
		t.Fatal(err)
	}
	r := p.last(t)
	if r.Method != "POST" || r.URL.Path != "/payments" || r.URL.Query().Get("idempotency_key") != "k1" || r.URL.Query().Get("tenant") != "t1" {
		t.Errorf("request %s %s", r.Method, r.URL)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer tok-1" {
		t.Errorf("Authorization = %q", got)
	}
	if got := r.Header.Get("X-Region"); got != "eu" {
		t.Errorf("X-Region = %q, want the default", got)
	}

	// A rotated secret is picked up by the next request.
	mu.Lock()
	env["PROVIDER_TOKEN"] = "tok-2"
	env["REGION"] = "us"
	mu.Unlock()
	if _, err := v.Find(context.Background(), op("k1")); err != nil {
		t.Fatal(err)
	}
	if r := p.last(t); r.Header.Get("Authorization") != "Bearer tok-2" || r.Header.Get("X-Region") != "us" {
		t.Errorf("after rotation: Authorization %q, X-Region %q", r.Header.Get("Authorization"), r.Header.Get("X-Region"))
	}

	// An unset variable without a default is unclear; the error names it,
	// and no request is sent.
	mu.Lock()
	delete(env, "PROVIDER_TOKEN")
	n := len(p.requests)
	mu.Unlock()
	_, err := v.Find(context.Background(), op("k1"))
	if err == nil || !strings.Contains(err.Error(), "header Authorization: environment variable PROVIDER_TOKEN is not set") {
		t.Fatalf("Find = %v", err)
	}
	if strings.Contains(err.Error(), "tok-") {
		t.Errorf("the error holds a secret: %v", err)
	}
	if len(p.requests) != n {
		t.Error("a request was sent without its header")
	}
	mu.Lock()
	env["PROVIDER_TOKEN"] = "tok-3"
	delete(env, "TENANT")
	mu.Unlock()
	if _, err := v.Find(context.Background(), op("k1")); err == nil || err.Error() != "url: environment variable TENANT is not set" {
		t.Fatalf("Find = %v", err)
	}
	mu.Lock()
	env["TENANT"] = "t 1"
	mu.Unlock()
	if _, err := v.Find(context.Background(), op("k1")); err == nil || !strings.Contains(err.Error(), "contains spaces") || strings.Contains(err.Error(), "t 1") {
		t.Fatalf("Find with a space from the environment = %v", err)
	}
	// The URL's default applies when the variable is unset.
	mu.Lock()
	env["TENANT"] = "t"
	delete(env, "PROVIDER_URL")
	mu.Unlock()
	if _, err := v.Find(context.Background(), op("k1")); err == nil || !strings.Contains(err.Error(), "request failed") {
		t.Fatalf("Find with the default URL (nothing listens on port 1) = %v", err)
	}
}

func TestNewHTTPVerifierRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]*policy.HTTPVerifier{
		"nil":            nil,
		"no placeholder": {URL: "http://p/x", ExternalID: "/id"},
		"method":         {URL: "http://p/{operation_key}", Method: "PUT"},
		"pointer":        {URL: "http://p/{operation_key}", List: "data"},
		"env":            {URL: "${X/{operation_key}"},
		"header env":     {URL: "http://p/{operation_key}", Headers: map[string]string{"A": "${"}},
	} {
		if _, err := NewHTTPVerifier(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHTTPVerifierFromTheShippedPolicy(t *testing.T) {
	p := newProvider(t)
	pol := policy.Default()
	for _, tc := range []struct{ action, path, query, status string }{
		{"create_payment", "/payments", "idempotency_key", "succeeded"},
		{"send_email", "/emails", "reference", "sent"},
		{"submit_application", "/applications", "reference", "submitted"},
	} {
		act, _ := pol.Action(tc.action)
		v := mustVerifier(t, act.Reconcile.Verifier.HTTP, WithLookupEnv(func(k string) (string, bool) {
			if k == "PROVIDER_URL" {
				return p.URL, true
			}
			return "", false
		}))
		p.answer(200, `{"data":[{"id":"x_000001","status":"`+tc.status+`"}]}`)
		obs, err := v.Find(context.Background(), op("k:1"))
		if err != nil || !obs.Found || !obs.Completed || obs.ExternalID != "x_000001" || obs.Resource["id"] != "x_000001" {
			t.Errorf("%s: Find = %+v, %v", tc.action, obs, err)
		}
		if r := p.last(t); r.URL.Path != tc.path || r.URL.Query().Get(tc.query) != "k:1" {
			t.Errorf("%s: asked %s", tc.action, r.URL)
		}
	}
}
