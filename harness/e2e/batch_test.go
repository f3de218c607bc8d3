package e2e

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestGroupCommitOverTheWire runs 48 fused operations at once through the
// real server on PostgreSQL: every one ends succeeded with its own
// history, and the server's metrics account for every call the store
// grouped (each Register and MarkSucceeded exactly once). The registers
// are made to queue behind a table lock the test holds, so the store must
// carry the 47 waiting ones in a shared statement: with batching off (or
// broken) the test fails.
func TestGroupCommitOverTheWire(t *testing.T) {
	t.Parallel()
	dbURL := pgURL(t)
	srv := startServer(t, "--database-url", dbURL)
	ctx := ctxFor(t)
	const n = 48
	// Hold the table: the first Register's statement blocks on the lock,
	// and the other calls queue in the store's batcher.
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE operations IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("group:%d", i)
			r, err := srv.Client.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
				Payload: mustStruct(t, fmt.Sprintf(`{"order_id":"%d","amount_minor":100,"currency":"EUR"}`, i)),
				Claim:   &pb.ClaimOptions{WorkerId: "w"}})
			if err != nil || !r.GetClaimed() {
				errs[i] = fmt.Errorf("register %s: %v (claimed %v)", key, err, r.GetClaimed())
				return
			}
			_, err = srv.Client.MarkSucceeded(ctx, &pb.MarkSucceededRequest{OperationKey: key, Attempt: r.GetAttempt(), ExternalId: "pay_" + key})
			errs[i] = err
		})
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		w := gauge(t, srv, "opjournal_store_batch_waiting", "register")
		return w == n-1, fmt.Sprintf("%d registers queued behind the lock, want %d", w, n-1)
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("operation %d: %v", i, err)
		}
	}
	for i := range n {
		key := fmt.Sprintf("group:%d", i)
		op := lookup(t, ctx, srv.Client, key)
		if op.GetStatus() != pb.Status_STATUS_SUCCEEDED || op.GetExternalId() != "pay_"+key || op.GetAttemptCount() != 1 {
			t.Errorf("%s: %v", key, op)
		}
		evs, err := srv.Client.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
		if err != nil || len(evs.GetEvents()) != 2 {
			t.Errorf("%s: history %v, %v; want 2 events", key, evs.GetEvents(), err)
		}
	}

	r := do(t, http.MethodGet, srv.BaseURL+"/metrics", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("metrics: %d", r.Status)
	}
	metric := func(name, kind string) int {
		m := regexp.MustCompile(`(?m)^` + name + `\{kind="` + kind + `"\} (\d+)$`).FindStringSubmatch(string(r.Body))
		if m == nil {
			t.Fatalf("metrics lack %s{kind=%q}:\n%s", name, kind, grepLines(string(r.Body), "opjournal_store_batch"))
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	for _, kind := range []string{"register", "mark_succeeded"} {
		calls, statements := metric("opjournal_store_batch_calls_total", kind), metric("opjournal_store_batch_statements_total", kind)
		if calls != n || statements < 1 || statements > calls {
			t.Errorf("%s: %d calls in %d statements, want %d calls in 1…%d statements", kind, calls, statements, n, n)
		}
		// The first Register ran alone; the 47 queued behind the lock
		// share statements of at most 64 calls: one.
		if kind == "register" && statements != 2 {
			t.Errorf("register: %d statements for %d calls, want 2 (one alone, one shared)", statements, calls)
		}
		if w := metric("opjournal_store_batch_waiting", kind); w != 0 {
			t.Errorf("%s: %d calls still waiting", kind, w)
		}
		t.Logf("%s: %d calls in %d statements", kind, calls, statements)
	}
}

// gauge reads one store batch metric of a server.
func gauge(t *testing.T, srv *proc, name, kind string) int {
	t.Helper()
	r := do(t, http.MethodGet, srv.BaseURL+"/metrics", nil)
	m := regexp.MustCompile(`(?m)^` + name + `\{kind="` + kind + `"\} (\d+)$`).FindStringSubmatch(string(r.Body))
	if m == nil {
		return -1
	}
	v, _ := strconv.Atoi(m[1])
	return v
}
