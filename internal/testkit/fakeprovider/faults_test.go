package fakeprovider

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCommitThenTimeout(t *testing.T) {
	e := newEnv(t, Options{})
	const key = "payment:order-817:intent-01"
	e.fault(Fault{Path: "/payments", Kind: CommitThenTimeout, Count: 1, Delay: 200 * time.Millisecond})

	_, err := e.do(shortClient(), "POST", "/payments", payBody, "Idempotency-Key", key)
	if !isTimeout(err) {
		t.Fatalf("commit_then_timeout: err %v, want a client timeout", err)
	}
	e.waitIdle()
	e.wantCount(key, 1)

	// The reproducible check of docs/spec.md: the repeat with the same key returns
	// the effect the lost answer was about, and performs nothing.
	again := e.must(200, "POST", "/payments", payBody, "Idempotency-Key", key)
	if again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the repeat is not a replay: %s", again.Raw)
	}
	if d := e.must(200, "GET", "/payments?idempotency_key="+key, "").data(); len(d) != 1 || d[0]["id"] != again.str("id") {
		t.Errorf("search finds %v, want the one payment %s", d, again.str("id"))
	}
	e.must(422, "POST", "/payments", `{"amount_minor": 500000, "currency": "RUB", "order_id": "817"}`, "Idempotency-Key", key)
	e.wantCount(key, 1)
	if got := e.p.Faults(); len(got.Faults) != 0 || got.Fired[CommitThenTimeout] != 1 {
		t.Errorf("faults after one count-1 rule fired: %+v", got)
	}
}

func TestCommitThenTimeoutAnswersLateIfTheClientWaits(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/emails", Kind: CommitThenTimeout, Count: 1, Delay: 200 * time.Millisecond})
	began := time.Now()
	a := e.must(202, "POST", "/emails", `{"to": "a@example.com", "reference": "late"}`)
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Errorf("answered after %v, before the 200ms delay", took)
	}
	if a.str("reference") != "late" {
		t.Errorf("late answer: %s", a.Raw)
	}
	e.wantCount("late", 1)
}

func TestTimeoutBeforeCommit(t *testing.T) {
	e := newEnv(t, Options{})
	const key = "tbc-key"
	e.fault(Fault{Path: "/payments", Kind: TimeoutBeforeCommit, Count: 1, Delay: 200 * time.Millisecond})
	_, err := e.do(shortClient(), "POST", "/payments", payBody, "Idempotency-Key", key)
	if !isTimeout(err) {
		t.Fatalf("timeout_before_commit: err %v, want a client timeout", err)
	}
	e.waitIdle()
	e.wantCount(key, 0)
	if got := e.p.Effects().Total; got != 0 {
		t.Errorf("total effects %d, want 0", got)
	}
	// The key was never taken: a retry performs the payment once.
	e.must(201, "POST", "/payments", payBody, "Idempotency-Key", key)
	e.wantCount(key, 1)

	// A client that outwaits the delay gets 504, and still nothing.
	e.fault(Fault{Path: "/emails", Kind: TimeoutBeforeCommit, Count: 1, Delay: 200 * time.Millisecond})
	if a := e.must(504, "POST", "/emails", `{"to": "a@example.com", "reference": "r504"}`); a.str("error") != "gateway_timeout" {
		t.Errorf("504 body: %s", a.Raw)
	}
	e.wantCount("r504", 0)
}

func TestReject(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/applications", Kind: Reject, Count: 1})
	a := e.must(422, "POST", "/applications", `{"job_id": "j", "candidate": "c", "reference": "rej"}`)
	if a.str("error") != "rejected_by_fault" {
		t.Errorf("reject: %s", a.Raw)
	}
	e.wantCount("rej", 0)
	e.must(201, "POST", "/applications", `{"job_id": "j", "candidate": "c", "reference": "rej"}`)
	e.wantCount("rej", 1)
}

func TestErrorAfterCommit(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/payments", Kind: ErrorAfterCommit, Count: 1})
	a := e.must(500, "POST", "/payments", payBody, "Idempotency-Key", "eac")
	if a.str("error") != "internal_error" {
		t.Errorf("error_after_commit: %s", a.Raw)
	}
	e.wantCount("eac", 1)
	e.must(200, "POST", "/payments", payBody, "Idempotency-Key", "eac")
	e.wantCount("eac", 1)
}

func TestError(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/emails", Kind: Error, Count: 1})
	if a := e.must(503, "POST", "/emails", `{"to": "a@example.com", "reference": "e503"}`); a.str("error") != "unavailable" {
		t.Errorf("error: %s", a.Raw)
	}
	e.wantCount("e503", 0)
}

