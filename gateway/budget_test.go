package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// Budgets through both doors, against a real journal that enforces them:
// a payment past its principal's budget is refused (HTTP 429, the MCP
// tool error budget_exceeded), the provider never hears of it, and
// nothing is registered, so the same request asked again is refused
// again, and sent once when it fits.

// budgetPolicy is the fixture's policy with the budgets of
// examples/policies/budgets.yaml on create_payment, both refusing what
// does not fit: each principal may make count payments a day
// (daily-payments), and pay at most 1,000,000 a day per currency
// (daily-spend).
func budgetPolicy(t *testing.T, count int) string {
	t.Helper()
	const head = "  create_payment:\n    lease_seconds: 2\n"
	budgets := fmt.Sprintf(`    budgets:
      - name: daily-payments
        count: true
        per: [principal]
        window: 24h
        limit: %d
        on_exceed: reject
      - name: daily-spend
        sum: amount_minor
        per: [principal, currency]
        window: 24h
        limit: 1000000
        on_exceed: reject
`, count)
	pol := strings.Replace(testPolicy, head, head+budgets, 1)
	if pol == testPolicy {
		t.Fatal("the policy edit did not apply")
	}
	return pol
}

// budgetPayment is a payment of amount; its values must never appear in
// a refusal.
func budgetPayment(order string, amount int) map[string]any {
	return map[string]any{"order_id": order, "amount_minor": amount, "currency": "RUB"}
}

// day is the budgets' window, in seconds.
const day = 86400

// wantBudgetExceeded fails unless r is the 429 budget-exceeded problem of
// the budget with used of limit, whose Retry-After is within [minRetry,
// maxRetry] and is its retry_after_seconds; it returns the problem and
// the Retry-After.
func wantBudgetExceeded(t *testing.T, r response, budget string, used, limit int, minRetry, maxRetry int) (map[string]any, int) {
	t.Helper()
	p := wantProblem(t, r, http.StatusTooManyRequests, "budget-exceeded")
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || secs < minRetry || secs > maxRetry || p["retry_after_seconds"] != float64(secs) {
		t.Fatalf("Retry-After %q (want %d–%d, as retry_after_seconds): %s", r.header.Get("Retry-After"), minRetry, maxRetry, r.body)
	}
	if p["title"] != "Budget exceeded" || p["budget"] != budget || p["used"] != float64(used) || p["limit"] != float64(limit) ||
		p["window_seconds"] != float64(day) || p["operation_key"] != r.header.Get("Opjournal-Operation-Key") {
		t.Fatalf("the problem names %s", r.body)
	}
	if r.header.Get("Idempotent-Replayed") != "" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("a refusal is neither a replay nor cacheable: %v", r.header)
	}
	return p, secs
}

// notRegistered fails unless the journal holds no operation of key.
func (e *env) notRegistered(key string) {
	e.t.Helper()
	_, err := e.journal.Client.Lookup(context.Background(), &pb.LookupRequest{OperationKey: key})
	if status.Code(err) != codes.NotFound {
		e.t.Fatalf("lookup %s: %v, want NotFound: a refused operation is never registered", key, err)
	}
}

