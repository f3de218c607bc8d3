package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/opjournal/opjournal/client"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/tcpproxy"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// Bounds of the failure-behaviour tests. failFast is what a call may take
// to answer UNAVAILABLE with the database gone: the store bounds each
// statement to 5 s (connecting to 5 s, a liveness ping to 2 s), and refused
// or cut connections fail in milliseconds. The others bound waits for the
// server to notice a change.
const (
	failFast        = 10 * time.Second
	healthFlip      = 20 * time.Second // the watcher pings every 5 s with a 2 s timeout
	recoveryTimeout = 20 * time.Second
)

// proxiedDB is a fresh PostgreSQL schema behind a tcpproxy.
type proxiedDB struct {
	proxy   *tcpproxy.Proxy
	Proxied string // the URL through the proxy, for the server
	Direct  string // the URL straight to PostgreSQL, for the checks
}

func newProxiedDB(t *testing.T) proxiedDB {
	t.Helper()
	direct := pgURL(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	px, err := tcpproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	u.Host = px.Addr() // keeps the user, database, sslmode and search_path
	return proxiedDB{proxy: px, Proxied: u.String(), Direct: direct}
}

// TestDatabaseDownFailsFastAndRecovers takes the database away under a
// running server (connections cut, new ones refused): every call answers
// UNAVAILABLE / 503 quickly, health reports it, nothing is half-written,
// and the same process serves again once the database is back.
func TestDatabaseDownFailsFastAndRecovers(t *testing.T) {
	t.Parallel()
	db := newProxiedDB(t)
	srv := startServer(t, "--database-url", db.Proxied)
	ctx := ctxFor(t)
	const key = "dbdown:op-1"

	register(t, ctx, srv, key)
	cl, err := srv.Client.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "worker-1"})
	if err != nil || !cl.GetClaimed() || cl.GetAttempt() != 1 {
		t.Fatalf("claim: %v %v", cl, err)
	}
	before := readJournal(t, db.Direct)
	waitHealth(t, srv, healthpb.HealthCheckResponse_SERVING)

	db.proxy.Close()
	down := time.Now()

	// Every call fails fast with UNAVAILABLE, over both transports.
	var slowest time.Duration
	for _, c := range outageCalls(key, "dbdown:grpc-during", "dbdown:rest-during") {
		start := time.Now()
		err := c.check(srv)
		d := time.Since(start)
		if err != nil {
			t.Fatalf("database down: %s: %v", c.name, err)
		}
		t.Logf("database down: %-20s UNAVAILABLE in %v", c.name, d.Round(time.Millisecond))
		if d > failFast {
			t.Errorf("%s took %v to fail, want < %v", c.name, d, failFast)
		}
		slowest = max(slowest, d)
	}
	waitHealth(t, srv, healthpb.HealthCheckResponse_NOT_SERVING)
	t.Logf("database down: slowest call %v; gRPC health NOT_SERVING after %v", slowest.Round(time.Millisecond), time.Since(down).Round(time.Millisecond))
	if srv.Exited() {
		t.Fatalf("the server exited with the database down:\n%s", srv.Stderr())
	}

	// The database comes back: the same process serves again by itself.
	if err := db.proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	recovered := waitRegister(t, srv, "dbdown:after")
	t.Logf("database back: first successful Register after %v", recovered.Round(time.Millisecond))
	if r := do(t, http.MethodGet, srv.BaseURL+"/healthz", nil); r.Status != http.StatusOK {
		t.Fatalf("healthz after recovery: %d %s", r.Status, r.Body)
	}
	waitHealth(t, srv, healthpb.HealthCheckResponse_SERVING)
	t.Logf("database back: gRPC health SERVING after %v", time.Since(up).Round(time.Millisecond))

	// No partial writes: the claimed operation and its history are exactly
	// as before the outage; a key registered during it exists completely
	// or not at all (here the connection was refused, so not at all).
	after := readJournal(t, db.Direct)
	checkJournal(t, after)
	if !slices.Equal(after[key].events, before[key].events) || after[key].status != "in_progress" || after[key].attempt != 1 {
		t.Fatalf("%s changed during the outage:\nbefore %+v\nafter  %+v", key, before[key], after[key])
	}
	op := lookup(t, ctx, srv.Client, key)
	if op.GetAttemptCount() != 1 || op.GetExternalId() != "" ||
		(op.GetStatus() != pb.Status_STATUS_IN_PROGRESS && op.GetStatus() != pb.Status_STATUS_UNKNOWN) {
		t.Fatalf("%s after the outage: %v", key, op)
	}
	for _, k := range []string{"dbdown:grpc-during", "dbdown:rest-during"} {
		if _, ok := after[k]; ok {
			t.Errorf("%s was registered while the database refused connections: %+v", k, after[k])
		}
		_, err := srv.Client.Lookup(ctx, &pb.LookupRequest{OperationKey: k})
		wantGRPCError(t, err, codes.NotFound, opjournal.CodeNotFound, "operation_key")
	}
	if len(after) != 2 {
		t.Errorf("operations after the outage: %v, want %s and dbdown:after", keysOf(after), key)
	}

	// And the work goes on where it stopped.
	ms, err := srv.Client.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: 1, ExternalId: "pay_1"})
	if err != nil || ms.GetOperation().GetStatus() != pb.Status_STATUS_SUCCEEDED {
		t.Fatalf("MarkSucceeded after the outage: %v %v", ms, err)
	}
}