func TestDropConnectionAfterCommit(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/payments", Kind: DropConnectionAfterCommit, Count: 1})
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	_, err := e.do(client, "POST", "/payments", payBody, "Idempotency-Key", "drop")
	if err == nil || isTimeout(err) {
		t.Fatalf("drop_connection_after_commit: err %v, want a connection error", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("err %v, want EOF or a reset", err)
	}
	e.waitIdle()
	e.wantCount("drop", 1)
	e.must(200, "POST", "/payments", payBody, "Idempotency-Key", "drop")
	e.wantCount("drop", 1)
}

func TestSlowHoldsTheKeyInFlight(t *testing.T) {
	e := newEnv(t, Options{})
	const key = "slow-key"
	e.fault(Fault{Path: "/payments", Kind: Slow, Count: 1, Delay: 300 * time.Millisecond})
	first := make(chan answer, 1)
	go func() {
		a, err := e.do(http.DefaultClient, "POST", "/payments", payBody, "Idempotency-Key", key)
		if err != nil {
			t.Error(err)
		}
		first <- a
	}()
	// Once the rule has fired, the key is in flight.
	eventually(t, 5*time.Second, func() bool { return e.p.Faults().Fired[Slow] == 1 }, "the slow fault never fired")
	if a := e.must(409, "POST", "/payments", payBody, "Idempotency-Key", key); a.str("error") != "idempotency_key_in_use" {
		t.Errorf("repeat in flight: %s", a.Raw)
	}
	e.must(422, "POST", "/payments", `{"amount_minor": 1}`, "Idempotency-Key", key)
	e.wantCount(key, 0)

	a := <-first
	if a.Status != 201 {
		t.Fatalf("the slow request: %d %s", a.Status, a.Raw)
	}
	again := e.must(200, "POST", "/payments", payBody, "Idempotency-Key", key)
	if again.str("id") != a.str("id") {
		t.Errorf("replay %s, original %s", again.str("id"), a.str("id"))
	}
	e.wantCount(key, 1)
}

func TestSlowCommitsAfterTheClientLeft(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/emails", Kind: Slow, Count: 1, Delay: 200 * time.Millisecond})
	sent := time.Now()
	_, err := e.do(shortClient(), "POST", "/emails", `{"to": "a@example.com", "reference": "ghost"}`)
	if !isTimeout(err) {
		t.Fatalf("err %v, want a client timeout", err)
	}
	n := e.p.Count("ghost")
	if time.Since(sent) < 200*time.Millisecond && n != 0 {
		t.Errorf("the slow effect was stored before its delay") // not yet
	}
	e.waitIdle()
	e.wantCount("ghost", 1) // the effect appeared after the client gave up
}

func TestCloseReleasesHeldRequests(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/payments", Kind: CommitThenTimeout, Count: 1, Delay: time.Hour})
	done := make(chan answer, 1)
	go func() {
		a, err := e.do(http.DefaultClient, "POST", "/payments", payBody, "Idempotency-Key", "held")
		if err != nil {
			t.Error(err)
		}
		done <- a
	}()
	eventually(t, 5*time.Second, func() bool { return e.p.Count("held") == 1 }, "never committed")
	e.p.Close()
	select {
	case a := <-done:
		if a.Status != 201 {
			t.Errorf("released request: %d %s", a.Status, a.Raw)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not release the held request")
	}
}

func TestSearchFaults(t *testing.T) {
	e := newEnv(t, Options{})
	pay := e.must(201, "POST", "/payments", payBody, "Idempotency-Key", "k")

	e.fault(Fault{Method: "GET", Path: "/payments", Kind: Error, Count: 1})
	if a := e.must(503, "GET", "/payments?idempotency_key=k", ""); a.str("error") != "unavailable" {
		t.Errorf("search error: %s", a.Raw)
	}
	e.must(200, "GET", "/payments?idempotency_key=k", "")

	e.fault(Fault{Method: "GET", Path: "/payments", Kind: Timeout, Count: 1, Delay: 200 * time.Millisecond})
	if _, err := e.do(shortClient(), "GET", "/payments?idempotency_key=k", ""); !isTimeout(err) {
		t.Errorf("search timeout: err %v, want a client timeout", err)
	}
	e.fault(Fault{Method: "GET", Path: "/payments", Kind: Timeout, Count: 1, Delay: 200 * time.Millisecond})
	e.must(504, "GET", "/payments?idempotency_key=k", "")

	// By id, with the /* path; the search route is not affected.
	e.fault(Fault{Method: "GET", Path: "/payments/*", Kind: Error, Count: 1})
	e.must(200, "GET", "/payments?idempotency_key=k", "")
	e.must(503, "GET", "/payments/"+pay.str("id"), "")
	e.must(200, "GET", "/payments/"+pay.str("id"), "")

	// A GET fault does not touch POSTs, nor a POST fault GETs.
	e.fault(Fault{Method: "GET", Path: "/payments", Kind: Error, Count: 1})
	e.fault(Fault{Path: "/payments", Kind: Reject, Count: 1})
	e.must(200, "POST", "/payments", payBody, "Idempotency-Key", "k") // a replay: no fault applies
	e.must(422, "POST", "/payments", payBody, "Idempotency-Key", "k2")
	e.must(503, "GET", "/payments", "")
	e.waitIdle()
	if got := e.p.Faults(); len(got.Faults) != 0 || got.Fired[Error] != 3 || got.Fired[Timeout] != 2 || got.Fired[Reject] != 1 {
		t.Errorf("faults %+v", got)
	}
	e.wantCount("k", 1)
	e.wantCount("k2", 0)
}

func TestCountFaultsFireExactlyNTimes(t *testing.T) {
	e := newEnv(t, Options{})
	st := e.fault(Fault{Path: "/payments", Kind: Reject, Count: 3})
	if st.ID == "" || st.Remaining != 3 || st.Method != "POST" {
		t.Errorf("added %+v", st)
	}
	var statuses []int
	for i := range 6 {
		a, err := e.do(http.DefaultClient, "POST", "/payments", payBody, "Idempotency-Key", fmt.Sprint("n-", i))
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, a.Status)
		if i == 1 {
			if l := e.p.Faults(); len(l.Faults) != 1 || l.Faults[0].Remaining != 1 || l.Faults[0].Fired != 2 {
				t.Errorf("after two: %+v", l)
			}
		}
	}
	if want := []int{422, 422, 422, 201, 201, 201}; !slices.Equal(statuses, want) {
		t.Errorf("statuses %v, want %v", statuses, want)
	}
	l := e.p.Faults()
	if len(l.Faults) != 0 || l.Fired[Reject] != 3 {
		t.Errorf("faults %+v, want none left and 3 fired", l)
	}
	if got := e.p.Effects().Total; got != 3 {
		t.Errorf("effects %d, want 3", got)
	}
}

func TestFaultsStackInOrder(t *testing.T) {
	e := newEnv(t, Options{})
	e.fault(Fault{Path: "/emails", Kind: ErrorAfterCommit, Count: 1})
	e.fault(Fault{Path: "/emails", Kind: Reject, Count: 2})
	e.fault(Fault{Path: "/payments", Kind: Error, Count: 1})
	for i, want := range []int{500, 422, 422, 202} {
		e.must(want, "POST", "/emails", fmt.Sprintf(`{"to": "x@example.com", "reference": "s%d"}`, i))
	}
	if got := e.p.Effects().Total; got != 2 { // the 500 and the 202
		t.Errorf("effects %d, want 2", got)
	}
	if l := e.p.Faults(); len(l.Faults) != 1 || l.Faults[0].Path != "/payments" {
		t.Errorf("left %+v, want the /payments rule", l.Faults)
	}
	cleared := e.p.ClearFaults()
	if len(cleared.Faults) != 1 || cleared.Fired[ErrorAfterCommit] != 1 || cleared.Fired[Reject] != 2 {
		t.Errorf("cleared %+v", cleared)
	}
	if l := e.p.Faults(); len(l.Faults) != 0 || len(l.Fired) != 0 {
		t.Errorf("after clear %+v", l)
	}
	e.must(201, "POST", "/payments", payBody)
}

func TestProbabilityFaultsAreReproducible(t *testing.T) {
	run := func(o Options, f Fault) (pattern []bool, seed int64) {
		e := newEnv(t, o)
		st := e.fault(f)
		if st.Seed == nil {
			t.Fatalf("a probability rule without a seed in its status: %+v", st)
		}
		for range 60 {
			a, err := e.do(http.DefaultClient, "POST", "/emails", `{"to": "a@example.com"}`)
			if err != nil {
				t.Fatal(err)
			}
			if a.Status != 422 && a.Status != 202 {
				t.Fatalf("status %d: %s", a.Status, a.Raw)
			}
			pattern = append(pattern, a.Status == 422)
		}
		fired := 0
		for _, r := range pattern {
			if r {
				fired++
			}
		}
		if got := e.p.Faults(); got.Fired[Reject] != fired || got.Faults[0].Fired != fired {
			t.Errorf("fired counters %+v, %d rejections seen", got, fired)
		}
		if got := e.p.Effects().Total; got != 60-fired {
			t.Errorf("effects %d, want %d", got, 60-fired)
		}
		return pattern, *st.Seed
	}
	seed := func(v int64) *int64 { return &v }
	f := Fault{Path: "/emails", Kind: Reject, Probability: 0.4, Seed: seed(42)}

	a, s := run(Options{}, f)
	b, _ := run(Options{Seed: 99}, f) // the rule's own seed wins
	if !slices.Equal(a, b) || s != 42 {
		t.Errorf("seed 42 gave two patterns:\n%v\n%v", a, b)
	}
	n := 0
	for _, r := range a {
		if r {
			n++
		}
	}
	if n == 0 || n == len(a) {
		t.Errorf("probability 0.4 fired %d times in %d", n, len(a))
	}
	f.Seed = seed(43)
	if c, _ := run(Options{}, f); slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same pattern")
	}

	// Without a seed of its own, the rule uses Options.Seed (--seed).
	f.Seed = nil
	d, s := run(Options{Seed: 7}, f)
	e, _ := run(Options{Seed: 7}, f)
	if !slices.Equal(d, e) || s != 7 {
		t.Errorf("server seed 7 gave two patterns (seed %d):\n%v\n%v", s, d, e)
	}

	// Probability 1 fires every time.
	always, _ := run(Options{}, Fault{Path: "/emails", Kind: Reject, Probability: 1})
	if slices.Contains(always, false) {
		t.Errorf("probability 1 let a request through: %v", always)
	}
}