// TestHTTPBudgetExceeded: five payments a day; the sixth is 429
// budget-exceeded with Retry-After (about a day, the journal's hint), it
// names the budget, its limit and use and no value of the request, and
// the provider never receives it. Its retry is refused the same way (not
// a cached answer), a retry of a paid one is still replayed, and a
// payment that alone is over the daily spend is told it never fits.
func TestHTTPBudgetExceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, budgetPolicy(t, 5))
	for i := 1; i <= 5; i++ {
		if r := e.post("/payments", fmt.Sprint("k-", i), budgetPayment(fmt.Sprint("order-", i), 1000)); r.status != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", i, r.status, r.body)
		}
	}
	over := budgetPayment("order-6", 4321)
	first := e.post("/payments", "k-6", over)
	p, secs := wantBudgetExceeded(t, first, "daily-payments", 5, 5, day-60, day)
	key := "http:create_payment:" + scopeOf("agent-a") + ":k-6"
	detail, _ := p["detail"].(string)
	if p["operation_key"] != key || p["never_fits"] != nil || !strings.Contains(detail, "NOT sent") || !strings.Contains(detail, "in the last 24h") {
		t.Fatalf("problem %s", first.body)
	}
	for _, v := range []string{"order-6", "4321", "RUB"} {
		if bytes.Contains(first.body, []byte(v)) {
			t.Fatalf("the refusal shows the request's %q: %s", v, first.body)
		}
	}
	checkBudgetExample(t, p)
	if e.effects(key) != 0 || e.allEffects() != 5 {
		t.Fatalf("effects %d (all %d), want none sent", e.effects(key), e.allEffects())
	}
	// Nothing was registered: the retry asks the journal again and is
	// refused again, the same way.
	again := e.post("/payments", "k-6", over)
	p2, secs2 := wantBudgetExceeded(t, again, "daily-payments", 5, 5, day-60, day)
	delete(p, "retry_after_seconds")
	delete(p2, "retry_after_seconds")
	if fmt.Sprint(p) != fmt.Sprint(p2) || secs2 > secs {
		t.Fatalf("the retry: %s, first %s", again.body, first.body)
	}
	e.notRegistered(key)
	// A retry of a payment made is its replay, budget or not.
	if r := e.post("/payments", "k-1", budgetPayment("order-1", 1000)); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of k-1 at the limit: %d %v %s", r.status, r.header, r.body)
	}

	// Agent B's payment alone is over the daily spend: it never fits;
	// Retry-After is the window, and the detail says waiting won't help.
	big := e.post("/payments", "big", budgetPayment("order-big", 2000000), "Authorization", "Bearer "+tokenB)
	p, _ = wantBudgetExceeded(t, big, "daily-spend", 0, 1000000, day, day)
	if p["never_fits"] != true || !strings.Contains(p["detail"].(string), "will never fit") || bytes.Contains(big.body, []byte("2000000")) {
		t.Fatalf("never fits: %s", big.body)
	}
	e.notRegistered("http:create_payment:" + scopeOf("agent-b") + ":big")
	// Agent B's budgets are its own and still open.
	if r := e.post("/payments", "small", budgetPayment("order-small", 1000), "Authorization", "Bearer "+tokenB); r.status != http.StatusCreated {
		t.Fatalf("agent B's payment: %d %s", r.status, r.body)
	}
	if e.allEffects() != 6 {
		t.Fatalf("effects %d, want 6", e.allEffects())
	}
}

// TestHTTPBudgetConcurrentDuplicates attacks the last place of a budget:
// two keys, each sent twelve times at once through two gateways on one
// journal. One key takes the place and is sent once (its duplicates are
// told it is in progress, or get its replay, never 429: a duplicate
// reserves nothing); every request of the other is 429. Then, at the
// limit, sixteen duplicates of a third key are all 429. The provider
// holds exactly the limit.
func TestHTTPBudgetConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, budgetPolicy(t, 3))
	for i := 1; i <= 2; i++ {
		if r := e.post("/payments", fmt.Sprint("k-", i), budgetPayment(fmt.Sprint("order-", i), 1000)); r.status != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", i, r.status, r.body)
		}
	}
	// The winner's provider call lasts, so its duplicates find it in flight.
	e.fault(fakeprovider.Fault{Path: "/payments", Kind: fakeprovider.Slow, Count: 1, Delay: 300 * time.Millisecond})
	front2 := httptestServer(t, e.newGateway(e.lookupEnv))
	race := func(keys []string, n int) map[string][]response {
		var mu sync.Mutex
		got := map[string][]response{}
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for _, k := range keys {
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-gate
					base := e.front.URL
					if i%2 == 1 {
						base = front2
					}
					r := postTo(t, base, "/payments", k, budgetPayment("order-"+k, 1000))
					mu.Lock()
					got[k] = append(got[k], r)
					mu.Unlock()
				}()
			}
		}
		close(gate)
		wg.Wait()
		return got
	}
	got := race([]string{"race-a", "race-b"}, 12)
	won := func(rs []response) bool {
		return slices.ContainsFunc(rs, func(r response) bool { return r.status == http.StatusCreated })
	}
	winner, loser := "race-a", "race-b"
	if won(got[loser]) {
		winner, loser = loser, winner
	}
	if won(got[loser]) || !won(got[winner]) {
		t.Fatalf("both or neither key was sent: %v", statusesOf(got))
	}
	for _, r := range got[winner] {
		if r.status != http.StatusCreated && r.status != http.StatusConflict {
			t.Fatalf("a duplicate of the key that fitted: %d %s (all %v)", r.status, r.body, statusesOf(got))
		}
	}
	for _, r := range got[loser] {
		wantBudgetExceeded(t, r, "daily-payments", 3, 3, day-60, day)
	}
	if e.allEffects() != 3 {
		t.Fatalf("effects %d, want the limit 3 (answers %v)", e.allEffects(), statusesOf(got))
	}
	// The winner's record may still be landing through the other gateway.
	await.Until(t, "the replay of the key that fitted", func() bool {
		return e.post("/payments", winner, budgetPayment("order-"+winner, 1000)).header.Get("Idempotent-Replayed") == "true"
	})
	wantBudgetExceeded(t, e.post("/payments", loser, budgetPayment("order-"+loser, 1000)), "daily-payments", 3, 3, day-60, day)

	for _, r := range race([]string{"late"}, 16)["late"] {
		wantBudgetExceeded(t, r, "daily-payments", 3, 3, day-60, day)
	}
	if e.allEffects() != 3 {
		t.Fatalf("effects %d at the limit, want 3", e.allEffects())
	}
	e.notRegistered("http:create_payment:" + scopeOf("agent-a") + ":" + loser)
	e.notRegistered("http:create_payment:" + scopeOf("agent-a") + ":late")
}

