// Package await lets tests wait for a condition instead of sleeping for a
// guessed duration.
package await

import (
	"testing"
	"time"
)

// Until polls cond every millisecond until it holds, and fails the test if
// it does not within 10 s. what names the condition in the failure.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
