package soak

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/pgbouncer"
)

// With Config.PgBouncer the journal replicas reach PostgreSQL only
// through a real PgBouncer in transaction pooling mode, started by the
// harness. The schema is migrated first on a direct connection with
// `opjournal migrate` (migrations need a session; behind a pooler Open
// only checks the schema's version), then each replica is given a URL of
// the schema's PgBouncer database with pgx's statement mode for a pooler
// (pgbouncer.ExecMode). The reconcilers and agents talk to the replicas
// over gRPC, and the harness's own database work (the schema, the pool
// drop) stays on its direct connection: the pool drop then ends
// PgBouncer's server connections, which PgBouncer replaces.

// startPgBouncer migrates the schema directly, starts PgBouncer in dir
// and returns the replicas' database URL through it.
func (h *harness) startPgBouncer(ctx context.Context, dir string) (string, error) {
	direct, err := url.Parse(h.baseURL)
	if err != nil {
		return "", fmt.Errorf("soak: database url: %w", err)
	}
	q := direct.Query()
	q.Set("search_path", h.schema)
	direct.RawQuery = q.Encode()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(mctx, filepath.Join(h.cfg.BinDir, "opjournal"), "migrate", "--database-url", direct.String()).CombinedOutput(); err != nil {
		return "", fmt.Errorf("soak: opjournal migrate on the direct URL: %w\n%s", err, out)
	}
	pdir := filepath.Join(dir, "pgbouncer")
	if err := os.Mkdir(pdir, 0o755); err != nil {
		return "", err
	}
	// One pool for the schema, shared by the replicas; at 16 to 64 agents
	// on two replicas ten server connections carry the load.
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Server: h.baseURL, Dir: pdir})
	if err != nil {
		return "", fmt.Errorf("soak: %w", err)
	}
	h.bouncer = b
	alias := strings.ToLower(h.schema)
	through, err := b.AddDatabase(ctx, alias, h.schema)
	if err != nil {
		return "", fmt.Errorf("soak: %w", err)
	}
	h.say("pgbouncer (pool_mode=transaction) on %s: the journal replicas connect through it (database %s, default_query_exec_mode=%s); log %s",
		b.Addr(), alias, pgbouncer.ExecMode, b.LogPath())
	return through, nil
}

// stopPgBouncer stops the harness's PgBouncer, if any.
func (h *harness) stopPgBouncer() {
	if h.bouncer != nil {
		_ = h.bouncer.Close()
	}
}

// pgbouncerTraffic returns the transactions PgBouncer has carried for
// the schema so far (SHOW STATS, summed up every second). The replicas
// and reconcilers are still running, so the count keeps growing: the
// first count above zero is what the run is shown with (all but its last
// second or so).
func (h *harness) pgbouncerTraffic(ctx context.Context) (int64, error) {
	alias := strings.ToLower(h.schema)
	for range 10 {
		st, err := h.bouncer.Stats(ctx)
		if err != nil {
			return 0, err
		}
		if n := st[alias].TotalXacts; n > 0 {
			return n, nil
		}
		sleep(ctx, 1100*time.Millisecond) // one stats_period
	}
	return 0, nil
}