func statusesOf(got map[string][]response) map[string][]int {
	out := map[string][]int{}
	for k, rs := range got {
		for _, r := range rs {
			out[k] = append(out[k], r.status)
		}
	}
	return out
}

// journalClock is a journal's clock that the test moves forward: the
// wall clock plus what the test added.
type journalClock struct{ ahead atomic.Int64 }

func (c *journalClock) now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

func (c *journalClock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

// TestHTTPBudgetRefusedKeyRetried: a client that retries a 429 on its own.
// Retried at once, alone or many at a time, the refused key is refused
// each time and never sent. A client that waits as Retry-After says (the
// journal's clock is moved by it) is still refused just before, and
// sent once right after: the refusal was never cached, and the key is
// new to the journal until then. Concurrent retries at that moment make
// one payment.
func TestHTTPBudgetRefusedKeyRetried(t *testing.T) {
	t.Parallel()
	clock := &journalClock{}
	e := newEnvWith(t, budgetPolicy(t, 2), testserver.WithClock(clock.now))
	for i := 1; i <= 2; i++ {
		if r := e.post("/payments", fmt.Sprint("k-", i), budgetPayment(fmt.Sprint("order-", i), 1000)); r.status != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", i, r.status, r.body)
		}
	}
	key := "http:create_payment:" + scopeOf("agent-a") + ":k-3"
	pay := budgetPayment("order-3", 1000)
	_, secs := wantBudgetExceeded(t, e.post("/payments", "k-3", pay), "daily-payments", 2, 2, day-60, day)
	// An impatient client: at once, then eight at a time.
	for range 3 {
		wantBudgetExceeded(t, e.post("/payments", "k-3", pay), "daily-payments", 2, 2, day-60, day)
	}
	var wg sync.WaitGroup
	answers := make([]response, 8)
	for i := range answers {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = e.post("/payments", "k-3", pay) }()
	}
	wg.Wait()
	for _, r := range answers {
		wantBudgetExceeded(t, r, "daily-payments", 2, 2, day-60, day)
	}
	if e.effects(key) != 0 || e.allEffects() != 2 {
		t.Fatalf("effects %d (all %d): the refused key was sent", e.effects(key), e.allEffects())
	}
	e.notRegistered(key)

	// A patient client: Retry-After is not early...
	clock.advance(time.Duration(secs-3) * time.Second)
	wantBudgetExceeded(t, e.post("/payments", "k-3", pay), "daily-payments", 2, 2, 1, 4)
	e.notRegistered(key)
	// ...and once it has passed, the same key is sent, once, however
	// many retries arrive together.
	clock.advance(3 * time.Second)
	for i := range answers {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = e.post("/payments", "k-3", pay) }()
	}
	wg.Wait()
	fresh := 0
	for _, r := range answers {
		switch {
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "":
			fresh++
		case r.status == http.StatusCreated, r.status == http.StatusConflict:
		default:
			t.Fatalf("a retry once Retry-After passed: %d %s", r.status, r.body)
		}
	}
	if fresh != 1 || e.effects(key) != 1 || e.allEffects() != 3 {
		t.Fatalf("%d fresh answers, %d effects under the key (all %d), want 1", fresh, e.effects(key), e.allEffects())
	}
	if r := e.post("/payments", "k-3", pay); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the replay: %d %v", r.status, r.header)
	}
}