// TestDatabaseDownSilently makes the database silently dead (connections
// open, nothing answers: a network partition): calls must still answer
// UNAVAILABLE within the store's bounds instead of hanging until the
// client's deadline. Statements held by the partition are delivered when
// it heals, so a call answered UNAVAILABLE may have taken effect: each
// such change must be complete, with its history.
func TestDatabaseDownSilently(t *testing.T) {
	t.Parallel()
	db := newProxiedDB(t)
	srv := startServer(t, "--database-url", db.Proxied)
	ctx := ctxFor(t)
	const key = "stall:op-1"

	register(t, ctx, srv, key)
	cl, err := srv.Client.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "worker-1"})
	if err != nil || !cl.GetClaimed() || cl.GetAttempt() != 1 {
		t.Fatalf("claim: %v %v", cl, err)
	}
	waitHealth(t, srv, healthpb.HealthCheckResponse_SERVING)

	// A call just before the partition leaves a connection that the pool
	// hands out again without a liveness ping (it pings those idle for more
	// than a second): the statement of one of the calls below is then sent
	// into the partition, and delivered when it heals.
	lookup(t, ctx, srv.Client, key)
	db.proxy.Stall()
	down := time.Now()

	// All at once: each call waits for a bound, so one after the other
	// would take a minute.
	calls := outageCalls(key, "stall:grpc-during", "stall:rest-during")
	took, errs := make([]time.Duration, len(calls)), make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			start := time.Now()
			errs[i] = c.check(srv)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, c := range calls {
		switch {
		case errs[i] != nil:
			t.Errorf("database silent: %s after %v: %v", c.name, took[i].Round(time.Millisecond), errs[i])
		case took[i] > failFast:
			t.Errorf("database silent: %s took %v to fail, want < %v", c.name, took[i], failFast)
		default:
			t.Logf("database silent: %-20s UNAVAILABLE in %v", c.name, took[i].Round(time.Millisecond))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	waitHealth(t, srv, healthpb.HealthCheckResponse_NOT_SERVING)
	t.Logf("database silent: gRPC health NOT_SERVING after %v", time.Since(down).Round(time.Millisecond))
	if srv.Exited() {
		t.Fatalf("the server exited with the database silent:\n%s", srv.Stderr())
	}

	if err := db.proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	recovered := waitRegister(t, srv, "stall:after")
	t.Logf("database back: first successful Register after %v", recovered.Round(time.Millisecond))
	waitHealth(t, srv, healthpb.HealthCheckResponse_SERVING)
	t.Logf("database back: gRPC health SERVING after %v", time.Since(up).Round(time.Millisecond))

	// Whatever the partition let through is whole: rows agree with their
	// histories, and the API shows the same.
	j := readJournal(t, db.Direct)
	checkJournal(t, j)
	for _, k := range []string{key, "stall:grpc-during", "stall:rest-during"} {
		row, exists := j[k]
		res, err := srv.Client.Lookup(ctx, &pb.LookupRequest{OperationKey: k})
		switch {
		case !exists:
			wantGRPCError(t, err, codes.NotFound, opjournal.CodeNotFound, "operation_key")
			t.Logf("%s: not written", k)
		case err != nil:
			t.Fatalf("Lookup %s: %v", k, err)
		default:
			if res.GetOperation().GetAttemptCount() != int32(row.attempt) {
				t.Errorf("%s: Lookup says attempt %d, the database %d", k, res.GetOperation().GetAttemptCount(), row.attempt)
			}
			t.Logf("%s: %s, attempt %d, %d event(s): %v", k, row.status, row.attempt, len(row.events), row.events)
		}
	}
}

// TestDatabaseDownDuringBurst cuts the database in the middle of a burst of
// concurrent registrations: every key acknowledged exists with its
// registration event, every key that exists has exactly one, and retrying
// the failed ones after recovery creates or replays each exactly once.
func TestDatabaseDownDuringBurst(t *testing.T) {
	t.Parallel()
	db := newProxiedDB(t)
	srv := startServer(t, "--database-url", db.Proxied)
	ctx := ctxFor(t)

	const workers = 32
	type result struct {
		key     string
		created bool
		err     string // "" on success
	}
	var (
		mu      sync.Mutex
		results []result
		acked   atomic.Int64
		wg      sync.WaitGroup
	)
	stop := time.Now().Add(callTimeout)
	for w := range workers {
		wg.Go(func() {
			// Each worker registers new keys until its first failure;
			// even workers over gRPC, odd ones over REST.
			for i := 0; time.Now().Before(stop); i++ {
				key := fmt.Sprintf("burst:w%02d:%05d", w, i)
				r := result{key: key}
				if w%2 == 0 {
					res, err := srv.Client.Register(ctx, registerRequest(key))
					switch {
					case err == nil:
						r.created = res.GetCreated()
					case status.Code(err) == codes.Unavailable && client.CodeOf(err) == opjournal.CodeUnavailable:
						r.err = "UNAVAILABLE"
					default:
						r.err = fmt.Sprintf("unexpected error: %v", err)
					}
				} else {
					resp, err := restRegister(srv, key)
					var body struct {
						Created bool                  `json:"created"`
						Error   struct{ Code string } `json:"error"`
					}
					switch {
					case err != nil:
						r.err = fmt.Sprintf("transport error: %v", err)
					case json.Unmarshal(resp.Body, &body) != nil:
						r.err = fmt.Sprintf("unexpected answer %d %s", resp.Status, resp.Body)
					case resp.Status == http.StatusOK:
						r.created = body.Created
					case resp.Status == http.StatusServiceUnavailable && body.Error.Code == string(opjournal.CodeUnavailable):
						r.err = "UNAVAILABLE"
					default:
						r.err = fmt.Sprintf("unexpected answer %d %s", resp.Status, resp.Body)
					}
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				if r.err != "" {
					return
				}
				acked.Add(1)
			}
		})
	}
	// Cut in the middle: once the burst is well under way.
	eventually(t, callTimeout, func() (bool, string) {
		return acked.Load() >= 300, fmt.Sprintf("%d registrations acknowledged", acked.Load())
	})
	db.proxy.Close()
	cut := time.Now()
	wg.Wait()
	t.Logf("burst: %d registrations acknowledged, every worker failed within %v of the cut", acked.Load(), time.Since(cut).Round(time.Millisecond))

	ok, failed := map[string]bool{}, []string{}
	for _, r := range results {
		switch {
		case r.err == "":
			if !r.created {
				t.Errorf("%s: a new key answered created=false", r.key)
			}
			ok[r.key] = true
		case r.err == "UNAVAILABLE":
			failed = append(failed, r.key)
		default:
			t.Errorf("%s: %s", r.key, r.err)
		}
	}
	if len(failed) != workers {
		t.Errorf("%d failed calls, want one per worker (%d)", len(failed), workers)
	}

	if err := db.proxy.Resume(); err != nil {
		t.Fatal(err)
	}
	recovered := waitRegister(t, srv, "burst:after")
	t.Logf("burst: first successful Register %v after the database came back", recovered.Round(time.Millisecond))

	j := readJournal(t, db.Direct)
	checkJournal(t, j)
	for k := range ok {
		if row, exists := j[k]; !exists || len(row.events) != 1 || row.status != "pending" {
			t.Errorf("acknowledged %s: %+v (exists %v), want pending with its registration event", k, row, exists)
		}
	}
	reached := 0
	for _, k := range failed {
		if _, exists := j[k]; exists {
			reached++
		}
	}
	t.Logf("burst: %d of %d calls cut by the outage had reached the database (complete: row and event)", reached, len(failed))
	if len(j) != len(ok)+reached+1 {
		t.Errorf("%d operations in the database, want %d acknowledged + %d cut after reaching it + 1", len(j), len(ok), reached)
	}

	// The client's retry of each failed call is safe: created if the first
	// attempt did not land, a replay if it did. Never twice.
	for _, k := range failed {
		_, existed := j[k]
		res, err := srv.Client.Register(ctx, registerRequest(k))
		if err != nil {
			t.Fatalf("retry %s: %v", k, err)
		}
		if res.GetCreated() == existed {
			t.Errorf("retry %s: created=%v, but it existed=%v", k, res.GetCreated(), existed)
		}
	}
	j = readJournal(t, db.Direct)
	checkJournal(t, j)
	for _, k := range failed {
		if row := j[k]; len(row.events) != 1 {
			t.Errorf("%s after the retry: %+v, want exactly one registration", k, row)
		}
	}
}

// --- calls during an outage ---

// outageCall is one call that must fail with UNAVAILABLE / 503. check
// returns what is wrong with the answer (it may run on any goroutine).
type outageCall struct {
	name  string
	check func(srv *proc) error
}

// outageCalls are Register (a new key), Claim, MarkSucceeded and Lookup of
// key over gRPC and REST, and GET /healthz.
func outageCalls(key, grpcNew, restNew string) []outageCall {
	grpcCall := func(name string, f func(ctx context.Context, c pb.JournalServiceClient) error) outageCall {
		return outageCall{"gRPC " + name, func(srv *proc) error {
			// The deadline is far beyond failFast, so a hang shows as slow
			// rather than as the client's own DEADLINE_EXCEEDED.
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			err := f(ctx, srv.Client)
			if status.Code(err) != codes.Unavailable || client.CodeOf(err) != opjournal.CodeUnavailable {
				return fmt.Errorf("got %v, want Unavailable with ErrorInfo reason UNAVAILABLE", err)
			}
			return nil
		}}
	}
	restCall := func(name, method, path string, body any) outageCall {
		return outageCall{name, func(srv *proc) error {
			var r io.Reader
			if body != nil {
				b, err := json.Marshal(body)
				if err != nil {
					return err
				}
				r = bytes.NewReader(b)
			}
			req, err := http.NewRequest(method, srv.BaseURL+path, r)
			if err != nil {
				return err
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			var e apiError
			if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(data, &e) != nil ||
				e.Error.Code != string(opjournal.CodeUnavailable) || e.Error.Message == "" {
				return fmt.Errorf("got %d %s, want 503 with code UNAVAILABLE", resp.StatusCode, data)
			}
			return nil
		}}
	}
	return []outageCall{
		grpcCall("Register", func(ctx context.Context, c pb.JournalServiceClient) error {
			_, err := c.Register(ctx, registerRequest(grpcNew))
			return err
		}),
		grpcCall("Claim", func(ctx context.Context, c pb.JournalServiceClient) error {
			_, err := c.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "worker-2"})
			return err
		}),
		grpcCall("MarkSucceeded", func(ctx context.Context, c pb.JournalServiceClient) error {
			_, err := c.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: 1, ExternalId: "pay_grpc"})
			return err
		}),
		grpcCall("Lookup", func(ctx context.Context, c pb.JournalServiceClient) error {
			_, err := c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
			return err
		}),
		restCall("REST register", http.MethodPost, "/v1/operations:register", registerBody(restNew)),
		restCall("REST claim", http.MethodPost, "/v1/operations:claim", map[string]any{"operation_key": key, "worker_id": "worker-3"}),
		restCall("REST markSucceeded", http.MethodPost, "/v1/operations:markSucceeded",
			map[string]any{"operation_key": key, "attempt": 1, "external_id": "pay_rest"}),
		restCall("REST lookup", http.MethodGet, "/v1/operations:lookup?operation_key="+url.QueryEscape(key), nil),
		restCall("GET /healthz", http.MethodGet, "/healthz", nil),
	}
}

