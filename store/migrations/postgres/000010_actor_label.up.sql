-- One person is one principal (docs/security.md): operation_events.actor
-- now holds the authenticated principal's id, the identity every rule
-- compares, and actor_label beside it the credential's label for people to
-- read (a token's name, a JWT's subject). Older events keep the token's
-- name in actor and an empty label; readers show the label when there is
-- one, else the actor. Adding a column with a constant default rewrites no
-- row, and on the partitioned table it reaches every partition.
ALTER TABLE operation_events ADD COLUMN actor_label text NOT NULL DEFAULT '';
