package fakeprovider

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestIndexLag(t *testing.T) {
	const lag = 300 * time.Millisecond
	e := newEnv(t, Options{IndexLag: lag})
	const key = "lagging-key"

	posted := time.Now()
	pay := e.must(201, "POST", "/payments", payBody, "Idempotency-Key", key)
	found := e.must(200, "GET", "/payments?idempotency_key="+key, "").data()
	if took := time.Since(posted); took < lag {
		if len(found) != 0 {
			t.Fatalf("search %v after creation found %v; the lag is %v", took, found, lag)
		}
	} else {
		t.Logf("the machine is slow (%v): the just-created check is skipped", took)
	}
	// By id and through the control API: at once.
	if got := e.must(200, "GET", "/payments/"+pay.str("id"), ""); got.str("id") != pay.str("id") {
		t.Errorf("by id: %s", got.Raw)
	}
	e.wantCount(key, 1)

	eventually(t, 5*time.Second, func() bool {
		return len(e.must(200, "GET", "/payments?idempotency_key="+key, "").data()) == 1
	}, "search never found the payment")
	if took := time.Since(posted); took < lag {
		t.Errorf("search found the payment %v after its POST; the lag is %v", took, lag)
	}
}

func TestControlEffectsResetAndConfig(t *testing.T) {
	e := newEnv(t, Options{IndexLag: time.Hour})
	const key = "shared-key"
	e.must(201, "POST", "/payments", payBody, "Idempotency-Key", key)
	e.must(200, "POST", "/payments", payBody, "Idempotency-Key", key)
	e.must(202, "POST", "/emails", `{"to": "a@example.com", "reference": "`+key+`"}`)
	e.must(202, "POST", "/emails", `{"to": "a@example.com", "reference": "other"}`)
	app := e.must(201, "POST", "/applications", `{"job_id": "j", "candidate": "c"}`)

	all := e.must(200, "GET", "/_control/effects", "")
	var counts EffectCounts
	if err := json.Unmarshal([]byte(all.Raw), &counts); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"payment:" + key: 1, "email:" + key: 1, "email:other": 1, "application:" + app.str("id"): 1}
	if counts.Total != 4 || len(counts.Effects) != len(want) {
		t.Errorf("effects %s, want %v", all.Raw, want)
	}
	for k, n := range want {
		if counts.Effects[k] != n {
			t.Errorf("effects[%q] = %d, want %d", k, counts.Effects[k], n)
		}
	}

	one := e.must(200, "GET", "/_control/effects?key="+key, "")
	var ke KeyEffects
	if err := json.Unmarshal([]byte(one.Raw), &ke); err != nil {
		t.Fatal(err)
	}
	if ke.Key != key || ke.Count != 2 || len(ke.Records) != 2 || ke.Records[0].Kind != KindPayment || ke.Records[1].Kind != KindEmail {
		t.Errorf("effects for %q: %s", key, one.Raw)
	}
	if a := e.must(200, "GET", "/_control/effects?key=nothing", ""); a.Body["count"].(json.Number) != "0" {
		t.Errorf("an unknown key: %s", a.Raw)
	}
	e.must(400, "GET", "/_control/effects?kee=x", "")
	e.must(400, "GET", "/_control/effects?key=", "")

	// Config: the lag hides everything from search; lowering it at run
	// time shows old records at once.
	if a := e.must(200, "GET", "/_control/config", ""); a.str("index_lag") != "1h0m0s" {
		t.Errorf("config: %s", a.Raw)
	}
	if d := e.must(200, "GET", "/emails?reference="+key, "").data(); len(d) != 0 {
		t.Errorf("with a 1h lag search found %v", d)
	}
	if a := e.must(200, "POST", "/_control/config", `{"index_lag": "0s"}`); a.str("index_lag") != "0s" {
		t.Errorf("set config: %s", a.Raw)
	}
	if d := e.must(200, "GET", "/emails?reference="+key, "").data(); len(d) != 1 {
		t.Errorf("with no lag search found %v", d)
	}
	for _, bad := range []string{`{"index_lag": "-1s"}`, `{"index_lag": "soon"}`, `{"index_lag": 3}`, `{"lag": "1s"}`, `[]`} {
		e.must(400, "POST", "/_control/config", bad)
	}
	if got := e.p.IndexLag(); got != 0 {
		t.Errorf("bad configs changed the lag to %v", got)
	}

	// Reset: no records, no keys, no faults; the options' lag; ids go on.
	e.fault(Fault{Path: "/payments", Kind: Reject, Count: 5})
	e.must(200, "POST", "/_control/reset", "")
	if got := e.p.Effects(); got.Total != 0 || len(got.Effects) != 0 {
		t.Errorf("after reset: %+v", got)
	}
	if l := e.p.Faults(); len(l.Faults) != 0 || len(l.Fired) != 0 {
		t.Errorf("faults after reset: %+v", l)
	}
	if got := e.p.IndexLag(); got != time.Hour {
		t.Errorf("lag after reset %v, want the options' 1h", got)
	}
	again := e.must(201, "POST", "/payments", payBody, "Idempotency-Key", key) // the key is forgotten
	if again.str("id") != "pay_000002" {
		t.Errorf("id after reset %q, want pay_000002 (never reused)", again.str("id"))
	}
	e.wantCount(key, 1)
	e.must(200, "GET", "/healthz", "")
}