// --- registering ---

func registerRequest(key string) *pb.RegisterRequest {
	p, err := structpb.NewStruct(map[string]any{"order_id": key, "amount_minor": 1000, "currency": "EUR"})
	if err != nil {
		panic(err)
	}
	return &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment", Payload: p}
}

func registerBody(key string) map[string]any {
	return map[string]any{"operation_key": key, "action_type": "create_payment",
		"payload": map[string]any{"order_id": key, "amount_minor": 1000, "currency": "EUR"}}
}

func register(t *testing.T, ctx context.Context, srv *proc, key string) {
	t.Helper()
	res, err := srv.Client.Register(ctx, registerRequest(key))
	if err != nil || !res.GetCreated() {
		t.Fatalf("register %s: %v %v", key, res, err)
	}
}

// waitRegister polls Register of a new key until it succeeds and returns
// how long that took.
func waitRegister(t *testing.T, srv *proc, key string) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, recoveryTimeout, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), failFast)
		defer cancel()
		res, err := srv.Client.Register(ctx, registerRequest(key))
		if err != nil && status.Code(err) != codes.Unavailable {
			t.Fatalf("Register while the database comes back: %v (want success or UNAVAILABLE)", err)
		}
		return err == nil, fmt.Sprintf("Register %s: %v %v", key, res, err)
	})
	return time.Since(start)
}

