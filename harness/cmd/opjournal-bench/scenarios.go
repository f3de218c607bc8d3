package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The trivial request every scenario registers, and the result it stores.
var (
	payload = mustStruct(map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"})
	result  = mustStruct(map[string]any{"payment_id": "pay_1", "status": "captured"})
)

const action = "create_payment"

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

// keyer makes operation keys unique within one bench run.
type keyer string

func (k keyer) key(scenario string, c int, seq int64) string {
	return fmt.Sprintf("bench:%s:%s:c%d:%d", k, scenario, c, seq)
}

// round is the keyer of one round of a schedule: its keys differ from
// every other round's.
func (k keyer) round(r int) keyer { return keyer(fmt.Sprintf("%s.r%d", k, r)) }

// attempt is the keyer of a point's measurement again (stealGate): the
// first attempt keeps k, the others have keys of their own, so that a
// second measurement registers new operations instead of replaying the
// first one's.
func (k keyer) attempt(a int) keyer {
	if a == 0 {
		return k
	}
	return keyer(fmt.Sprintf("%s.a%d", k, a))
}

// rawSQL is the floor: the protocol's three statements, each its own commit,
// issued directly with pgx against the same operations table (no history
// rows, no hashing, no policy).
func rawSQL(pool *pgxpool.Pool, k keyer, c int) bench.Op {
	return func(ctx context.Context, _ int, seq int64) error {
		key := k.key("raw", c, seq)
		if _, err := pool.Exec(ctx, `INSERT INTO operations (tenant, operation_key, action_type, request_hash, payload, status)
			VALUES ('', $1, $2, $3, $4::json, 'pending')`,
			key, action, "961c02e25bea1e6b7d1cb0b8c6d4e3d0c3f2a9b8e7d6c5b4a39281706f5e4d3c", `{"amount_minor":490000,"currency":"RUB","order_id":"817"}`); err != nil {
			return err
		}
		tag, err := pool.Exec(ctx, `UPDATE operations SET status = 'in_progress', attempt_count = attempt_count + 1,
			lease_owner = $2, lease_until = now() + interval '30 seconds', updated_at = now()
			WHERE tenant = '' AND operation_key = $1 AND status = 'pending'`, key, "bench")
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("claim of %s changed %d rows", key, tag.RowsAffected())
		}
		tag, err = pool.Exec(ctx, `UPDATE operations SET status = 'succeeded', external_id = $2, result = $3::json,
			lease_until = NULL, updated_at = now()
			WHERE tenant = '' AND operation_key = $1 AND status = 'in_progress' AND attempt_count = 1`,
			key, "pay_1", `{"payment_id":"pay_1","status":"captured"}`)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("mark succeeded of %s changed %d rows", key, tag.RowsAffected())
		}
		return err
	}
}

// fullCycle is register → claim → markSucceeded over gRPC: three calls.
func fullCycle(cl pb.JournalServiceClient, k keyer, c int) bench.Op {
	return func(ctx context.Context, _ int, seq int64) error {
		key := k.key("full", c, seq)
		if _, err := cl.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: action, Payload: payload}); err != nil {
			return err
		}
		cr, err := cl.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "bench"})
		if err != nil {
			return err
		}
		if !cr.GetClaimed() {
			return fmt.Errorf("claim of %s refused", key)
		}
		return markSucceeded(ctx, cl, key, cr.GetAttempt())
	}
}

// fused is register-with-claim → markSucceeded over gRPC: two calls.
func fused(cl pb.JournalServiceClient, k keyer, scenario string, c int) bench.Op {
	return func(ctx context.Context, _ int, seq int64) error {
		key := k.key(scenario, c, seq)
		r, err := cl.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: action, Payload: payload,
			Claim: &pb.ClaimOptions{WorkerId: "bench"}})
		if err != nil {
			return err
		}
		if !r.GetClaimed() {
			return fmt.Errorf("register+claim of %s not claimed", key)
		}
		return markSucceeded(ctx, cl, key, r.GetAttempt())
	}
}

func markSucceeded(ctx context.Context, cl pb.JournalServiceClient, key string, attempt int32) error {
	_, err := cl.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: attempt, ExternalId: "pay_1", Result: result})
	return err
}

