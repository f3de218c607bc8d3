package soak

import (
	"fmt"
	"strings"
	"time"
)

// PolicyYAML returns the soak policy: the shipped policy's three actions
// (create_payment, send_email, submit_application) with the run's short
// lease, quick reconciliation and early escalation, an in_flight_window of
// Config.InFlightWindow (Validate checks that it covers the slowest hold
// that commits), and HTTP verifiers asking the test provider at
// ${PROVIDER_URL}. The journal and the reconcilers load the same file.
// With Config.ShippedPolicy the run loads policy.DefaultYAML() instead.
func PolicyYAML(cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The opjournal-soak policy for seed %d (written by the harness).\nactions:\n", cfg.Seed)
	for _, a := range []struct {
		name, path, query, completed string
		integer                      bool
	}{
		{"create_payment", "/payments", "idempotency_key", "succeeded", true},
		{"send_email", "/emails", "reference", "sent", false},
		{"submit_application", "/applications", "reference", "submitted", false},
	} {
		fmt.Fprintf(&b, `  %s:
    operation_key: required
    lease_seconds: %d
    retry:
      reuse_operation_key: true
      on_timeout: reconcile_before_retry
    terminal_states: [succeeded, failed_final]
    unknown_after_seconds: %d
    on_unresolved: require_human_review
    retention: %s
`, a.name, cfg.LeaseSeconds, int(cfg.UnknownAfter/time.Second), max(time.Hour, cfg.UnknownAfter).String())
		if a.integer {
			b.WriteString("    integer_fields: [amount_minor]\n")
		}
		fmt.Fprintf(&b, `    reconcile:
      initial_delay: %s
      interval: %s
      max_interval: %s
      visibility_lag: %s
      in_flight_window: %s
      definitive_absence: true
      verifier:
        http:
          url: "${PROVIDER_URL:-http://127.0.0.1:8099}%s?%s={operation_key}"
          timeout: 2s
          list: /data
          found: /id
          completed: /status
          completed_values: [%s]
          external_id: /id
`, cfg.InitialDelay, cfg.Interval, cfg.MaxInterval, cfg.VisibilityLag, cfg.InFlightWindow, a.path, a.query, a.completed)
	}
	return b.String()
}