// restRegister is post without t: it runs on many goroutines, which must
// not stop the test.
func restRegister(srv *proc, key string) (restResponse, error) {
	body, err := json.Marshal(registerBody(key))
	if err != nil {
		return restResponse{}, err
	}
	resp, err := httpClient.Post(srv.BaseURL+"/v1/operations:register", "application/json", bytes.NewReader(body))
	if err != nil {
		return restResponse{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return restResponse{Status: resp.StatusCode, Body: data}, err
}

// waitHealth waits until the gRPC health service reports want.
func waitHealth(t *testing.T, srv *proc, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	health := healthpb.NewHealthClient(srv.Conn)
	eventually(t, healthFlip, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), failFast)
		defer cancel()
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: pb.JournalService_ServiceDesc.ServiceName})
		return err == nil && res.GetStatus() == want, fmt.Sprintf("health %v %v, want %v", res, err, want)
	})
}

// --- the database, read directly ---

// journalRow is an operation and its history as stored.
type journalRow struct {
	status  string
	attempt int
	events  []journalEvent
}

type journalEvent struct {
	ID       int64
	From, To string
	Attempt  int
	Reason   string
}

// readJournal reads every operation and every event of the schema, and
// fails on an event without an operation.
func readJournal(t *testing.T, dbURL string) map[string]journalRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	j := map[string]journalRow{}
	rows, err := conn.Query(ctx, `SELECT operation_key, status, attempt_count FROM operations`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var r journalRow
		if err := rows.Scan(&k, &r.status, &r.attempt); err != nil {
			t.Fatal(err)
		}
		j[k] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = conn.Query(ctx, `SELECT operation_key, id, coalesce(from_status, ''), to_status, attempt, reason
		FROM operation_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var e journalEvent
		if err := rows.Scan(&k, &e.ID, &e.From, &e.To, &e.Attempt, &e.Reason); err != nil {
			t.Fatal(err)
		}
		r, ok := j[k]
		if !ok {
			t.Fatalf("event %+v of %s, which does not exist", e, k)
		}
		r.events = append(r.events, e)
		j[k] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return j
}

// checkJournal fails unless every operation agrees with its history: it
// starts with exactly one registration, each event starts where the
// previous one ended, the last one ends in the stored status, and every
// claim in it is counted in attempt_count.
func checkJournal(t *testing.T, j map[string]journalRow) {
	t.Helper()
	for _, k := range keysOf(j) {
		r := j[k]
		if len(r.events) == 0 {
			t.Errorf("%s: %+v has no history", k, r)
			continue
		}
		claims := 0
		for i, e := range r.events {
			switch {
			case i == 0 && e.From != "":
				t.Errorf("%s: the first event %+v is not a registration", k, e)
			case i > 0 && e.From == "":
				t.Errorf("%s: a second registration %+v", k, e)
			case i > 0 && e.From != r.events[i-1].To:
				t.Errorf("%s: event %+v does not start where %+v ended", k, e, r.events[i-1])
			}
			if e.Reason == "claimed" || e.Reason == "registered and claimed" {
				claims++
			}
		}
		if last := r.events[len(r.events)-1]; last.To != r.status || claims != r.attempt {
			t.Errorf("%s: stored %s attempt %d, history %+v", k, r.status, r.attempt, r.events)
		}
	}
}

func keysOf(j map[string]journalRow) []string {
	ks := make([]string, 0, len(j))
	for k := range j {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
