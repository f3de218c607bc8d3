package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/store/sqlite"
)

// startJournal runs a real opjournal server in-process, on a fresh SQLite
// file with the shipped policy, and returns its gRPC address and a stop
// function (safe to call twice) that shuts it down and removes the file.
func startJournal() (addr string, stop func()) { return startJournalWith(policy.Default()) }

// startJournalWith is startJournal with another policy.
func startJournalWith(pol *policy.Policy) (addr string, stop func()) {
	return startJournalAuth(pol, nil)
}

// startJournalAuth is startJournalWith a tokens file: every call needs a
// bearer token of authn (nil: no authentication).
func startJournalAuth(pol *policy.Policy, authn *auth.Authenticator) (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "opjournal-client-")
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(dir, "journal.db"))
	if err != nil {
		panic(err)
	}
	srv := server.New(journal.New(st, pol, journal.Limits{}), server.Config{
		GRPCAddr: "127.0.0.1:0",
		HTTPAddr: "127.0.0.1:0",
		Logger:   slog.New(slog.DiscardHandler),
		Auth:     authn,
	})
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, func(a server.Addrs) { ready <- a.GRPC.String() }) }()
	select {
	case addr = <-ready:
	case err := <-done:
		panic(fmt.Sprintf("journal did not start: %v", err))
	}
	var once sync.Once
	return addr, func() {
		once.Do(func() {
			cancel()
			<-done
			st.Close()
			os.RemoveAll(dir)
		})
	}
}

// newClient starts a journal for the test and returns a client of it and
// the journal's stop function.
func newClient(t *testing.T, opts ...client.Option) (*client.Client, func()) {
	t.Helper()
	return newClientWith(t, policy.Default(), opts...)
}

// newClientWith is newClient with another policy.
func newClientWith(t *testing.T, pol *policy.Policy, opts ...client.Option) (*client.Client, func()) {
	t.Helper()
	addr, stop := startJournalWith(pol)
	t.Cleanup(stop)
	c, err := client.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, stop
}

// provider is a fake payment, email or ticket API. Like a real idempotent
// provider it performs one effect per Idempotency-Key and answers a repeat
// with the stored answer. It counts requests and effects: effects are what
// the customer sees, whatever the agent says.
type provider struct {
	*httptest.Server
	prefix, status string

	mu       sync.Mutex
	answers  map[string][]byte
	requests int
	effects  int
	loseNext bool // perform the next new effect, then never answer
}

// newProvider returns a running provider whose effects are named
// "<prefix>_<n>" and answer {"id": ..., "status": status}.
func newProvider(prefix, status string) *provider {
	p := &provider{prefix: prefix, status: status, answers: map[string][]byte{}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body) // read the request, so a caller hanging up cancels r.Context()
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	p.requests++
	answer, seen := p.answers[key]
	lose := false
	if !seen {
		p.effects++
		answer, _ = json.Marshal(map[string]string{"id": fmt.Sprintf("%s_%d", p.prefix, p.effects), "status": p.status})
		p.answers[key] = answer
		lose, p.loseNext = p.loseNext, false
	}
	p.mu.Unlock()
	if lose { // the effect happened; the answer never arrives
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(answer)
}

// LoseNextAnswer makes the provider perform the next new effect and then
// hang until the caller gives up.
func (p *provider) LoseNextAnswer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseNext = true
}

// Effects is how many effects the provider performed.
func (p *provider) Effects() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.effects
}

// Requests is how many requests reached the provider.
func (p *provider) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}

// call is a typical fn body: POST body to url with the operation key as
// Idempotency-Key, classify the answer, and return the effect.
func call(ctx context.Context, hc *http.Client, url string, a client.Attempt, body any) (client.Effect, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return client.Effect{}, client.Rejected("bad_request", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return client.Effect{}, client.Rejected("bad_request", err)
	}
	req.Header.Set("Idempotency-Key", a.Key)
	resp, err := hc.Do(req)
	if err == nil {
		defer resp.Body.Close()
	}
	if err := client.ClassifyHTTP(resp, err); err != nil {
		return client.Effect{}, err
	}
	var got struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return client.Effect{}, err
	}
	return client.Effect{ExternalID: got.ID, Result: got}, nil
}
