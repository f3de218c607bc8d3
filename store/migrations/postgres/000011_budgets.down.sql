DROP TABLE budget_holds;
ALTER TABLE operations DROP COLUMN budgets;
