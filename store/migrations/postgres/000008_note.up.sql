-- An operator's free-text note on an operation (SetNote): NULL for none.
-- The length (at most 2,000 characters) is checked by the journal before
-- a note reaches the store. Adding a nullable column without a default
-- rewrites no row.
ALTER TABLE operations ADD COLUMN note text;
