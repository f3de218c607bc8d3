package demo

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/opjournal/opjournal/client"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// Budgets: the agent pays four orders of 8,000.00 EUR, which fit both
// budgets; a fifth of 10,000.00 would pass its daily spend (40,000.00), so
// it waits for a person, the tool never called; a sixth is refused
// outright: its five payments of the day are used up (the one waiting
// counts), and the refusal says which budget and when it frees up. The
// operator admits the large one over the limit; it then runs once, and
// the counters show what was spent.
func Budgets(ctx context.Context, env Env) error {
	r := &run{env: env}
	pay := func(n, amount int) (client.Op, map[string]any) {
		order := map[string]any{"order_id": fmt.Sprintf("9%02d", n), "amount_minor": amount, "currency": "EUR"}
		return client.Op{Key: fmt.Sprintf("payment:order-9%02d:intent-01", n), Action: "create_payment", Payload: order}, order
	}
	r.say("the agent pays four orders of 8000.00 EUR (budgets: %d payments and %s EUR a day)", DailyPayments, minorUnits(DailySpend))
	for i := 1; i <= 4; i++ {
		op, order := pay(i, 800000)
		out, err := r.execute(ctx, op, r.call("/payments", order, true))
		if err != nil {
			return err
		}
		if err := expect(out.Kind == client.Succeeded, "payment %d: %s, want succeeded", i, out.Kind); err != nil {
			return err
		}
	}
	r.saw("4 succeeded, tool calls=%d; %s", r.calls.Load(), r.budgets(ctx))

	big, bigOrder := pay(5, 1000000)
	r.say("a fifth payment of 10000.00 EUR would pass the daily spend of %s", minorUnits(DailySpend))
	out, err := r.execute(ctx, big, r.call("/payments", bigOrder, true))
	if err != nil {
		return err
	}
	cur, err := r.lookup(ctx, big.Key)
	if err != nil {
		return err
	}
	n, err := r.effects(ctx, big.Key)
	if err != nil {
		return err
	}
	r.saw("outcome=%s, status=%s, approval asked by budget %v, tool calls=%d, provider effects=%d",
		out.Kind, short(cur.GetStatus()), cur.GetApproval().GetBudgets(), r.calls.Load(), n)
	if err := expect(out.Kind == client.AwaitingApproval && len(cur.GetApproval().GetBudgets()) == 1 && r.calls.Load() == 4 && n == 0,
		"want the payment held for a person by the daily-spend budget, nothing called"); err != nil {
		return err
	}

	next, nextOrder := pay(6, 10000)
	r.say("a sixth payment of 100.00 EUR: the agent's %d payments of the day are used up (the waiting one counts)", DailyPayments)
	out, err = r.execute(ctx, next, r.call("/payments", nextOrder, true))
	if err != nil {
		return err
	}
	n, _ = r.effects(ctx, next.Key)
	retry := "never"
	if out.RetryAfter > 0 {
		retry = "in " + out.RetryAfter.Round(time.Minute).String()
	}
	r.saw("outcome=%s (budget %s: %d of %d used; it may fit %s), tool calls=%d, provider effects=%d",
		out.Kind, out.Budget.Budget, out.Budget.Used, out.Budget.Limit, retry, r.calls.Load(), n)
	if err := expect(out.Kind == client.BudgetExceeded && out.Budget.Budget == "daily-payments" && out.RetryAfter > 0 && r.calls.Load() == 4 && n == 0,
		"want budget_exceeded by daily-payments, nothing called"); err != nil {
		return err
	}
	if _, err := r.lookup(ctx, next.Key); errorCode(err) != "NOT_FOUND" {
		return fmt.Errorf("the refused payment was registered: %v", err)
	}

	r.say("%s admits the large payment over the daily spend (request hash %s…); the agent's next call runs it", Approver, cur.GetRequestHash()[:12])
	if _, err := r.env.RPC.Approve(ctx, &pb.ApproveRequest{OperationKey: big.Key, RequestHash: cur.GetRequestHash(),
		Reason: "quarterly supplier invoice, checked", Actor: Approver}); err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	if out, err = r.execute(ctx, big, r.call("/payments", bigOrder, true)); err != nil {
		return err
	}
	n, _ = r.effects(ctx, big.Key)
	r.saw("outcome=%s, tool calls=%d, provider effects=%d; %s", out.Kind, r.calls.Load(), n, r.budgets(ctx))
	if err := expect(out.Kind == client.Succeeded && r.calls.Load() == 5 && n == 1, "want the approved payment to run exactly once"); err != nil {
		return err
	}
	fmt.Fprintf(r.env.out(), "  result   5 payments made (42000.00 EUR, one admitted over the limit by a person), 1 refused, 0 sent twice\n")
	return nil
}

// budgets words the EUR counters of create_payment's budgets.
func (r *run) budgets(ctx context.Context) string {
	res, err := r.env.RPC.ListBudgets(ctx, &pb.ListBudgetsRequest{ActionType: "create_payment"})
	if err != nil {
		return "budgets: " + errorCode(err)
	}
	s := "budgets:"
	for _, b := range res.GetBudgets() {
		if b.GetScope() == `{"payload.currency":"EUR","principal":"demo-agent"}` {
			used, limit := strconv.FormatInt(b.GetUsed(), 10), strconv.FormatInt(b.GetLimit(), 10)
			if b.GetSum() != "" {
				used, limit = minorUnits(int(b.GetUsed())), minorUnits(int(b.GetLimit()))
			}
			s += fmt.Sprintf(" %s %s of %s", b.GetBudget(), used, limit)
		}
	}
	return s
}
