package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	opjournal "github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The SQL of docs/operating.md (the reference table of docs/spec.md), retention, business references and payload
// schemas, against the real binaries and the real database shells.

// sqlShell runs query on the journal at dbURL with the database's own
// shell (sqlite3, or psql in the test's schema) and returns its output:
// one row per line, columns separated by "|".
func sqlShell(t *testing.T, dbURL, query string) (string, error) {
	t.Helper()
	var cmd *exec.Cmd
	if path, ok := strings.CutPrefix(dbURL, "sqlite://"); ok {
		cmd = exec.Command("sqlite3", "-batch", path, query)
	} else {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		schema := q.Get("search_path")
		q.Del("search_path")
		u.RawQuery = q.Encode()
		cmd = exec.Command("psql", "-X", "-q", "-A", "-t", "-F", "|", "-v", "ON_ERROR_STOP=1", u.String(), "-c", query)
		cmd.Env = append(cmd.Environ(), "PGOPTIONS=-c search_path="+schema)
	}
	out, err := cmd.CombinedOutput()
	if _, missing := err.(*exec.Error); missing {
		t.Fatalf("%s is required for this test (scripts/deps.sh installs it): %v", cmd.Path, err)
	}
	return strings.TrimSpace(string(out)), err
}

// mustSQL is sqlShell that fails the test on an error.
func mustSQL(t *testing.T, dbURL, query string) string {
	t.Helper()
	out, err := sqlShell(t, dbURL, query)
	if err != nil {
		t.Fatalf("%s: %v\n%s", query, err, out)
	}
	return out
}

// age moves rows into the past in the database itself (the server's
// clock cannot be moved from outside): every time of the rows matching
// where goes back by days.
func age(t *testing.T, dbURL, where string, days int) {
	t.Helper()
	if strings.HasPrefix(dbURL, "sqlite://") {
		d := days * 86_400_000
		mustSQL(t, dbURL, fmt.Sprintf(`UPDATE operations SET updated_at = updated_at - %d, created_at = created_at - %d,
			lease_until = lease_until - %d WHERE %s`, d, d, d, where))
		return
	}
	iv := fmt.Sprintf("interval '%d days'", days)
	mustSQL(t, dbURL, fmt.Sprintf(`UPDATE operations SET updated_at = updated_at - %s, created_at = created_at - %s,
		lease_until = lease_until - %s WHERE %s`, iv, iv, iv, where))
}

// paid registers a payment, claims it and records its effect over REST.
func paid(t *testing.T, srv *proc, key, order string) {
	t.Helper()
	r := post(t, srv, "register", map[string]any{"operation_key": key, "action_type": "create_payment",
		"payload": map[string]any{"order_id": order, "amount_minor": 490000, "currency": "RUB"},
		"refs":    map[string]any{"order_id": order}, "claim": map[string]any{"worker_id": "w"}})
	if r.Status != http.StatusOK {
		t.Fatalf("register %s: %d %s", key, r.Status, r.Body)
	}
	r = post(t, srv, "markSucceeded", map[string]any{"operation_key": key, "attempt": 1, "external_id": "pay_" + order})
	if r.Status != http.StatusOK {
		t.Fatalf("mark succeeded %s: %d %s", key, r.Status, r.Body)
	}
}

