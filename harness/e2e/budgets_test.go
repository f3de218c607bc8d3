package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server/auth"
)

// budgetLimit is the daily spend of the e2e policy, in minor units.
const budgetLimit = 100000

// budgetPolicy writes examples/policies/budgets.yaml with its budgets
// replaced by one spend budget of budgetLimit per currency (reject), and
// returns its path.
func budgetPolicy(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../../examples/policies/budgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i, j := strings.Index(s, "    budgets:\n"), strings.Index(s, "    integer_fields:")
	if i < 0 || j < i {
		t.Fatal("examples/policies/budgets.yaml has no budgets block before integer_fields")
	}
	s = s[:i] + fmt.Sprintf(`    budgets:
      - name: daily-spend
        sum: amount_minor
        per: [currency]
        window: 24h
        limit: %d
        on_exceed: reject
`, budgetLimit) + s[j:]
	path := filepath.Join(t.TempDir(), "budgets.yaml")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// budgetAnswer is one registration's answer: admitted (claimed, so the
// provider would be called) or refused with BUDGET_EXCEEDED.
type budgetAnswer struct {
	admitted bool
	budget   string
	retry    int
}

// registerGRPC registers a payment with a claim over gRPC.
func registerGRPC(t *testing.T, p *proc, key string, amount int64) budgetAnswer {
	t.Helper()
	r, err := p.Client.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
		Payload: mustStruct(t, fmt.Sprintf(`{"order_id":%q,"amount_minor":%d,"currency":"EUR"}`, key, amount)),
		Claim:   &pb.ClaimOptions{WorkerId: "agent-1"}})
	if err == nil {
		if !r.GetClaimed() {
			t.Errorf("%s: registered but not claimed: %v", key, r)
		}
		return budgetAnswer{admitted: true}
	}
	st, _ := status.FromError(err)
	if st.Code() != codes.ResourceExhausted {
		t.Errorf("%s: %v", key, err)
		return budgetAnswer{}
	}
	var a budgetAnswer
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetReason() != "BUDGET_EXCEEDED" {
				t.Errorf("%s: reason %s", key, d.GetReason())
			}
			a.budget = d.GetMetadata()["budget"]
			a.retry, _ = strconv.Atoi(d.GetMetadata()["retry_after_seconds"])
		case *errdetails.RetryInfo:
			if d.GetRetryDelay().AsDuration() <= 0 {
				t.Errorf("%s: retry info %v", key, d)
			}
		}
	}
	return a
}

