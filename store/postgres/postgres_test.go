package postgres_test

import (
	"context"
	"encoding/json"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"net/url"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/internal/testkit/tcpproxy"
	"github.com/opjournal/opjournal/protocol"
	"github.com/opjournal/opjournal/store"
	"github.com/opjournal/opjournal/store/postgres"
	"github.com/opjournal/opjournal/store/storetest"
)

// TestConformance runs the shared rules on the store as configured by
// default (the hot path batched: batch.go) and with batching off (every
// call a statement of its own).
func TestConformance(t *testing.T) {
	for name, params := range map[string]string{"batched": "", "one-call": "&opjournal_batch_workers=0"} {
		t.Run(name, func(t *testing.T) { conformance(t, params) })
	}
}

// TestModel checks the store against the protocol's pure model, batched
// and one call per statement (storetest.RunModel).
func TestModel(t *testing.T) {
	for name, params := range map[string]string{"batched": "", "one-call": "&opjournal_batch_workers=0"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storetest.RunModel(t, func(t *testing.T) store.Store {
				s, err := postgres.Open(context.Background(), pgtest.NewSchema(t)+params)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

func conformance(t *testing.T, params string) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		url := pgtest.NewSchema(t) + params
		return func(t *testing.T) store.Store {
			s, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}

// TestFailsFastAndRecovers runs a store through a proxy that takes the
// database away (refused, then silent): every call answers UNAVAILABLE
// within the statement bound, and the same store works again once the
// database is back. The URL also carries a pool parameter, which must not
// reach the server (through the migrations) as a setting.
func TestFailsFastAndRecovers(t *testing.T) {
	direct := pgtest.NewSchema(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	px, err := tcpproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	u.Host = px.Addr()
	q := u.Query()
	q.Set("opjournal_statement_timeout", "1s")
	q.Set("pool_max_conns", "2")
	u.RawQuery = q.Encode()
	ctx := context.Background()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })

	payload := json.RawMessage(`{"n":1}`)
	reg := func(key string) error {
		_, err := s.Apply(ctx, "", &protocol.Command{Kind: protocol.CmdRegister, Key: key, Action: "a", RequestHash: "h", Payload: payload})
		return err
	}
	if err := reg("k0"); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"Register": func() error { return reg("k-down") },
		"Claim": func() error {
			_, err := s.Apply(ctx, "", storetest.Claiming(&protocol.Command{Kind: protocol.CmdClaim, Key: "k0"}, &storetest.ClaimPolicy{WorkerID: "w", LeaseSeconds: 30}))
			return err
		},
		"Get":    func() error { _, err := s.Get(ctx, "", "k0"); return err },
		"List":   func() error { _, _, err := s.List(ctx, store.ListParams{}); return err },
		"Events": func() error { _, _, err := s.Events(ctx, store.EventsParams{Key: "k0"}); return err },
		"Ping":   func() error { return s.Ping(ctx) },
	}
	for _, mode := range []struct {
		name  string
		down  func()
		bound time.Duration
	}{
		{"refused", px.Close, time.Second},    // cut connections fail at once
		{"silent", px.Stall, 3 * time.Second}, // the 1 s statement bound, and slack
	} {
		t.Run(mode.name, func(t *testing.T) {
			mode.down()
			for name, call := range calls {
				start := time.Now()
				err := call()
				took := time.Since(start)
				if opjournal.ErrorCode(err) != opjournal.CodeUnavailable {
					t.Errorf("%s: %v, want UNAVAILABLE", name, err)
				}
				if took > mode.bound {
					t.Errorf("%s took %v, want < %v", name, took, mode.bound)
				}
				t.Logf("%s: UNAVAILABLE in %v", name, took.Round(time.Millisecond))
			}
			if err := px.Resume(); err != nil {
				t.Fatal(err)
			}
			await.Until(t, "the store to answer again once the database is back", func() bool {
				_, err := s.Get(ctx, "", "k0")
				return err == nil
			})
		})
	}
}
