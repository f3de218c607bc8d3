package soak

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opjournal/opjournal/protocol/policy"
)

// shippedPolicy is the shipped policy (policy.DefaultYAML), parsed once.
var shippedPolicy = sync.OnceValues(func() (*policy.Policy, error) {
	return policy.Parse(policy.DefaultYAML(), "protocol/policy/default.yaml")
})

// policyYAML is the policy file the journals and reconcilers of a run
// load: the shipped one as it is (ShippedPolicy), or the harness's own.
func (c Config) policyYAML() []byte {
	if c.ShippedPolicy {
		return policy.DefaultYAML()
	}
	return []byte(PolicyYAML(c))
}

// parsedPolicy parses the run's policy file as the journal will.
func (c Config) parsedPolicy() (*policy.Policy, error) {
	if c.ShippedPolicy {
		return shippedPolicy()
	}
	return policy.Parse(c.policyYAML(), "the soak policy")
}

// actionPlan is what a run does with one action, derived from the
// configuration and (with ShippedPolicy) the shipped policy's leases.
type actionPlan struct {
	name, short, path string
	idempotent        bool
	// lease is the action's lease_seconds.
	lease time.Duration
	// slow15 and slow3 are the holds of the slow_1.5x_lease and
	// slow_3x_lease faults (1.5× and 3× the lease), 0 where they do not
	// apply: on /payments (it deduplicates by Idempotency-Key) or with a
	// zero rate.
	slow15, slow3 time.Duration
	// commitHold is the longest the provider may hold a request of this
	// action before it carries it out (the slow faults); 0 if none does.
	commitHold time.Duration
	// agentTimeout is how long a patient agent waits for the provider:
	// AgentTimeout, plus the longest slow-lease hold of the route, so that
	// a 3×-lease call is waited for (the SDK's heartbeats keep the lease).
	agentTimeout time.Duration
	// postHold is how long the timeout faults hold a request of this
	// action: HoldDelay plus the same extra, so that they still outlast
	// the agent's wait.
	postHold time.Duration
}

// leaseOf is an action's lease_seconds in this run: LeaseSeconds for the
// soak's own policy, the shipped policy's for ShippedPolicy.
func (c Config) leaseOf(action string) time.Duration {
	if c.ShippedPolicy {
		if p, err := shippedPolicy(); err == nil {
			if a, ok := p.Action(action); ok {
				return time.Duration(a.LeaseSeconds) * time.Second
			}
		}
	}
	return time.Duration(c.LeaseSeconds) * time.Second
}

// plan returns the plan of one of the soak's actions.
func (c Config) plan(name string) actionPlan {
	var p actionPlan
	for _, a := range actions {
		if a.name == name {
			p = actionPlan{name: a.name, short: a.short, path: a.path, idempotent: a.idempotent}
		}
	}
	p.lease = c.leaseOf(name)
	if !p.idempotent {
		if c.Faults.SlowLease15 > 0 {
			p.slow15 = p.lease * 3 / 2
		}
		if c.Faults.SlowLease3 > 0 {
			p.slow3 = 3 * p.lease
		}
	}
	extra := max(p.slow15, p.slow3)
	p.agentTimeout = c.AgentTimeout + extra
	p.postHold = c.HoldDelay + extra
	p.commitHold = extra
	if c.Faults.Slow > 0 {
		p.commitHold = max(p.commitHold, c.SlowDelay)
	}
	return p
}

// plans returns the plans of the three actions, in the order of actions.
func (c Config) plans() []actionPlan {
	out := make([]actionPlan, 0, len(actions))
	for _, a := range actions {
		out = append(out, c.plan(a.name))
	}
	return out
}

// maxCommitHold is the longest any request may be held before the
// provider carries it out.
func (c Config) maxCommitHold() time.Duration {
	var d time.Duration
	for _, p := range c.plans() {
		d = max(d, p.commitHold)
	}
	return d
}

// holdSource names what makes an action's commitHold, in flag terms.
func (c Config) holdSource(p actionPlan) string {
	var why []string
	lease := fmt.Sprintf("--lease-seconds %d", c.LeaseSeconds)
	if c.ShippedPolicy {
		lease = fmt.Sprintf("its lease_seconds %d", int(p.lease/time.Second))
	}
	if p.slow3 > 0 && p.slow3 == p.commitHold {
		why = append(why, fmt.Sprintf("--rate-slow-3x-lease: 3 × %s", lease))
	}
	if p.slow15 > 0 && p.slow15 == p.commitHold {
		why = append(why, fmt.Sprintf("--rate-slow-1.5x-lease: 1.5 × %s", lease))
	}
	if c.Faults.Slow > 0 && c.SlowDelay == p.commitHold {
		why = append(why, "--slow-delay of --rate-slow")
	}
	return strings.Join(why, ", ")
}

