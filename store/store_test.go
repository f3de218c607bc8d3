package store

import (
	"testing"
	"time"

	"github.com/opjournal/opjournal"
)

// TestRetryAfterNeverExceedsTheLease: a loser whose statement read the
// clock a little before the winner's claim (two servers on one
// PostgreSQL) is told to wait at most the lease, not the lease plus the
// skew (it was 31 s for a 30 s lease).
func TestRetryAfterNeverExceedsTheLease(t *testing.T) {
	claimed := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	op := &opjournal.Operation{Status: opjournal.StatusInProgress, AttemptStartedAt: claimed, LeaseUntil: claimed.Add(30 * time.Second)}
	for _, c := range []struct {
		now  time.Time
		want time.Duration
	}{
		{claimed.Add(-3 * time.Millisecond), 30 * time.Second},
		{claimed, 30 * time.Second},
		{claimed.Add(10 * time.Second), 20 * time.Second},
	} {
		if got := RetryAfter(op, c.now); got != c.want {
			t.Errorf("RetryAfter at %s = %s, want %s", c.now.Sub(claimed), got, c.want)
		}
	}
	if got := RetryAfter(&opjournal.Operation{Status: opjournal.StatusPending}, claimed); got != 0 {
		t.Errorf("RetryAfter of a pending operation = %s", got)
	}
}
