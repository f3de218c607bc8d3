package fakeprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// env is a provider served by httptest, with a count of the requests its
// handler is running, so a test can wait for the server side to finish
// instead of sleeping.
type env struct {
	t        *testing.T
	p        *Provider
	srv      *httptest.Server
	URL      string
	inflight atomic.Int64
}

func newEnv(t *testing.T, o Options) *env {
	t.Helper()
	e := &env{t: t, p: New(o)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.inflight.Add(1)
		defer e.inflight.Add(-1)
		e.p.ServeHTTP(w, r)
	}))
	e.URL = e.srv.URL
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.p.Close) // runs first: releases holds so Close need not wait
	return e
}

// waitIdle waits until no handler is running.
func (e *env) waitIdle() {
	e.t.Helper()
	eventually(e.t, 5*time.Second, func() bool { return e.inflight.Load() == 0 }, "handlers still running")
}

// eventually polls cond until it holds or the deadline passes (internal/testkit/await).
func eventually(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	await.Within(t, within, what, cond)
}

// answer is one HTTP answer, decoded.
type answer struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

func (a answer) str(name string) string {
	s, _ := a.Body[name].(string)
	return s
}

// data returns the records of a search answer.
func (a answer) data() []map[string]any {
	list, _ := a.Body["data"].([]any)
	out := make([]map[string]any, 0, len(list))
	for _, v := range list {
		m, _ := v.(map[string]any)
		out = append(out, m)
	}
	return out
}

// do sends a request with client c and returns the answer or the transport
// error. hdr is name, value pairs.
func (e *env) do(c *http.Client, method, path, body string, hdr ...string) (answer, error) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{Status: res.StatusCode, Header: res.Header, Raw: string(raw)}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&a.Body); err != nil {
		e.t.Fatalf("%s %s: %d, not JSON: %q", method, path, res.StatusCode, raw)
	}
	return a, nil
}

// must sends a request with the default client and fails on a transport
// error or another status than want.
func (e *env) must(want int, method, path, body string, hdr ...string) answer {
	e.t.Helper()
	a, err := e.do(http.DefaultClient, method, path, body, hdr...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	if a.Status != want {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, a.Status, want, a.Raw)
	}
	return a
}

// fault adds a fault rule or fails.
func (e *env) fault(f Fault) FaultStatus {
	e.t.Helper()
	st, err := e.p.AddFault(f)
	if err != nil {
		e.t.Fatalf("AddFault(%+v): %v", f, err)
	}
	return st
}

// wantCount checks the effects under a key.
func (e *env) wantCount(key string, want int) {
	e.t.Helper()
	if got := e.p.Count(key); got != want {
		e.t.Errorf("effects under %q: %d, want %d (all: %v)", key, got, want, e.p.Effects().Effects)
	}
}

// shortClient gives up after 100 ms, on a connection of its own.
func shortClient() *http.Client {
	return &http.Client{Timeout: 100 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

const payBody = `{"amount_minor": 490000, "currency": "RUB", "order_id": "817"}`
