-- The housekeeping locks (Store.TryLock: one purger at a time) as leases
-- instead of session advisory locks: behind a transaction pooler
-- (PgBouncer, pool_mode = transaction) each statement may run on another
-- server connection, so a session lock taken by one statement is not held
-- for the next, and its unlock lands elsewhere. A lease row works the same
-- through any pooler. holder is the token of the current holder;
-- expires_at (the database's clock) lets another process take a lease its
-- holder stopped renewing (a dead server).
CREATE TABLE store_locks (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