func TestBadFaults(t *testing.T) {
	e := newEnv(t, Options{})
	for _, body := range []string{
		`{"path": "/payments", "fault": "explode", "count": 1}`,
		`{"path": "/payment", "fault": "reject", "count": 1}`,
		`{"path": "/_control/faults", "fault": "reject", "count": 1}`,
		`{"path": "/payments/*", "fault": "reject", "count": 1}`,
		`{"method": "GET", "path": "/payments", "fault": "commit_then_timeout", "count": 1}`,
		`{"method": "PUT", "path": "/payments", "fault": "reject", "count": 1}`,
		`{"path": "/payments", "fault": "timeout", "count": 1}`,
		`{"path": "/payments", "fault": "reject"}`,
		`{"path": "/payments", "fault": "reject", "count": 1, "probability": 0.5}`,
		`{"path": "/payments", "fault": "reject", "count": -1}`,
		`{"path": "/payments", "fault": "reject", "probability": 1.5}`,
		`{"path": "/payments", "fault": "reject", "count": 1, "seed": 4}`,
		`{"path": "/payments", "fault": "reject", "count": 1, "delay": "2s"}`,
		`{"path": "/payments", "fault": "commit_then_timeout", "count": 1, "delay": "soon"}`,
		`{"path": "/payments", "fault": "commit_then_timeout", "count": 1, "delay": "-1s"}`,
		`{"path": "/payments", "fault": "reject", "count": 1, "probabilty": 0.5}`,
		`{"path": "/payments", "fault": "reject", "count": "1"}`,
		`[{"path": "/payments", "fault": "reject", "count": 1}]`,
		`null`,
		``,
		`{"path": "/payments", "fault": "reject", "count": 1} {}`,
	} {
		a := e.must(400, "POST", "/_control/faults", body)
		if a.str("message") == "" {
			t.Errorf("%s: no message: %s", body, a.Raw)
		}
	}
	if l := e.p.Faults(); len(l.Faults) != 0 {
		t.Errorf("bad rules were added: %+v", l.Faults)
	}
	a := e.must(201, "POST", "/_control/faults", `{"path": "/payments", "fault": "commit_then_timeout", "count": 2}`)
	if a.str("delay") != "30s" || a.str("method") != "POST" || a.str("id") == "" {
		t.Errorf("default delay and method: %s", a.Raw)
	}
	a = e.must(201, "POST", "/_control/faults", `{"method": "get", "path": "/emails/*", "fault": "timeout", "probability": 0.5, "delay": "150ms"}`)
	if a.str("delay") != "150ms" || a.str("method") != "GET" || a.Body["seed"] == nil {
		t.Errorf("a GET rule: %s", a.Raw)
	}
	l := e.must(200, "GET", "/_control/faults", "")
	if faults, _ := l.Body["faults"].([]any); len(faults) != 2 {
		t.Errorf("list: %s", l.Raw)
	}
	e.must(200, "DELETE", "/_control/faults", "")
	if l := e.p.Faults(); len(l.Faults) != 0 {
		t.Errorf("after DELETE: %+v", l.Faults)
	}
}