// budgetExampleMarker introduces the 429 body docs/gateway.md shows, between its marker
// and the end of the JSON block.
const budgetExampleMarker = "<!-- budget-exceeded example: checked by TestHTTPBudgetExceeded -->"

// checkBudgetExample compares docs/gateway.md's budget-exceeded example
// with the gateway's answer for the same budget (daily-payments, 5 of 5):
// the same members, and the same values but for the key and the seconds.
func checkBudgetExample(t *testing.T, got map[string]any) {
	t.Helper()
	doc, err := os.ReadFile("../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), budgetExampleMarker)
	if !ok {
		t.Fatal("docs/gateway.md has no budget-exceeded example")
	}
	_, rest, _ = strings.Cut(rest, "```json\n")
	block, _, _ := strings.Cut(rest, "```")
	var want map[string]any
	if err := json.Unmarshal([]byte(block), &want); err != nil {
		t.Fatalf("docs/gateway.md's budget-exceeded example: %v", err)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("docs/gateway.md's budget-exceeded example shows %s, which the gateway does not answer", k)
			continue
		}
		if k != "operation_key" && k != "retry_after_seconds" && fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("docs/gateway.md's budget-exceeded example: %s is %v, the gateway answers %v", k, w, g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the gateway answers %s, which docs/gateway.md's budget-exceeded example does not show", k)
		}
	}
}

// budgetText is the shared model text budget_exceeded, filled in.
func budgetText(t *testing.T, budget string, used, limit int, retry string) string {
	t.Helper()
	b, err := os.ReadFile("../protocol/testdata/model_texts.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Texts map[string]string `json:"texts"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("{tool}", "create_payment", "{budget}", budget, "{used}", strconv.Itoa(used), "{limit}", strconv.Itoa(limit),
		"{window}", "24h", "{retry}", retry).Replace(doc.Texts["budget_exceeded"])
}

// budgetMeta reads _meta["opjournal/operation"].budget of a result.
func budgetMeta(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, _ := res.Meta[gateway.MetaKey].(map[string]any)
	b, ok := m["budget"].(map[string]any)
	if !ok {
		t.Fatalf("no budget in the result's _meta: %+v", res.Meta)
	}
	return b
}

