package store

import (
	"context"

	"github.com/opjournal/opjournal"
)

// Purge's request, declared once: RunPurge checks the parameters and
// chooses between a store's two steps. The steps stay per store, because
// what they do differs for real reasons: PostgreSQL deletes a batch in one
// statement that skips rows other transactions hold (several processes
// purge one database) and leaves the history in draining partitions for
// their drop (store/postgres/partitions.go), while SQLite selects the
// batch and deletes it row by row inside one write transaction of its one
// writer. The loop over batches is the caller's (journal's purge pass),
// not the store's: a Purge is one batch.

// PurgeSteps are one store's answers to the two kinds of Purge.
type PurgeSteps struct {
	// Count counts every purgeable operation of p.Action, and its
	// history, deleting nothing (p.DryRun; p.Limit does not apply).
	Count func(ctx context.Context, p PurgeParams) (PurgeResult, error)
	// Batch deletes one batch of at most p.Limit purgeable operations of
	// p.Action, oldest first, with their history and refs, without
	// waiting for rows another transaction holds.
	Batch func(ctx context.Context, p PurgeParams) (PurgeResult, error)
}

// RunPurge is Store.Purge on a store's steps: it refuses parameters that
// would purge everything or nothing (no retention; no batch size, unless
// counting) with CodeInvalidArgument, then runs Count for a dry run and
// Batch otherwise.
func RunPurge(ctx context.Context, p PurgeParams, steps PurgeSteps) (PurgeResult, error) {
	if p.Retention <= 0 || (!p.DryRun && p.Limit <= 0) {
		return PurgeResult{}, opjournal.Errorf(opjournal.CodeInvalidArgument, "", "purge needs a retention and a batch size")
	}
	if p.DryRun {
		return steps.Count(ctx, p)
	}
	return steps.Batch(ctx, p)
}
