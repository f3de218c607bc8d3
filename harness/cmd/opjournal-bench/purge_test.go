package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
)

// TestPurgePassMadeAgainUnderSteal runs the purge scenario's passes for
// real (the server binary's migrate and purge, PostgreSQL from pgtest),
// with points that report the hypervisor's steal: a pass during which one
// point was stolen over the gate's limit is loaded, measured and purged
// again whole, on keys of its own (a new attempt), and only the passes
// kept give rows; a pass stolen on every try is kept once the gate gives
// up, its steal on its rows.
func TestPurgePassMadeAgainUnderSteal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server and purges with it")
	}
	bin := buildServer(t)
	dbURL := pgtest.NewSchema(t)
	if out, err := exec.Command(bin, "migrate", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("opjournal migrate: %v\n%s", err, out)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	for _, tc := range []struct {
		name      string
		budget    time.Duration
		stolen    map[string]float64 // "round/attempt/scenario" → steal, %
		wantCalls []string           // the points measured, in order
		wantKept  []string           // the rows returned
		wantWaits []time.Duration
		wantRe    int // the gate's count of measurements made again
		wantGive  int // and of those kept over the limit
	}{
		{
			name: "a stolen purge is purged again", budget: time.Minute,
			stolen: map[string]float64{"1/0/fused-grpc-during-purge": 40},
			wantCalls: []string{
				"1/0/fused-grpc-before-purge", "1/0/fused-grpc-during-purge",
				"1/1/fused-grpc-before-purge", "1/1/fused-grpc-during-purge",
				"2/0/fused-grpc-before-purge", "2/0/fused-grpc-during-purge",
			},
			wantKept:  []string{"1/1/fused-grpc-before-purge", "1/1/fused-grpc-during-purge", "2/0/fused-grpc-before-purge", "2/0/fused-grpc-during-purge"},
			wantWaits: []time.Duration{500 * time.Millisecond}, wantRe: 1,
		},
		{
			name: "kept when the run's wait is spent", budget: 700 * time.Millisecond,
			stolen: map[string]float64{"1/0/fused-grpc-before-purge": 30, "1/1/fused-grpc-before-purge": 30},
			wantCalls: []string{
				"1/0/fused-grpc-before-purge", "1/0/fused-grpc-during-purge",
				"1/1/fused-grpc-before-purge", "1/1/fused-grpc-during-purge",
				"2/0/fused-grpc-before-purge", "2/0/fused-grpc-during-purge",
			},
			wantKept:  []string{"1/1/fused-grpc-before-purge", "1/1/fused-grpc-during-purge", "2/0/fused-grpc-before-purge", "2/0/fused-grpc-during-purge"},
			wantWaits: []time.Duration{500 * time.Millisecond}, wantRe: 1, wantGive: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newStealGate(0.10, tc.budget)
			var waits []time.Duration
			g.sleep = func(_ context.Context, d time.Duration) { waits = append(waits, d) }
			c := config{bin: bin, purgeRows: 300, purgeRounds: 2, steal: g}
			var calls []string
			var sum summary
			kept, err := purgeScenario(ctx, c, pool, dbURL, &sum, func(scenario string, round, attempt int) bench.Row {
				name := fmt.Sprintf("%d/%d/%s", round, attempt, scenario)
				calls = append(calls, name)
				return bench.Row{System: "opjournal", Scenario: scenario, Round: round, Note: name, StealPct: tc.stolen[name]}
			})
			if err != nil {
				t.Fatalf("purgeScenario: %v", err)
			}
			var got []string
			for _, r := range kept {
				got = append(got, r.Note)
				if want := int(r.Note[2] - '0'); r.Remeasured != want {
					t.Errorf("%s: Remeasured %d, want %d", r.Note, r.Remeasured, want)
				}
			}
			if !slices.Equal(calls, tc.wantCalls) {
				t.Errorf("points measured %v, want %v", calls, tc.wantCalls)
			}
			if !slices.Equal(got, tc.wantKept) {
				t.Errorf("rows kept %v, want %v", got, tc.wantKept)
			}
			if !slices.Equal(waits, tc.wantWaits) || g.remeasured != tc.wantRe || g.kept != tc.wantGive {
				t.Errorf("waits %v, measured again %d, kept over the limit %d; want %v, %d, %d", waits, g.remeasured, g.kept, tc.wantWaits, tc.wantRe, tc.wantGive)
			}
			// Every pass, the ones made again included, purged what it loaded.
			var left int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM operations WHERE operation_key LIKE 'expired:%'`).Scan(&left); err != nil || left != 0 {
				t.Errorf("expired operations left: %d (%v)", left, err)
			}
			if sum.PurgeRows != 300 || sum.PurgeRowsPerSec <= 0 {
				t.Errorf("summary: %d rows purged at %.0f/s", sum.PurgeRows, sum.PurgeRowsPerSec)
			}
		})
	}
}