// TestSpecSQLRunsVerbatim: the two "safe queries" of docs/spec.md run as
// written, through sqlite3 and psql, on a journal the real server wrote;
// the view shows an expired lease as unknown and refuses writes.
func TestSpecSQLRunsVerbatim(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		srv := startServer(t, "--database-url", dbURL)
		paid(t, srv, "payment:order-817:intent-01", "817")
		r := post(t, srv, "register", map[string]any{"operation_key": "payment:order-818:intent-01", "action_type": "create_payment",
			"payload": map[string]any{"order_id": "818", "amount_minor": 100, "currency": "RUB"}, "claim": map[string]any{"worker_id": "w"}})
		if r.Status != http.StatusOK {
			t.Fatalf("register: %d %s", r.Status, r.Body)
		}
		// The worker vanished: its lease ended an hour ago.
		age(t, dbURL, "operation_key = 'payment:order-818:intent-01'", 0)
		if strings.HasPrefix(dbURL, "sqlite://") {
			mustSQL(t, dbURL, "UPDATE operations SET lease_until = lease_until - 3600000 WHERE operation_key = 'payment:order-818:intent-01'")
		} else {
			mustSQL(t, dbURL, "UPDATE operations SET lease_until = lease_until - interval '1 hour' WHERE operation_key = 'payment:order-818:intent-01'")
		}

		// The two queries, verbatim.
		got := mustSQL(t, dbURL, `SELECT operation_key, status, attempt_count, external_id
FROM agent_operations
WHERE operation_key = 'payment:order-817:intent-01';`)
		if got != "payment:order-817:intent-01|succeeded|1|pay_817" {
			t.Errorf("first query: %q", got)
		}
		if got := mustSQL(t, dbURL, `SELECT operation_key, COUNT(*) AS rows_per_key
FROM agent_operations
GROUP BY operation_key
HAVING COUNT(*) > 1;`); got != "" {
			t.Errorf("second query found duplicates: %q", got)
		}
		// The other columns of the reference table.
		got = mustSQL(t, dbURL, `SELECT operation_key, action_type, length(request_hash), status, result_json IS NULL, error_code IS NULL,
			lease_until IS NOT NULL, created_at IS NOT NULL, updated_at IS NOT NULL FROM agent_operations ORDER BY operation_key`)
		want := "payment:order-817:intent-01|create_payment|64|succeeded|1|1|0|1|1\npayment:order-818:intent-01|create_payment|64|unknown|1|1|1|1|1"
		if !strings.HasPrefix(dbURL, "sqlite://") {
			want = strings.NewReplacer("|1", "|t", "|0", "|f").Replace(want)
		}
		if got != want {
			t.Errorf("columns:\n%s\nwant\n%s", got, want)
		}
		// Read-only: the journal's rows change only through its API.
		for _, stmt := range []string{
			"UPDATE agent_operations SET status = 'pending' WHERE operation_key = 'payment:order-817:intent-01'",
			"DELETE FROM agent_operations",
			"INSERT INTO agent_operations (operation_key, action_type, request_hash, status) VALUES ('x', 'create_payment', 'h', 'pending')",
		} {
			if out, err := sqlShell(t, dbURL, stmt); err == nil {
				t.Errorf("%s: accepted (%s)", stmt, out)
			}
		}
		if op := lookup(t, ctxFor(t), srv.Client, "payment:order-817:intent-01"); op.GetStatus() != pb.Status_STATUS_SUCCEEDED {
			t.Fatalf("after the refused writes: %v", op)
		}
	})
}

