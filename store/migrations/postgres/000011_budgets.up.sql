-- Budgets (docs/policy.md, "Budgets"): what each operation holds of its
-- action's budgets, recorded once at registration. operations.budgets is
-- the operation's own list (NULL for none), read with the row;
-- budget_holds is the same holds one per row, indexed by counter (tenant,
-- budget, scope) and registration time, so that a registration sums its
-- counter's window through the index, under a transaction-scoped advisory
-- lock on the counter. A hold counts while its operation (joined on key
-- AND created_at, so a purged and re-registered key never inherits older
-- holds) is not released (protocol.HoldCounts). Adding a nullable column
-- rewrites no row.
ALTER TABLE operations ADD COLUMN budgets jsonb;
CREATE TABLE budget_holds (
    tenant        text        NOT NULL,
    budget        text        NOT NULL,
    scope         text        NOT NULL,
    created_at    timestamptz NOT NULL,
    operation_key text        NOT NULL,
    amount        bigint      NOT NULL CHECK (amount >= 0),
    over_limit    boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, budget, scope, created_at, operation_key)
);
CREATE INDEX budget_holds_key_idx ON budget_holds (tenant, operation_key);
