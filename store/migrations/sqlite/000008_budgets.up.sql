-- Budgets (docs/policy.md, "Budgets"): what each operation holds of its
-- action's budgets, recorded once at registration. operations.budgets is
-- the operation's own list (JSON, NULL for none), read with the row;
-- budget_holds is the same holds one per row, indexed by counter (tenant,
-- budget, scope) and registration time, so that a registration sums its
-- counter's window through the index. A hold counts while its operation
-- (joined on key AND created_at, so a purged and re-registered key never
-- inherits older holds) is not released (protocol.HoldCounts).
ALTER TABLE operations ADD COLUMN budgets TEXT CHECK (budgets IS NULL OR json_valid(budgets));
CREATE TABLE budget_holds (
    tenant        TEXT    NOT NULL,
    budget        TEXT    NOT NULL,
    scope         TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    operation_key TEXT    NOT NULL,
    amount        INTEGER NOT NULL CHECK (amount >= 0),
    over_limit    INTEGER NOT NULL DEFAULT 0 CHECK (over_limit IN (0, 1)),
    PRIMARY KEY (tenant, budget, scope, created_at, operation_key)
) WITHOUT ROWID;
CREATE INDEX budget_holds_key_idx ON budget_holds (tenant, operation_key);