// checkPolicy checks that the run's policy is safe for the faults the run
// injects: for every action, in_flight_window covers the longest the
// provider may hold a request before carrying it out, plus the index lag,
// so that a release never precedes a late effect; and the search lag stays
// below visibility_lag.
func (c Config) checkPolicy() error {
	pol, err := c.parsedPolicy()
	if err != nil {
		if c.ShippedPolicy {
			return fmt.Errorf("shipped-policy: %w", err)
		}
		return fmt.Errorf("the soak policy these flags make is invalid: %w", err)
	}
	plans := c.plans()
	// The action that needs the longest window first: the error names it.
	slices.SortStableFunc(plans, func(a, b actionPlan) int { return cmp.Compare(b.commitHold, a.commitHold) })
	for _, p := range plans {
		act, ok := pol.Action(p.name)
		if !ok {
			return fmt.Errorf("shipped-policy: the policy has no action %s", p.name)
		}
		rc := act.Reconcile
		if c.ShippedPolicy {
			switch {
			case !rc.DefinitiveAbsence || rc.Verifier == nil:
				return fmt.Errorf("shipped-policy: %s has no definitive verifier; the soak needs one for every action", p.name)
			case c.IndexLag >= rc.VisibilityLag:
				return fmt.Errorf("index-lag: %s must stay below %s's visibility_lag %s in the shipped policy", c.IndexLag, p.name, rc.VisibilityLag)
			case p.commitHold > 0 && rc.InFlightWindow < p.commitHold+c.IndexLag:
				return fmt.Errorf("shipped-policy: %s's in_flight_window %s (protocol/policy/default.yaml) is shorter than the longest the provider may hold its request before carrying it out, %s (%s), plus --index-lag %s: the shipped policy would release the operation for a retry before its late effect is visible, a duplicate; raise its in_flight_window to at least %s, or run without those faults",
					p.name, rc.InFlightWindow, p.commitHold, c.holdSource(p), c.IndexLag, p.commitHold+c.IndexLag)
			}
			continue
		}
		if p.commitHold > 0 && rc.InFlightWindow < p.commitHold+c.IndexLag {
			return fmt.Errorf("in-flight-window: %s is shorter than the longest the provider may hold a %s request before carrying it out, %s (%s), plus --index-lag %s: a release could precede the late effect, a duplicate the journal cannot detect; give --in-flight-window at least %s, or lower --lease-seconds, --slow-delay or the --rate-slow-* flags",
				rc.InFlightWindow, p.name, p.commitHold, c.holdSource(p), c.IndexLag, p.commitHold+c.IndexLag)
		}
	}
	return nil
}

// neededSettle is how long the settle phase may need: an agent still
// waiting for the provider when the load ends (agentTimeout), then a
// release at visibility_lag + in_flight_window after its attempt ended,
// the reconciler's longest backoff (max_interval + 20 % jitter) and a
// margin for the retry.
func (c Config) neededSettle() (time.Duration, error) {
	pol, err := c.parsedPolicy()
	if err != nil {
		return 0, err
	}
	var need time.Duration
	for _, p := range c.plans() {
		act, ok := pol.Action(p.name)
		if !ok {
			return 0, fmt.Errorf("the policy has no action %s", p.name)
		}
		rc := act.Reconcile
		d := p.agentTimeout + act.ReleaseAfter() + rc.InitialDelay + rc.MaxInterval*6/5 + c.ReconcilerPoll + 15*time.Second
		need = max(need, d)
	}
	return need.Round(time.Second), nil
}

// describePlan is one progress line per action: its lease, the slow
// holds, the agents' wait and when a release may happen.
func (c Config) describePlan() []string {
	pol, err := c.parsedPolicy()
	if err != nil {
		return nil
	}
	var lines []string
	for _, p := range c.plans() {
		act, _ := pol.Action(p.name)
		var holds []string
		if p.slow15 > 0 {
			holds = append(holds, fmt.Sprintf("%s (1.5× lease)", p.slow15))
		}
		if p.slow3 > 0 {
			holds = append(holds, fmt.Sprintf("%s (3× lease)", p.slow3))
		}
		slow := "slow calls held " + strings.Join(holds, " and ")
		switch {
		case p.idempotent:
			slow = "no slow-lease faults (deduplicates by Idempotency-Key)"
		case len(holds) == 0:
			slow = "no slow-lease faults"
		}
		lines = append(lines, fmt.Sprintf("%s: lease %s; %s; agents wait %s (impatient %s); timeout faults hold %s; release after visibility_lag %s + in_flight_window %s = %s",
			p.name, p.lease, slow, p.agentTimeout, c.ShortAgentTimeout, p.postHold,
			act.Reconcile.VisibilityLag, act.Reconcile.InFlightWindow, act.ReleaseAfter()))
	}
	return lines
}
