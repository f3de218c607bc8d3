package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/store"
)

// CountRow is one group of Counts (store.CountRow; named here so that
// transports need not know the store).
type CountRow = store.CountRow

// ActivityRow counts the events of one kind in one bucket of Activity
// (store.ActivityRow, named here for the same reason).
type ActivityRow = store.ActivityRow

// Counts returns how many of the caller's operations there are per action,
// effective status, review flag, expired lease and due check, with the
// oldest last change of each group: the console's counts at a glance.
func (s *Service) Counts(ctx context.Context, c Caller) ([]CountRow, error) {
	rows, err := s.store.Counts(ctx, c.Tenant)
	if err != nil {
		return nil, fmt.Errorf("count operations: %w", err)
	}
	return rows, nil
}

// MaxActivityBuckets bounds how many buckets one Activity call may span.
const MaxActivityBuckets = 1000

// Activity counts the caller's history events since since, per bucket of
// the given width and event kind (opjournal.KindOf). It returns
// CodeInvalidArgument for a bucket the stores refuse (store.CheckBucket)
// or a span of more than MaxActivityBuckets buckets.
func (s *Service) Activity(ctx context.Context, c Caller, since time.Time, bucket time.Duration, now time.Time) ([]ActivityRow, error) {
	if err := store.CheckBucket(bucket); err != nil {
		return nil, err
	}
	if span := now.Sub(since); span < 0 || span/bucket > MaxActivityBuckets {
		return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, "since", "must be in the past and at most %d buckets ago", MaxActivityBuckets)
	}
	rows, err := s.store.Activity(ctx, store.ActivityParams{Tenant: c.Tenant, Since: since, Bucket: bucket})
	if err != nil {
		return nil, fmt.Errorf("count events: %w", err)
	}
	return rows, nil
}
