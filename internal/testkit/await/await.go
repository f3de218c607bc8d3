// Package await lets tests wait for a condition instead of sleeping for a
// guessed duration. It is the one polling helper of the test suites.
package await

import (
	"testing"
	"time"
)

// Until polls cond until it holds, and fails the test if it does not
// within 10 s. what names the condition in the failure.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, 10*time.Second, what, cond)
}

// Within is Until with its own bound.
func Within(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	State(t, within, func() (bool, string) { return cond(), "waiting for " + what })
}

// State polls cond, which also describes what it saw, until it holds; a
// failure after within shows the last description.
func State(t testing.TB, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", within, state)
		}
		// Start fast, then ease off: most conditions hold within
		// milliseconds, some (a process restarting) take seconds.
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