// registerREST registers a payment with a claim over REST.
func registerREST(t *testing.T, p *proc, key string, amount int64) budgetAnswer {
	t.Helper()
	body := fmt.Sprintf(`{"operation_key":%q,"action_type":"create_payment","payload":{"order_id":%q,"amount_minor":%d,"currency":"EUR"},"claim":{"worker_id":"agent-1"}}`, key, key, amount)
	resp, err := http.Post(p.BaseURL+"/v1/operations:register", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Errorf("%s: %v", key, err)
		return budgetAnswer{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		var r struct{ Claimed bool }
		if json.Unmarshal(raw, &r) != nil || !r.Claimed {
			t.Errorf("%s: registered but not claimed: %s", key, raw)
		}
		return budgetAnswer{admitted: true}
	case http.StatusTooManyRequests:
		var e struct {
			Error struct {
				Code    string
				Message string
				Details map[string]string
			}
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code != "BUDGET_EXCEEDED" {
			t.Errorf("%s: 429 %s", key, raw)
		}
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if ra <= 0 || strconv.Itoa(ra) != e.Error.Details["retry_after_seconds"] {
			t.Errorf("%s: Retry-After %q, details %v", key, resp.Header.Get("Retry-After"), e.Error.Details)
		}
		// (An amount of a few digits may appear by chance in the limit, the
		// use or the date; a larger one would be the payload's.)
		if strings.Contains(e.Error.Message, "EUR") || (amount >= 1000 && strings.Contains(e.Error.Message, strconv.FormatInt(amount, 10))) {
			t.Errorf("%s: the refusal quotes a payload value: %s", key, e.Error.Message)
		}
		return budgetAnswer{budget: e.Error.Details["budget"], retry: ra}
	}
	t.Errorf("%s: HTTP %d %s", key, resp.StatusCode, raw)
	return budgetAnswer{}
}

// budgetUsed reads the EUR counter through GET /v1/budgets.
func budgetUsed(t *testing.T, p *proc) (used, unknown int64) {
	t.Helper()
	resp, err := http.Get(p.BaseURL + "/v1/budgets?budget=daily-spend")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Budgets []struct {
			Scope           string
			Used            string
			ReservedUnknown string `json:"reserved_unknown"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/budgets: %d %v", resp.StatusCode, err)
	}
	for _, b := range out.Budgets {
		if b.Scope == `{"payload.currency":"EUR"}` {
			used, _ = strconv.ParseInt(b.Used, 10, 64)
			unknown, _ = strconv.ParseInt(b.ReservedUnknown, 10, 64)
		}
	}
	return used, unknown
}

// TestBudgetHoldsAcrossServersAndRestarts: 40 concurrent payments of
// random amounts summing to twice the daily limit, half over gRPC to one
// server and half over REST to another on the same database (SQLite: one
// server, both doors), are admitted up to the limit and not one minor
// unit more, and every refusal was due; payments that fail finally give
// their amounts back, exactly that much is admitted again; a restart of
// every server loses no reservation.
func TestBudgetHoldsAcrossServersAndRestarts(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, dbURL string) {
		pol := budgetPolicy(t)
		args := []string{"--database-url", dbURL, "--policy", pol, "--purge-interval", "0"}
		a := startServer(t, args...)
		b := a
		if !strings.HasPrefix(dbURL, "sqlite") {
			b = startServer(t, args...)
		}
		const n = 40
		rng := rand.New(rand.NewPCG(38, uint64(len(dbURL))))
		amounts := make([]int64, n)
		var total int64
		for i := range amounts {
			amounts[i] = 1 + rng.Int64N(2*2*budgetLimit/n-1)
			total += amounts[i]
		}
		amounts[n-1] += 2*budgetLimit - total // the sum is exactly twice the limit
		if amounts[n-1] < 1 {
			t.Fatalf("bad draw: %v", amounts)
		}
		answers := make([]budgetAnswer, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				key := fmt.Sprintf("pay-%02d", i)
				if i%2 == 0 {
					answers[i] = registerGRPC(t, a, key, amounts[i])
				} else {
					answers[i] = registerREST(t, b, key, amounts[i])
				}
			})
		}
		close(start)
		wg.Wait()
		var admitted int64
		var admittedKeys []int
		for i, ans := range answers {
			if ans.admitted {
				admitted += amounts[i]
				admittedKeys = append(admittedKeys, i)
			} else if ans.budget != "daily-spend" {
				t.Fatalf("pay-%02d: neither admitted nor refused by daily-spend: %+v", i, ans)
			}
		}
		if admitted > budgetLimit {
			t.Fatalf("admitted %d minor units, over the limit %d", admitted, budgetLimit)
		}
		for i, ans := range answers {
			if !ans.admitted && admitted+amounts[i] <= budgetLimit {
				t.Fatalf("pay-%02d (%d) was refused although only %d was ever admitted", i, amounts[i], admitted)
			}
		}
		if used, unknown := budgetUsed(t, a); used != admitted || unknown != admitted {
			t.Fatalf("counter used %d (reserved by unknown %d), admitted %d", used, unknown, admitted)
		}
		t.Logf("admitted %d of %d in %d payments, refused %d", admitted, int64(2*budgetLimit), len(admittedKeys), n-len(admittedKeys))

		// Some fail finally: that much is given back and admitted again.
		var freed int64
		for _, i := range admittedKeys[:len(admittedKeys)/2] {
			if _, err := a.Client.MarkFailedFinal(ctxFor(t), &pb.MarkFailedFinalRequest{OperationKey: fmt.Sprintf("pay-%02d", i), Attempt: 1, ErrorCode: "card_declined"}); err != nil {
				t.Fatal(err)
			}
			freed += amounts[i]
		}
		for _, i := range admittedKeys[len(admittedKeys)/2:] {
			if _, err := b.Client.MarkSucceeded(ctxFor(t), &pb.MarkSucceededRequest{OperationKey: fmt.Sprintf("pay-%02d", i), Attempt: 1, ExternalId: fmt.Sprintf("ch_%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if used, unknown := budgetUsed(t, b); used != admitted-freed || unknown != 0 {
			t.Fatalf("after %d failed finally: used %d (unknown %d), want %d", freed, used, unknown, admitted-freed)
		}
		fill := budgetLimit - (admitted - freed)
		if ans := registerREST(t, b, "refill", fill); !ans.admitted {
			t.Fatalf("the freed %d (filling to the limit) was refused", fill)
		}
		if ans := registerGRPC(t, a, "one-more", 1); ans.admitted || ans.budget != "daily-spend" {
			t.Fatalf("one minor unit over a full budget: %+v", ans)
		}

		// Every server restarts: the reservations are in the database.
		a.Stop()
		if b != a {
			b.Stop()
		}
		c := startServer(t, args...)
		if used, _ := budgetUsed(t, c); used != budgetLimit {
			t.Fatalf("after a restart the counter is %d, want %d", used, budgetLimit)
		}
		if ans := registerREST(t, c, "after-restart", 1); ans.admitted {
			t.Fatal("after a restart a full budget admitted one more minor unit")
		}
		// A retry of an admitted payment is answered, not refused: it
		// reserves nothing more.
		r, err := c.Client.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: "refill", ActionType: "create_payment",
			Payload: mustStruct(t, fmt.Sprintf(`{"order_id":"refill","amount_minor":%d,"currency":"EUR"}`, fill))})
		if err != nil || r.GetCreated() {
			t.Fatalf("the retry of an admitted payment: %v %v", r, err)
		}
		if used, _ := budgetUsed(t, c); used != budgetLimit {
			t.Fatalf("after a retry the counter is %d, want %d", used, budgetLimit)
		}
	})
}

// TestBudgetPrincipalIsTheAuthenticatedOne: a per-principal budget counts
// by the authenticated principal: two tokens of one person (a rotated or
// second credential) share its counter, a worker_id the request states
// does not move a call into another principal's counter, another
// principal has its own, and a caller without a token reaches nothing.
func TestBudgetPrincipalIsTheAuthenticatedOne(t *testing.T) {
	t.Parallel()
	const laptop, phone, other = "tok-carol-laptop-3b9d1f7a2c", "tok-carol-phone-8e2c6a4b0d", "tok-dave-agent-5f1a9c3e7b"
	tokens := auth.FileHeader +
		auth.Entry{Name: "carol-laptop", Principal: "carol", SHA256: auth.Digest(laptop), Tenant: "t", Roles: []auth.Role{auth.RoleAgent}}.YAML() +
		auth.Entry{Name: "carol-phone", Principal: "carol", SHA256: auth.Digest(phone), Tenant: "t", Roles: []auth.Role{auth.RoleAgent}}.YAML() +
		auth.NewEntry("dave", other, "t", []auth.Role{auth.RoleAgent}).YAML()
	dir := t.TempDir()
	authFile, policyFile := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "policy.yaml")
	for f, text := range map[string]string{authFile: tokens, policyFile: "actions:\n  send_email:\n    budgets: [{name: mails, count: true, per: [principal], window: 24h, limit: 2, on_exceed: reject}]\n"} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv := startServer(t, "--database-url", sqliteURL(t), "--auth-file", authFile, "--policy", policyFile)
	send := func(token, key, worker string) error {
		req := &pb.RegisterRequest{OperationKey: key, ActionType: "send_email", Payload: mustStruct(t, `{"to":"a@example.com"}`)}
		if worker != "" {
			req.Claim = &pb.ClaimOptions{WorkerId: worker}
		}
		c := srv.Client
		if token != "" {
			c = as(t, srv, token)
		}
		_, err := c.Register(ctxFor(t), req)
		return err
	}
	if err := send(laptop, "m1", ""); err != nil {
		t.Fatal(err)
	}
	if err := send(phone, "m2", ""); err != nil {
		t.Fatal(err)
	}
	if err := send(laptop, "m3", "dave"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("carol's third mail, stated as dave's worker: %v, want RESOURCE_EXHAUSTED", err)
	}
	if err := send(phone, "m3", ""); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("carol's third mail from her other token: %v", err)
	}
	if err := send(other, "d1", "carol"); err != nil {
		t.Fatalf("dave's first mail: %v", err)
	}
	if err := send("", "anon", ""); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
}