// replay registers keys that already succeeded: the stored result comes
// back and nothing changes. keys are prepared by the caller.
func replay(cl pb.JournalServiceClient, keys []string) bench.Op {
	return func(ctx context.Context, w int, seq int64) error {
		r, err := cl.Register(ctx, &pb.RegisterRequest{OperationKey: keys[int(seq)%len(keys)], ActionType: action, Payload: payload})
		if err != nil {
			return err
		}
		if r.GetCreated() || r.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED {
			return fmt.Errorf("replay of %s: created=%v status=%v", r.GetOperation().GetOperationKey(), r.GetCreated(), r.GetOperation().GetStatus())
		}
		return nil
	}
}

// restFused is the fused path over the REST mirror.
func restFused(hc *http.Client, base string, k keyer, c int) bench.Op {
	return func(ctx context.Context, _ int, seq int64) error {
		key := k.key("rest", c, seq)
		var reg struct {
			Claimed bool  `json:"claimed"`
			Attempt int32 `json:"attempt"`
		}
		body := fmt.Sprintf(`{"operation_key":%q,"action_type":%q,"payload":{"order_id":"817","amount_minor":490000,"currency":"RUB"},"claim":{"worker_id":"bench"}}`, key, action)
		if err := post(ctx, hc, base+"/v1/operations:register", body, &reg); err != nil {
			return err
		}
		if !reg.Claimed {
			return fmt.Errorf("REST register+claim of %s not claimed", key)
		}
		body = fmt.Sprintf(`{"operation_key":%q,"attempt":%d,"external_id":"pay_1","result":{"payment_id":"pay_1","status":"captured"}}`, key, reg.Attempt)
		return post(ctx, hc, base+"/v1/operations:markSucceeded", body, nil)
	}
}

func post(ctx context.Context, hc *http.Client, url, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %.200s", url, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// contention runs rounds of n callers registering-with-claim the same key
// at once; each sample is one caller's time to its answer. A round where
// not exactly one caller wins is an error.
func contention(ctx context.Context, cl pb.JournalServiceClient, k keyer, n int, l bench.Load, serverPid int) bench.Row {
	var round atomic.Int64
	// One Run worker drives the rounds; its per-op latency would be the
	// slowest caller, so the callers' own latencies are collected here.
	var mu sync.Mutex
	var samples []time.Duration
	measureFrom := time.Now().Add(l.Warmup)
	row := bench.RunWithCPU(ctx, bench.Load{Concurrency: 1, Warmup: l.Warmup, Duration: l.Duration}, serverPid, func(ctx context.Context, _ int, _ int64) error {
		key := k.key("contention", n, round.Add(1))
		var wins atomic.Int32
		var errMu sync.Mutex
		var firstErr error
		var wg sync.WaitGroup
		lat := make([]time.Duration, n)
		gate := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-gate
				t0 := time.Now()
				r, err := cl.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: action, Payload: payload,
					Claim: &pb.ClaimOptions{WorkerId: fmt.Sprintf("w%d", i)}})
				lat[i] = time.Since(t0)
				if err != nil {
					errMu.Lock()
					firstErr = cmp.Or(firstErr, err)
					errMu.Unlock()
				} else if r.GetClaimed() {
					wins.Add(1)
				}
			})
		}
		start := time.Now()
		close(gate)
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		if wins.Load() != 1 {
			return fmt.Errorf("%d callers won key %s", wins.Load(), key)
		}
		if start.After(measureFrom) {
			mu.Lock()
			samples = append(samples, lat...)
			mu.Unlock()
		}
		return nil
	})
	rounds := row.OpsPerSec
	row.Concurrency = n
	// RunWithCPU divided by rounds; the row counts answers.
	row.CPUClientUs, row.CPUServerUs, row.CPUPostgresUs = row.CPUClientUs/float64(n), row.CPUServerUs/float64(n), row.CPUPostgresUs/float64(n)
	row.OpsPerSec = rounds * float64(n)
	row.P50ms, row.P99ms = bench.Millis(bench.Percentile(samples, 50)), bench.Millis(bench.Percentile(samples, 99))
	row.Note = strings.TrimSpace(fmt.Sprintf("%.0f rounds/s, exactly one winner in each; ops/s counts answers. %s", rounds, row.Note))
	return row
}

