package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/journal/webhook"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/store/sqlite"
)

// journalWithWebhooks is a journal on a fresh SQLite file whose
// create_payment needs approval above 1,000.00 and notifies url, wired to
// a Sender as opjournal serve wires them.
func journalWithWebhooks(t *testing.T, url string, cfg webhook.Config) (*journal.Service, *webhook.Sender) {
	t.Helper()
	pol, err := policy.Parse([]byte(`actions:
  create_payment:
    integer_fields: [amount_minor]
    approval:
      when: "payload.amount_minor > 100000"
      notify: `+url+"\n"), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "j.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var sender *webhook.Sender
	svc := journal.New(st, pol, journal.Limits{}, journal.WithAwaitingApproval(func(op *opjournal.Operation) {
		if n, ok := webhook.ForOperation(pol, op); ok {
			sender.Notify(n)
		}
	}))
	cfg.Pending = webhook.Pending(svc, []string{"acme"})
	sender = start(t, cfg)
	return svc, sender
}

func registerBig(t *testing.T, svc *journal.Service, key string) *opjournal.Operation {
	t.Helper()
	res, err := svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: "acme"}, Key: key,
		Action: "create_payment", Payload: json.RawMessage(`{"order_id":"817","amount_minor":490000,"currency":"RUB"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Operation.Status != opjournal.StatusAwaitingApproval {
		t.Fatalf("Register: %s, want awaiting_approval", res.Operation.Status)
	}
	return res.Operation
}

// TestTheReceiverNeverChangesTheOperation: whatever the receiver does
// (fail, refuse with 410, never answer, succeed), the operation read back
// is the one Register stored.
func TestTheReceiverNeverChangesTheOperation(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]func(int) int{
		"fails":   func(int) int { return 500 },
		"gone":    func(int) int { return http.StatusGone },
		"silent":  func(int) int { return 0 },
		"accepts": func(int) int { return 200 },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, answer)
			svc, sender := journalWithWebhooks(t, r.URL, webhook.Config{Attempts: 2, Timeout: 100 * time.Millisecond})
			op := registerBig(t, svc, "payment:"+name)
			before, err := svc.Lookup(context.Background(), "acme", op.Key)
			if err != nil {
				t.Fatal(err)
			}
			want := webhook.OutcomeFailed
			if name == "accepts" {
				want = webhook.OutcomeDelivered
			}
			settledAs(t, sender, want)
			after, err := svc.Lookup(context.Background(), "acme", op.Key)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(before, after) {
				t.Errorf("the operation changed:\n before %+v\n after  %+v", before, after)
			}
			if got := r.requests(); len(got) == 0 || got[0].Header.Get(webhook.HeaderID) != (webhook.Notification{Tenant: "acme", OperationKey: op.Key, RequestHash: op.RequestHash}).MessageID() {
				t.Errorf("the receiver got %d requests, the first with id %v", len(got), got)
			}
		})
	}
}

// TestPendingListsWhatStillAwaitsApproval: the rescan's Source sees the
// operations awaiting approval of the action with notify, in every
// tenant given, and not the others.
func TestPendingListsWhatStillAwaitsApproval(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, func(int) int { return 200 })
	svc, sender := journalWithWebhooks(t, r.URL, webhook.Config{})
	registerBig(t, svc, "payment:a")
	registerBig(t, svc, "payment:b")
	if _, err := svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: "acme"}, Key: "payment:small",
		Action: "create_payment", Payload: json.RawMessage(`{"order_id":"1","amount_minor":100,"currency":"RUB"}`)}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := webhook.Pending(svc, []string{"acme", "other"})(context.Background(), func(n webhook.Notification) bool {
		keys = append(keys, n.OperationKey)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(keys, []string{"payment:a", "payment:b"}) {
		t.Errorf("Pending listed %v, want payment:a and payment:b", keys)
	}
	_ = sender
}
