// Package migrations embeds the schema of each store. Files follow
// golang-migrate's NNNNNN_name.up.sql / .down.sql naming; each store applies
// its folder on start (and `opjournal migrate` applies it on demand).
package migrations

import "embed"

// Postgres holds the PostgreSQL migrations under postgres/.
//
//go:embed postgres/*.sql
var Postgres embed.FS

// SQLite holds the SQLite migrations under sqlite/.
//
//go:embed sqlite/*.sql
var SQLite embed.FS