// noop is a gRPC health check on the same connection: a round trip that
// does no work, the ceiling any RPC of the journal can reach here.
func noop(hc healthpb.HealthClient) bench.Op {
	return func(ctx context.Context, _ int, _ int64) error {
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
}

// purgeScenario bulk-loads c.purgeRows operations that expired a day ago
// (create_payment keeps 720h), measures the fused path (measure), then
// runs `opjournal purge` as its own process and measures the fused path
// again while it deletes them: the purge rate, and the p99 beside it. It
// does so c.purgeRounds times, so that the p99 figure is a median of
// pairs measured a second apart (measure's round; 0 for a single pass);
// the rate is the median pass's. A point beside a purge cannot be
// measured again alone, so a pass during which the hypervisor stole more
// than the gate's limit is made again whole (c.steal.again), its points
// on keys of their own (measure's attempt); the rows of the passes kept
// are returned.
func purgeScenario(ctx context.Context, c config, pool *pgxpool.Pool, dbURL string, sum *summary, measure func(scenario string, round, attempt int) bench.Row) ([]bench.Row, error) {
	var spents []time.Duration
	var kept []bench.Row
	outlasted := true
	for n := 1; n <= max(1, c.purgeRounds); n++ {
		round := n
		if c.purgeRounds <= 1 {
			round = 0
		}
		for attempt := 0; ; attempt++ {
			var pass []bench.Row
			worst := 0.0
			spent, out, err := purgeOnce(ctx, c, pool, dbURL, func(scenario string) {
				r := measure(scenario, round, attempt)
				r.Remeasured = attempt
				pass = append(pass, r)
				worst = max(worst, r.StealPct/100)
			})
			if err != nil {
				return nil, err
			}
			if c.steal.again(ctx, fmt.Sprintf("purge pass %d", n), worst, attempt) {
				continue
			}
			kept = append(kept, pass...)
			spents = append(spents, spent)
			outlasted = outlasted && out
			break
		}
	}
	slices.Sort(spents)
	spent := spents[len(spents)/2]
	sum.PurgeRows, sum.PurgeSeconds, sum.PurgeOutlasted = int64(c.purgeRows), spent.Seconds(), outlasted
	sum.PurgeRowsPerSec = float64(c.purgeRows) / spent.Seconds()
	return kept, nil
}

// purgeOnce is one pass of purgeScenario: it returns the purge's time
// and whether the purge outlasted the measurement beside it.
func purgeOnce(ctx context.Context, c config, pool *pgxpool.Pool, dbURL string, measure func(scenario string)) (time.Duration, bool, error) {
	fmt.Printf("purge: bulk-loading %d operations that expired a day ago …\n", c.purgeRows)
	t0 := time.Now()
	if err := bulkLoadAged(ctx, pool, c.purgeRows, "expired:", 31*24*time.Hour); err != nil {
		return 0, false, err
	}
	fmt.Printf("purge: loaded and vacuumed in %s\n", time.Since(t0).Round(time.Millisecond))
	measure("fused-grpc-before-purge")

	cmd := exec.CommandContext(ctx, c.bin, "purge", "--database-url", dbURL, "--action", "create_payment")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, false, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	measure("fused-grpc-during-purge")
	outlasted := false
	select {
	case err := <-done:
		// It ended before the measurement did: part of it saw no purge.
		if err != nil {
			return 0, false, fmt.Errorf("opjournal purge: %w\n%s", err, out.String())
		}
	default:
		outlasted = true
		if err := <-done; err != nil {
			return 0, false, fmt.Errorf("opjournal purge: %w\n%s", err, out.String())
		}
	}
	took := time.Since(start)
	var left int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM operations WHERE operation_key LIKE 'expired:%'`).Scan(&left); err != nil {
		return 0, false, err
	}
	if left != 0 {
		return 0, false, fmt.Errorf("opjournal purge left %d expired operations\n%s", left, out.String())
	}
	// The rate is the command's own figure (its total line), without the
	// process's start-up; the wall time is kept beside it.
	spent := took
	if m := purgeTotalRE.FindStringSubmatch(out.String()); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil && d > 0 {
			spent = d
		}
	}
	fmt.Printf("purge: %d operations (and their history) in %s (%s with the process's start) = %.0f operations/s; outlasted the measurement: %v\n  %s",
		c.purgeRows, spent.Round(time.Millisecond), took.Round(time.Millisecond), float64(c.purgeRows)/spent.Seconds(), outlasted,
		strings.ReplaceAll(strings.TrimSpace(out.String()), "\n", "\n  "))
	fmt.Println()
	return spent, outlasted, nil
}

// purgeTotalRE finds the time on opjournal purge's total line.
var purgeTotalRE = regexp.MustCompile(`(?m)^total: removed \d+ operations and \d+ history entries in (\S+)$`)