// TestPurgeCommand: `opjournal purge --dry-run` says what would go and
// deletes nothing; `opjournal purge` removes exactly the terminal
// operations older than their retention, with their history; a purged key
// registered again is a new operation.
func TestPurgeCommand(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		srv := startServer(t, "--database-url", dbURL, "--purge-interval", "0")
		for i := range 3 {
			paid(t, srv, fmt.Sprintf("pay-%d", i), fmt.Sprint(900+i))
		}
		if r := post(t, srv, "register", map[string]any{"operation_key": "old-pending", "action_type": "create_payment",
			"payload": map[string]any{"order_id": "1", "amount_minor": 100, "currency": "RUB"}}); r.Status != http.StatusOK {
			t.Fatal(r.Body)
		}
		age(t, dbURL, "operation_key IN ('pay-0', 'pay-1', 'old-pending')", 31) // past create_payment's 720h

		code, out := runBinary(t, serverOpts{}, "purge", "--dry-run", "--database-url", dbURL)
		if code != 0 {
			t.Fatalf("purge --dry-run: exit %d\n%s", code, out)
		}
		for _, want := range []string{
			"dry run: nothing is deleted",
			"create_payment (retention 720h): would remove 2 operations and 4 history entries, last changed from ",
			"send_email (retention 720h): nothing to remove",
			"total: would remove 2 operations and 4 history entries",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("dry run output lacks %q:\n%s", want, out)
			}
		}
		// -o json: one object per action, a line each, on stdout.
		code, jsonOut, errOut := runSplit(t, nil, "opjournal", "purge", "--dry-run", "-o", "json", "--database-url", dbURL)
		if code != 0 {
			t.Fatalf("purge --dry-run -o json: exit %d\n%s", code, errOut)
		}
		records := map[string]map[string]any{}
		for _, line := range strings.Split(strings.TrimSpace(jsonOut), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("purge -o json: a line is not JSON: %v\n%s", err, jsonOut)
			}
			records[rec["action"].(string)] = rec
		}
		if p := records["create_payment"]; p["operations"] != 2.0 || p["events"] != 4.0 || p["dry_run"] != true || p["retention"] != "720h" || p["oldest"] == nil {
			t.Errorf("purge -o json: create_payment is %v\n%s", p, jsonOut)
		}
		if e := records["send_email"]; e == nil || e["operations"] != 0.0 || e["oldest"] != nil {
			t.Errorf("purge -o json: send_email is %v\n%s", e, jsonOut)
		}
		for _, k := range []string{"pay-0", "pay-1", "pay-2", "old-pending"} {
			lookup(t, ctxFor(t), srv.Client, k) // all still there
		}

		code, out = runBinary(t, serverOpts{}, "purge", "--action", "create_payment", "--database-url", dbURL)
		if code != 0 || !regexp.MustCompile(`create_payment \(retention 720h\): removed 2 operations and 4 history entries`).MatchString(out) {
			t.Fatalf("purge: exit %d\n%s", code, out)
		}
		for _, k := range []string{"pay-0", "pay-1"} {
			r := do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key="+k, nil)
			wantRESTError(t, r, http.StatusNotFound, opjournal.CodeNotFound, "operation_key")
		}
		lookup(t, ctxFor(t), srv.Client, "pay-2")       // recent
		lookup(t, ctxFor(t), srv.Client, "old-pending") // never: not terminal
		// The purged key is unknown again: registering it makes a new operation.
		r := post(t, srv, "register", map[string]any{"operation_key": "pay-0", "action_type": "create_payment",
			"payload": map[string]any{"order_id": "900", "amount_minor": 490000, "currency": "RUB"}})
		if r.Status != http.StatusOK || r.JSON(t)["created"] != true {
			t.Fatalf("register after purge: %d %s", r.Status, r.Body)
		}
		// Bad command lines change nothing and say why.
		if code, out := runBinary(t, serverOpts{}, "purge", "--action", "delete_everything", "--database-url", dbURL); code == 0 || !strings.Contains(out, "UNKNOWN_ACTION") {
			t.Errorf("unknown action: exit %d\n%s", code, out)
		}
		if code, out := runBinary(t, serverOpts{}, "purge", "--purge-batch", "0", "--database-url", dbURL); code == 0 || !strings.Contains(out, "--purge-batch") {
			t.Errorf("batch 0: exit %d\n%s", code, out)
		}
	})
	t.Run("no journal", func(t *testing.T) {
		t.Parallel()
		code, out := runBinary(t, serverOpts{}, "purge", "--database-url", "sqlite://"+t.TempDir()+"/missing.db")
		if code == 0 || !strings.Contains(out, "no journal at") {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})
}

// TestServerPurgesOnInterval: the server purges by itself and says so in
// its metrics.
func TestServerPurgesOnInterval(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		srv := startServer(t, "--database-url", dbURL, "--purge-interval", "100ms")
		paid(t, srv, "pay-old", "1")
		paid(t, srv, "pay-new", "2")
		age(t, dbURL, "operation_key = 'pay-old'", 31)
		eventually(t, callTimeout, func() (bool, string) {
			r := do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key=pay-old", nil)
			return r.Status == http.StatusNotFound, fmt.Sprintf("pay-old: %d", r.Status)
		})
		lookup(t, ctxFor(t), srv.Client, "pay-new")
		eventually(t, callTimeout, func() (bool, string) {
			m := string(do(t, http.MethodGet, srv.BaseURL+"/metrics", nil).Body)
			ok := strings.Contains(m, `opjournal_purged_operations_total{action="create_payment"} 1`) &&
				strings.Contains(m, `opjournal_purged_events_total{action="create_payment"} 2`) &&
				regexp.MustCompile(`opjournal_oldest_terminal_age_seconds\{action="create_payment"\} [0-9.e+-]+`).MatchString(m)
			return ok, "metrics lack the purge"
		})
	})
}

