package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/protocol/policy"
)

// budgetPolicy lets send_email send 2 messages an hour per recipient
// domain (reject) and at most 1,000 characters an hour (reject).
func budgetPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	pol, err := policy.Parse([]byte(`actions:
  send_email:
    lease_seconds: 30
    payload_schema:
      type: object
      required: [to, domain, chars]
      properties:
        to: {type: string}
        domain: {type: string}
        chars: {type: integer}
    budgets:
      - {name: hourly-mails, count: true, per: [domain], window: 1h, limit: 2, on_exceed: reject}
      - {name: hourly-chars, sum: chars, window: 1h, limit: 1000, on_exceed: reject}
`), "budget.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func mail(key, domain string, chars int) client.Op {
	return client.Op{Key: key, Action: "send_email", Payload: map[string]any{"to": "a@" + domain, "domain": domain, "chars": chars}}
}

// TestExecuteBudgetExceeded: past a budget Execute answers BudgetExceeded
// with the budget, its limit and use and when it may fit, and never calls
// fn; what fit before is still replayed; another scope is apart; an amount
// alone over the limit never fits (no retry hint).
func TestExecuteBudgetExceeded(t *testing.T) {
	t.Parallel()
	c, stop := newClientWith(t, budgetPolicy(t))
	defer stop()
	var calls atomic.Int32
	send := func(ctx context.Context, a client.Attempt) (client.Effect, error) {
		calls.Add(1)
		return client.Effect{ExternalID: "msg_" + a.Key}, nil
	}
	ctx := context.Background()
	for _, key := range []string{"m1", "m2"} {
		if out, err := c.Execute(ctx, mail(key, "example.com", 100), send); err != nil || out.Kind != client.Succeeded {
			t.Fatalf("%s: %v %v", key, out.Kind, err)
		}
	}
	out, err := c.Execute(ctx, mail("m3", "example.com", 100), send)
	if err != nil || out.Kind != client.BudgetExceeded || out.Kind.String() != "budget_exceeded" {
		t.Fatalf("m3: %v %v, want budget_exceeded", out.Kind, err)
	}
	b := out.Budget
	if b == nil || b.Budget != "hourly-mails" || b.Action != "send_email" || b.Limit != 2 || b.Used != 2 || b.Window != time.Hour || b.Message == "" {
		t.Fatalf("refusal %+v", b)
	}
	if out.RetryAfter < 59*time.Minute || out.RetryAfter > time.Hour+time.Second || out.Operation != nil {
		t.Fatalf("retry after %s, operation %v", out.RetryAfter, out.Operation)
	}
	if e := out.Err(); !errors.Is(e, client.ErrBudgetExceeded) || !strings.Contains(e.Error(), "hourly-mails") {
		t.Fatalf("Err() = %v", e)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("fn called %d times, want 2: the refused one must never be sent", n)
	}
	if out, err := c.Execute(ctx, mail("m1", "example.com", 100), send); err != nil || out.Kind != client.Succeeded || !out.Replayed {
		t.Fatalf("replay of m1: %v %v", out.Kind, err)
	}
	if out, err := c.Execute(ctx, mail("o1", "other.example", 700), send); err != nil || out.Kind != client.Succeeded {
		t.Fatalf("another domain: %v %v", out.Kind, err)
	}
	out, err = c.Execute(ctx, mail("huge", "third.example", 1001), send)
	if err != nil || out.Kind != client.BudgetExceeded || out.Budget.Budget != "hourly-chars" || out.RetryAfter != 0 {
		t.Fatalf("an amount alone over the limit: %v %+v %s %v", out.Kind, out.Budget, out.RetryAfter, err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("fn called %d times, want 3", n)
	}
}