func TestControlClient(t *testing.T) {
	e := newEnv(t, Options{})
	c := NewControlClient(e.URL+"/", nil)
	ctx := context.Background()

	st, err := c.AddFault(ctx, Fault{Path: "/payments", Kind: CommitThenTimeout, Count: 1, Delay: 150 * time.Millisecond})
	if err != nil || st.Delay != "150ms" || st.Remaining != 1 {
		t.Fatalf("AddFault: %+v, %v", st, err)
	}
	if _, err := c.AddFault(ctx, Fault{Path: "/nowhere", Kind: Reject, Count: 1}); err == nil || !strings.Contains(err.Error(), "invalid_fault") {
		t.Errorf("a bad fault: %v", err)
	}
	if l, err := c.Faults(ctx); err != nil || len(l.Faults) != 1 || l.Faults[0].ID != st.ID {
		t.Errorf("Faults: %+v, %v", l, err)
	}
	if _, err := e.do(shortClient(), "POST", "/payments", `{"amount_minor": 4900, "memo": {"a": [1, 2.50]}}`, "Idempotency-Key", "ck"); !isTimeout(err) {
		t.Errorf("err %v, want a timeout", err)
	}
	e.waitIdle()
	if n, err := c.Count(ctx, "ck"); err != nil || n != 1 {
		t.Errorf("Count: %d, %v", n, err)
	}
	k, err := c.Lookup(ctx, "ck")
	if err != nil || k.Count != 1 {
		t.Fatalf("Lookup: %+v, %v", k, err)
	}
	r := k.Records[0]
	if r.Kind != KindPayment || r.IdempotencyKey != "ck" || r.EffectKey != "ck" || r.Status != "succeeded" || r.CreatedAt.IsZero() ||
		r.Fields["amount_minor"].(json.Number) != "4900" || r.Fields["memo"].(map[string]any)["a"].([]any)[1].(json.Number) != "2.50" {
		t.Errorf("record read back: %+v", r)
	}
	if _, ok := r.Fields["id"]; ok {
		t.Errorf("the provider's fields are left in Fields: %v", r.Fields)
	}
	if eff, err := c.Effects(ctx); err != nil || eff.Total != 1 || eff.Effects["payment:ck"] != 1 {
		t.Errorf("Effects: %+v, %v", eff, err)
	}
	if l, err := c.ClearFaults(ctx); err != nil || l.Fired[CommitThenTimeout] != 1 {
		t.Errorf("ClearFaults: %+v, %v", l, err)
	}
	if err := c.SetIndexLag(ctx, time.Minute); err != nil || e.p.IndexLag() != time.Minute {
		t.Errorf("SetIndexLag: %v, lag %v", err, e.p.IndexLag())
	}
	if err := c.SetIndexLag(ctx, -time.Second); err == nil {
		t.Errorf("a negative lag was accepted")
	}
	if err := c.Reset(ctx); err != nil || e.p.Count("ck") != 0 {
		t.Errorf("Reset: %v, count %d", err, e.p.Count("ck"))
	}
	unreachable := NewControlClient("http://127.0.0.1:1", &http.Client{Timeout: time.Second})
	if _, err := unreachable.Effects(ctx); err == nil {
		t.Errorf("no error from an unreachable provider")
	}
}
