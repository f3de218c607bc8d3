package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opjournal/opjournal/store"
)

// Retention: the journal keeps an operation's records for its action's
// retention after the operation last changed, then purges them if it is
// terminal and no person must look at it (protocol.Purgeable). A
// non-terminal operation is never purged, however old. A purged key is
// unknown again: registering it makes a NEW operation, which is why
// retention must be longer than any retry (queues, manual retries,
// offline clients) and than the provider's own dedup window.

// The default pace of a purge. One statement deletes DefaultPurgeBatch
// operations with their history (about 4 ms on 2 cores) and the next waits
// DefaultPurgePause, so a purge holds no lock for long and leaves most of
// the database to the hot path: measured beside 32 fused callers on 2
// cores (opjournal-bench --scenarios purge), p99 rose 1.3× while 1M
// expired operations went at 17,000 a second; flat out (1000 a statement,
// no pause) they went at 64,000 a second and p99 rose 2.9×.
const (
	DefaultPurgeBatch = 250
	DefaultPurgePause = 10 * time.Millisecond
)

// PurgeLock is the name of the store lock (store.Store.TryLock) that keeps
// purging to one process at a time.
const PurgeLock = "purge"

// ErrPurgeBusy is returned by Purge when another process is purging.
var ErrPurgeBusy = errors.New("another process is purging this journal")

// PurgeOptions configure one purge pass.
type PurgeOptions struct {
	// Action limits the pass to one action ("" for every action of the
	// policy; operations of actions the policy no longer has are kept,
	// since their retention is unknown).
	Action string
	// DryRun counts what would go and deletes nothing.
	DryRun bool
	// BatchSize is the operations per statement (0: DefaultPurgeBatch).
	BatchSize int
	// Pause is waited between batches, leaving the database to other work.
	Pause time.Duration
	// Progress, if set, is called after every batch with the action's
	// running totals.
	Progress func(PurgeReport)
}

// PurgePass is one whole purge pass of a server, as its operators see it
// (the console's overview). It lives here, beside PurgeReport, because the
// server records passes and the console shows them: neither owns the
// other's types.
type PurgePass struct {
	At     time.Time
	Took   time.Duration
	Result string // done, skipped, failed
	// Reports are what it deleted, per action.
	Reports []PurgeReport
}

// PurgeReport is what a pass did (or would do) for one action.
type PurgeReport struct {
	Action    string
	Retention time.Duration
	// Operations and Events count the rows removed (or, dry, removable).
	Operations, Events int64
	// Oldest and Newest bound their updated_at (zero when none).
	Oldest, Newest time.Time
	// Batches is how many statements the pass ran.
	Batches int
}

// Purge runs one pass: for each action (or the one asked for), it deletes
// the purgeable operations in batches until none is left. Unless DryRun,
// it first takes the store's purge lock and returns ErrPurgeBusy when
// another process holds it. On an error it returns what it did so far.
func (s *Service) Purge(ctx context.Context, o PurgeOptions) ([]PurgeReport, error) {
	names := s.policy.Names()
	if o.Action != "" {
		act, err := s.action(o.Action)
		if err != nil {
			return nil, err
		}
		names = []string{act.Name}
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultPurgeBatch
	}
	if !o.DryRun {
		unlock, ok, err := s.store.TryLock(ctx, PurgeLock)
		if err != nil {
			return nil, fmt.Errorf("purge: %w", err)
		}
		if !ok {
			return nil, ErrPurgeBusy
		}
		defer unlock()
	}
	var reports []PurgeReport
	for _, name := range names {
		act, _ := s.actionPolicy(name)
		rep := PurgeReport{Action: name, Retention: act.Retention}
		err := s.purgeAction(ctx, &rep, o)
		reports = append(reports, rep)
		if err != nil {
			return reports, fmt.Errorf("purge %s: %w", name, err)
		}
	}
	return reports, nil
}

func (s *Service) purgeAction(ctx context.Context, rep *PurgeReport, o PurgeOptions) error {
	for {
		res, err := s.store.Purge(ctx, store.PurgeParams{Action: rep.Action, Retention: rep.Retention, Limit: o.BatchSize, DryRun: o.DryRun})
		if err != nil {
			return err
		}
		rep.Batches++
		if !o.DryRun && res.Operations > 0 {
			// The rows are gone: so must be their replay answers.
			s.replays.purged(rep.Action, res.Newest)
		}
		rep.Operations += res.Operations
		rep.Events += res.Events
		if !res.Oldest.IsZero() && (rep.Oldest.IsZero() || res.Oldest.Before(rep.Oldest)) {
			rep.Oldest = res.Oldest
		}
		if res.Newest.After(rep.Newest) {
			rep.Newest = res.Newest
		}
		if o.Progress != nil {
			o.Progress(*rep)
		}
		if o.DryRun || res.Operations < int64(o.BatchSize) {
			return nil
		}
		if o.Pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(o.Pause):
			}
		}
	}
}

// TerminalAge is how long ago the least recently changed terminal
// operation of an action changed (0 when it has none).
type TerminalAge struct {
	Action string
	Age    time.Duration
}

// OldestTerminal returns the age of the oldest terminal operation of every
// action of the policy: a journal that purges keeps it near the
// retention; one that grows past it is not purging.
func (s *Service) OldestTerminal(ctx context.Context) ([]TerminalAge, error) {
	var out []TerminalAge
	for _, name := range s.policy.Names() {
		oldest, now, err := s.store.OldestTerminal(ctx, name)
		if err != nil {
			return out, fmt.Errorf("oldest terminal operation of %s: %w", name, err)
		}
		age := time.Duration(0)
		if !oldest.IsZero() {
			age = max(now.Sub(oldest), 0)
		}
		out = append(out, TerminalAge{Action: name, Age: age})
	}
	return out, nil
}