// TestMCPBudgetExceeded: through the MCP door, to clients of both
// revisions (a 2025-11-25 session and a stateless 2026-07-28 client, the
// Go SDK's), and raw stateless requests: three payments a day, the
// fourth is the tool error budget_exceeded (the shared model text, the
// outcome in _meta with the budget), never called upstream and never
// registered, however it is retried, alone or concurrently from both
// revisions. A payment alone over the daily spend is told it never fits.
func TestMCPBudgetExceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, budgetPolicy(t, 3))
	url := e.mcpDoor()
	old := e.mcpSession(url, tokenA, "2025-11-25")
	modern := e.mcpSession(url, tokenA, "")
	if v := modern.InitializeResult().ProtocolVersion; v != gateway.StatelessProtocolVersion {
		t.Fatalf("the stateless client speaks %q", v)
	}
	for i, cs := range []*mcp.ClientSession{old, modern, old} {
		if res := call(t, cs, "create_payment", budgetPayment(fmt.Sprint("order-", i), 1000)); res.IsError || outcome(res) != gateway.OutcomeSucceeded {
			t.Fatalf("payment %d: %q %+v", i, text(res), res.Meta)
		}
	}
	over := budgetPayment("order-over", 4321)
	var key string
	check := func(name string, res *mcp.CallToolResult) {
		t.Helper()
		k, replayed := meta(t, res)
		if key == "" {
			key = k
		}
		b := budgetMeta(t, res)
		secs, _ := b["retry_after_seconds"].(float64)
		if !res.IsError || outcome(res) != gateway.OutcomeBudgetExceeded || replayed || k != key || secs < day-60 || secs > day ||
			b["name"] != "daily-payments" || b["used"] != float64(3) || b["limit"] != float64(3) || b["window_seconds"] != float64(day) {
			t.Fatalf("%s: %q %+v", name, text(res), res.Meta)
		}
		if want := budgetText(t, "daily-payments", 3, 3, fmt.Sprintf(" It may fit again in about %d seconds.", int(secs))); text(res) != want {
			t.Fatalf("%s:\n gateway %q\n file    %q", name, text(res), want)
		}
		for _, v := range []string{"order-over", "4321", "RUB"} {
			if strings.Contains(text(res), v) {
				t.Fatalf("%s: the text shows the request's %q", name, v)
			}
		}
	}
	check("2025-11-25", call(t, old, "create_payment", over))
	check("2026-07-28", call(t, modern, "create_payment", over))
	check("2025-11-25, again", call(t, old, "create_payment", over))
	// A raw stateless request gets the same answer, framed for its revision.
	r, err := statelessCall(t, context.Background(), url, tokenA, over, nil)
	if err != nil || r.status != http.StatusOK || r.msg.Result == nil || !bytes.Contains(r.raw, []byte(`"resultType":"complete"`)) {
		t.Fatalf("raw stateless call: %v %d %s", err, r.status, r.raw)
	}
	check("raw 2026-07-28", r.msg.Result)
	// Concurrent retries from both revisions.
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, 12)
	for i := range results {
		cs := old
		if i%2 == 1 {
			cs = modern
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_payment", Arguments: over})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			results[i] = res
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res != nil {
			check(fmt.Sprint("concurrent ", i), res)
		}
	}
	if e.effects(key) != 0 || e.allEffects() != 3 {
		t.Fatalf("effects %d (all %d): the refused call was sent", e.effects(key), e.allEffects())
	}
	e.notRegistered(key)

	// Agent B's payment alone over the daily spend never fits: no retry
	// hint, in either revision.
	for _, version := range []string{"2025-11-25", ""} {
		cs := e.mcpSession(url, tokenB, version)
		res := call(t, cs, "create_payment", budgetPayment("order-big", 2000000))
		b := budgetMeta(t, res)
		if _, hint := b["retry_after_seconds"]; !res.IsError || outcome(res) != gateway.OutcomeBudgetExceeded || hint ||
			b["name"] != "daily-spend" || b["used"] != float64(0) || b["limit"] != float64(1000000) {
			t.Fatalf("never fits (%q): %q %+v", version, text(res), res.Meta)
		}
		if want := budgetText(t, "daily-spend", 0, 1000000, ""); text(res) != want {
			t.Fatalf("never fits (%q):\n gateway %q\n file    %q", version, text(res), want)
		}
		k, _ := meta(t, res)
		e.notRegistered(k)
	}
	if e.allEffects() != 3 {
		t.Fatalf("effects %d, want 3", e.allEffects())
	}
}

// TestMCPBudgetSharedWithHTTP: one principal's budget is one, whichever
// door its payments come through: two through the HTTP door, the third
// through MCP fills it, and the next is refused at both doors.
func TestMCPBudgetSharedWithHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, budgetPolicy(t, 3))
	for i := 1; i <= 2; i++ {
		if r := e.post("/payments", fmt.Sprint("k-", i), budgetPayment(fmt.Sprint("order-", i), 1000)); r.status != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", i, r.status, r.body)
		}
	}
	cs := e.mcpClient("")
	if res := call(t, cs, "create_payment", budgetPayment("order-3", 1000)); res.IsError {
		t.Fatalf("the third payment: %q", text(res))
	}
	if res := call(t, cs, "create_payment", budgetPayment("order-4", 1000)); outcome(res) != gateway.OutcomeBudgetExceeded {
		t.Fatalf("the fourth through MCP: %q %+v", text(res), res.Meta)
	}
	wantBudgetExceeded(t, e.post("/payments", "k-4", budgetPayment("order-4", 1000)), "daily-payments", 3, 3, day-60, day)
	if e.allEffects() != 3 {
		t.Fatalf("effects %d, want 3", e.allEffects())
	}
}