// TestRESTRefsAndSchemas: refs are stored, searched with
// refs[NAME]=VALUE (all must match) and fixed at registration; a payload
// that fails its action's payload_schema is refused with the JSON pointer
// of the offending member and without its value; children are found by
// their parent.
func TestRESTRefsAndSchemas(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	reg := func(key string, payload map[string]any, refs map[string]any, parent string) restResponse {
		body := map[string]any{"operation_key": key, "action_type": "create_payment", "payload": payload, "refs": refs}
		if parent != "" {
			body["action_type"], body["parent_key"] = "send_email", parent
		}
		return post(t, srv, "register", body)
	}
	pay := map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
	for _, r := range []restResponse{
		reg("op_a", pay, map[string]any{"order_id": "817", "customer": "c-93"}, ""),
		reg("op_b", pay, map[string]any{"order_id": "817", "customer": "c-7"}, ""),
		reg("op_c", pay, map[string]any{"order_id": "900"}, ""),
		reg("op_a.receipt", map[string]any{"to": "c-93@example.com"}, nil, "op_a"),
	} {
		if r.Status != http.StatusOK {
			t.Fatalf("register: %d %s", r.Status, r.Body)
		}
	}
	keys := func(query string) string {
		t.Helper()
		r := do(t, http.MethodGet, srv.BaseURL+"/v1/operations?"+query, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("list %s: %d %s", query, r.Status, r.Body)
		}
		var ks []string
		for _, op := range r.JSON(t)["operations"].([]any) {
			ks = append(ks, op.(map[string]any)["operation_key"].(string))
		}
		return strings.Join(ks, ",")
	}
	if got := keys("refs[order_id]=817"); got != "op_a,op_b" {
		t.Errorf("refs[order_id]=817: %s", got)
	}
	if got := keys("refs[order_id]=817&refs[customer]=c-93"); got != "op_a" {
		t.Errorf("two refs: %s", got)
	}
	if got := keys("parent_key=op_a"); got != "op_a.receipt" {
		t.Errorf("parent_key=op_a: %s", got)
	}
	if got := keys("refs[order_id]=1"); got != "" {
		t.Errorf("no match: %s", got)
	}
	r := do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key=op_a", nil)
	if refs := r.JSON(t)["operation"].(map[string]any)["refs"].(map[string]any); refs["order_id"] != "817" || refs["customer"] != "c-93" {
		t.Errorf("lookup refs: %v", refs)
	}
	wantRESTError(t, do(t, http.MethodGet, srv.BaseURL+"/v1/operations?refs[Order]=1", nil), http.StatusBadRequest, opjournal.CodeInvalidArgument, "refs")

	// Refs are fixed: the same refs replay, other refs conflict.
	if r := reg("op_a", pay, map[string]any{"customer": "c-93", "order_id": "817"}, ""); r.Status != http.StatusOK || r.JSON(t)["created"] != false {
		t.Errorf("replay: %d %s", r.Status, r.Body)
	}
	wantRESTError(t, reg("op_a", pay, map[string]any{"order_id": "818"}, ""), http.StatusUnprocessableEntity, opjournal.CodePayloadMismatch, "refs")
	wantRESTError(t, reg("op_d", pay, map[string]any{"order_id": strings.Repeat("8", 201)}, ""), http.StatusBadRequest, opjournal.CodeInvalidArgument, "refs/order_id")

	// Schemas: the pointer of the offending member, never its value.
	for _, tc := range []struct {
		payload map[string]any
		field   string
		words   string
	}{
		{map[string]any{"order_id": "817", "amount_minor": 490000}, "payload/currency", "/currency is required"},
		{map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "roubles"}, "payload/currency", `/currency does not match the pattern "^[A-Z]{3}$"`},
		{map[string]any{"order_id": "817", "amount_minor": 0, "currency": "RUB"}, "payload/amount_minor", "/amount_minor must be ≥ 1"},
		{map[string]any{"order_id": 817, "amount_minor": 490000, "currency": "RUB"}, "payload/order_id", "/order_id must be string, not number"},
	} {
		r := reg("op_bad", tc.payload, nil, "")
		wantRESTError(t, r, http.StatusBadRequest, opjournal.CodeInvalidArgument, tc.field)
		if msg := r.Err(t).Error.Message; !strings.Contains(msg, tc.words) || strings.Contains(msg, "roubles") || !strings.Contains(msg, "payload_schema of create_payment") {
			t.Errorf("%v: message %q", tc.payload, msg)
		}
	}
	wantRESTError(t, do(t, http.MethodGet, srv.BaseURL+"/v1/operations:lookup?operation_key=op_bad", nil), http.StatusNotFound, opjournal.CodeNotFound, "operation_key")
}
