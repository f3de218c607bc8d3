package demo

import (
	"bytes"
	"fmt"
	"time"

	"github.com/opjournal/opjournal/protocol/policy"
)

// InFlightWindow is the in_flight_window of the demo's policy for
// create_payment and send_email, instead of the shipped policy's 2 minutes.
//
// The shipped window is a real provider's processing timeout: a request
// the provider received may still be carried out that long after the agent
// gave up, so a release waits visibility_lag + in_flight_window. The test
// provider has no such tail: a commit_then_timeout fault stores the effect
// before it holds the answer, and a timeout_before_commit fault never
// stores one. So a few seconds is its true window, and `make demo` shows a
// proven absence released within seconds rather than waiting 2 min 3 s.
// `opjournal-demo --policy protocol/policy/default.yaml` waits the real window.
const InFlightWindow = 5 * time.Second

// shippedWindow is what PolicyYAML replaces in the shipped policy.
const shippedWindow = "in_flight_window: 2m\n"

// ApprovalThreshold is the amount (in minor units) above which the demo's
// policy asks a person to approve a create_payment: 10,000.00. The shipped
// policy asks nobody; the demo shows the approval block at work.
const ApprovalThreshold = 1000000

// paymentAction is the line of the shipped policy after which PolicyYAML
// inserts create_payment's approval block.
const paymentAction = "  create_payment:\n    operation_key: required\n"

// approvalBlock is create_payment's approval block in the demo's policy:
// payments above ApprovalThreshold wait for an operator's yes to the
// exact request.
var approvalBlock = fmt.Sprintf("    approval:\n      when: \"payload.amount_minor > %d\"\n      approvers: [operator, admin]\n      timeout: 1h\n      on_timeout: reject\n", ApprovalThreshold)

// The demo's budgets on create_payment, per agent and currency: at most
// DailyPayments payments a day (reject) and DailySpend minor units a day
// (a payment that would pass it waits for a person). The other scenarios
// pay in RUB well inside both; the budget scenario pays in EUR.
const (
	DailyPayments = 5
	DailySpend    = 4000000
)

// budgetBlock is create_payment's budgets in the demo's policy.
var budgetBlock = fmt.Sprintf(`    budgets:
      - name: daily-payments
        count: true
        per: [principal, currency]
        window: 24h
        limit: %d
        on_exceed: reject
      - name: daily-spend
        sum: amount_minor
        per: [principal, currency]
        window: 24h
        limit: %d
        on_exceed: approval
`, DailyPayments, DailySpend)

// PolicyYAML returns the policy `make demo` runs with: the shipped policy
// (policy.DefaultYAML) whose create_payment and send_email in_flight_window
// is InFlightWindow, and whose create_payment asks an operator to approve
// payments above ApprovalThreshold and caps each agent's payments with
// budgets (budgetBlock), with a header saying so. It fails if
// the shipped policy no longer has the lines it changes, rather than run
// the demo with a policy nobody chose.
func PolicyYAML() ([]byte, error) {
	src := policy.DefaultYAML()
	if n := bytes.Count(src, []byte(shippedWindow)); n != 2 {
		return nil, fmt.Errorf("demo policy: the shipped policy has %d lines %q, want 2 (create_payment, send_email)", n, shippedWindow)
	}
	if n := bytes.Count(src, []byte(paymentAction)); n != 1 {
		return nil, fmt.Errorf("demo policy: the shipped policy has %d blocks starting %q, want 1", n, paymentAction)
	}
	header := fmt.Sprintf("# make demo's policy: the shipped policy (protocol/policy/default.yaml) with in_flight_window %s instead of 2m\n"+
		"# for create_payment and send_email; the test provider carries out nothing after it answered or gave up.\n"+
		"# create_payment also asks an operator to approve payments above %d minor units (an approval block),\n"+
		"# and allows each agent %d payments and %d minor units a day per currency (budgets).\n", InFlightWindow, ApprovalThreshold, DailyPayments, DailySpend)
	body := bytes.ReplaceAll(src, []byte(shippedWindow), fmt.Appendf(nil, "in_flight_window: %s\n", InFlightWindow))
	body = bytes.Replace(body, []byte(paymentAction), []byte(paymentAction+approvalBlock+budgetBlock), 1)
	out := append([]byte(header), body...)
	if _, err := policy.Parse(out, "demo policy"); err != nil {
		return nil, err
	}
	return out, nil
}

// describeRelease says when the journal allows the release of an
// operation of action, by the policy's numbers.
func describeRelease(p *policy.Policy, action string) string {
	a, ok := p.Action(action)
	if !ok {
		return "(no policy for " + action + ")"
	}
	rc := a.Reconcile
	return fmt.Sprintf("%s after the attempt ended (visibility_lag %s + in_flight_window %s)", a.ReleaseAfter(), rc.VisibilityLag, rc.InFlightWindow)
}

// PolicySummary is the line the demo prints about the policy it runs
// with: the release timing of each action it uses.
func PolicySummary(p *policy.Policy) string {
	return fmt.Sprintf("a proven absence is released %s for create_payment, %s for send_email",
		describeRelease(p, "create_payment"), describeRelease(p, "send_email"))
}
