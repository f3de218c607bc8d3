package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// lockLease is how long a TryLock lease lasts unless its holder renews
// it, which it does every lockLease/3 while it holds it. A holder that
// dies (or loses the database for that long) gives the lock up after at
// most lockLease. A purge is correct without the lock (each batch
// deletes rows it locked FOR UPDATE SKIP LOCKED, so every row goes
// exactly once); the lock only keeps purging to one process at a time,
// so a holder that lost its lease to a network partition and purges
// beside its successor for a moment does no harm.
const lockLease = 30 * time.Second

// TryLock takes the named lock as a lease row in store_locks (migration
// 000007): a statement that inserts the row, or takes it over if its
// lease has ended, and says whether it did. Several servers on one
// database then purge one at a time, and unlike a session advisory lock
// this works through a transaction pooler (PgBouncer), where every
// statement may run on another server connection. The lock belongs to
// the schema (the table is in it), so journals in different schemas of
// one database do not share it. Leases use the database's real clock
// (clock_timestamp), never the test clock (SetClock): moving the
// journal's time must not end a lease. It returns an *opjournal.Error
// with CodeUnavailable when the database cannot be reached.
func (s *Store) TryLock(ctx context.Context, name string) (func(), bool, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	qctx, cancel := s.bound(ctx)
	defer cancel()
	var got bool
	err := s.pool.QueryRow(qctx, `INSERT INTO store_locks AS l (name, holder, expires_at)
		VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))
		ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
		WHERE l.expires_at <= clock_timestamp()
		RETURNING true`, name, token, lockLease.Seconds()).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil // held by another, whose lease runs
	}
	if err != nil {
		return nil, false, classify("lock", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { s.renewLease(name, token, stop) })
	var once sync.Once
	unlock := func() {
		once.Do(func() {
			close(stop)
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), defaultStatementTimeout)
			defer cancel()
			// If this fails (the database is away) the lease ends by
			// itself within lockLease.
			_, _ = s.pool.Exec(ctx, `DELETE FROM store_locks WHERE name = $1 AND holder = $2`, name, token)
		})
	}
	return unlock, true, nil
}

// renewLease extends the lease every lockLease/3 until stop is closed,
// the store is closed, or the lease is found taken over (then there is
// nothing left to renew). A failed renewal is tried again at the next
// tick, still within the lease.
func (s *Store) renewLease(name, token string, stop <-chan struct{}) {
	t := time.NewTicker(lockLease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.closed:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), defaultStatementTimeout)
		tag, err := s.pool.Exec(ctx, `UPDATE store_locks SET expires_at = clock_timestamp() + make_interval(secs => $3)
			WHERE name = $1 AND holder = $2`, name, token, lockLease.Seconds())
		cancel()
		if err == nil && tag.RowsAffected() == 0 {
			return // the lease ended and another process took it
		}
	}
}
