ALTER TABLE operations DROP COLUMN note;
