package fakeprovider

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestPaymentIdempotency(t *testing.T) {
	e := newEnv(t, Options{})
	const key = "payment:order-817:intent-01"

	first := e.must(201, "POST", "/payments", payBody, "Idempotency-Key", key)
	if first.str("status") != "succeeded" || first.str("idempotency_key") != key || !strings.HasPrefix(first.str("id"), "pay_") {
		t.Errorf("created payment: %s", first.Raw)
	}
	if first.Body["amount_minor"].(fmt.Stringer).String() != "490000" || first.str("effect_key") != key || first.str("created_at") == "" {
		t.Errorf("created payment: %s", first.Raw)
	}
	if first.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("a first request says Idempotent-Replayed: %q", first.Header.Get("Idempotent-Replayed"))
	}

	// The same body, keys in another order and other spacing: a replay.
	again := e.must(200, "POST", "/payments", `{"order_id":"817","currency":"RUB","amount_minor":490000}`, "Idempotency-Key", key)
	if again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay without Idempotent-Replayed: true")
	}
	if again.str("id") != first.str("id") || again.str("created_at") != first.str("created_at") {
		t.Errorf("replay %s differs from the original %s", again.Raw, first.Raw)
	}
	e.wantCount(key, 1)

	// The same key with another amount: a conflict, nothing performed.
	conflict := e.must(422, "POST", "/payments", `{"amount_minor": 500000, "currency": "RUB", "order_id": "817"}`, "Idempotency-Key", key)
	if conflict.str("error") != "idempotency_key_reused" {
		t.Errorf("conflict: %s", conflict.Raw)
	}
	e.wantCount(key, 1)
	if got := e.p.Effects(); got.Total != 1 || got.Effects["payment:"+key] != 1 {
		t.Errorf("effects %+v, want one payment under the key", got)
	}
}

func TestPaymentsWithoutKeyAreNotDeduplicated(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.must(201, "POST", "/payments", payBody)
	b := e.must(201, "POST", "/payments", payBody)
	if a.str("id") == b.str("id") {
		t.Fatalf("two POSTs without a key got one id %s", a.str("id"))
	}
	if a.Body["idempotency_key"] != nil || a.str("effect_key") != a.str("id") {
		t.Errorf("a payment without a key: %s", a.Raw)
	}
	e.wantCount(a.str("id"), 1)
	e.wantCount(b.str("id"), 1)
	if got := e.p.Effects().Total; got != 2 {
		t.Errorf("total effects %d, want 2", got)
	}
}

func TestPaymentConcurrentSameKey(t *testing.T) {
	e := newEnv(t, Options{})
	const key, n = "concurrent-key", 32
	start := make(chan struct{})
	var wg sync.WaitGroup
	answers := make([]answer, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = e.do(http.DefaultClient, "POST", "/payments", payBody, "Idempotency-Key", key)
		})
	}
	close(start)
	wg.Wait()

	statuses := map[int]int{}
	ids := map[string]bool{}
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		statuses[a.Status]++
		switch a.Status {
		case 201:
			ids[a.str("id")] = true
		case 200:
			ids[a.str("id")] = true
			if a.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("a 200 without Idempotent-Replayed")
			}
		case 409: // in flight: allowed
		default:
			t.Errorf("request %d: status %d: %s", i, a.Status, a.Raw)
		}
	}
	if statuses[201] != 1 || len(ids) != 1 {
		t.Errorf("statuses %v, ids %v: want exactly one 201 and one id", statuses, ids)
	}
	e.wantCount(key, 1)
	if got := e.p.Effects().Total; got != 1 {
		t.Errorf("total effects %d, want 1", got)
	}
}

func TestPaymentValidation(t *testing.T) {
	e := newEnv(t, Options{})
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"currency": "RUB"}`, 400, "invalid_request"},
		{`{"amount_minor": 0}`, 400, "invalid_request"},
		{`{"amount_minor": -5}`, 400, "invalid_request"},
		{`{"amount_minor": 49.5}`, 400, "invalid_request"},
		{`{"amount_minor": 4900.0}`, 400, "invalid_request"},
		{`{"amount_minor": 1e3}`, 400, "invalid_request"},
		{`{"amount_minor": "4900"}`, 400, "invalid_request"},
		{`{"amount_minor": 9007199254740992}`, 400, "invalid_request"},
		{`{"amount_minor": 99999999999999999999999}`, 400, "invalid_request"},
		{`{"amount_minor": 4900, "currency": 643}`, 400, "invalid_request"},
		{`{"amount_minor": 4900, "card": "declined"}`, 402, "card_declined"},
		{``, 400, "invalid_request"},
		{`null`, 400, "invalid_request"},
		{`[1, 2]`, 400, "invalid_request"},
		{`{"amount_minor": 4900`, 400, "invalid_request"},
		{`{"amount_minor": 4900} {"amount_minor": 1}`, 400, "invalid_request"},
		{`{"amount_minor": 4900} x`, 400, "invalid_request"},
		{`{"amount_minor": 4900, "pad": "` + strings.Repeat("x", MaxBodyBytes) + `"}`, 413, "request_too_large"},
	} {
		name := tc.body
		if len(name) > 60 {
			name = name[:60] + "…"
		}
		a := e.must(tc.status, "POST", "/payments", tc.body, "Idempotency-Key", "k-"+fmt.Sprint(len(tc.body)))
		if a.str("error") != tc.code || a.str("message") == "" {
			t.Errorf("%s: %s, want error %q with a message", name, a.Raw, tc.code)
		}
	}
	a := e.must(400, "POST", "/payments", payBody, "Idempotency-Key", strings.Repeat("k", 256))
	if !strings.Contains(a.str("message"), "Idempotency-Key") {
		t.Errorf("a 256-byte key: %s", a.Raw)
	}
	if got := e.p.Effects().Total; got != 0 {
		t.Errorf("rejections stored %d effects", got)
	}
	// A declined key is not remembered: the same key with a good card works.
	e.must(402, "POST", "/payments", `{"amount_minor": 4900, "card": "declined"}`, "Idempotency-Key", "declined-then-ok")
	e.must(201, "POST", "/payments", `{"amount_minor": 4900, "card": "ok"}`, "Idempotency-Key", "declined-then-ok")
	e.wantCount("declined-then-ok", 1)
}

func TestEmailsAndApplicationsDoNotDeduplicate(t *testing.T) {
	e := newEnv(t, Options{})
	const ref = "email:user-5:welcome"
	em1 := e.must(202, "POST", "/emails", `{"to": "a@example.com", "subject": "hi", "reference": "`+ref+`"}`, "Idempotency-Key", ref)
	em2 := e.must(202, "POST", "/emails", `{"to": "a@example.com", "subject": "hi", "reference": "`+ref+`"}`, "Idempotency-Key", ref)
	if em1.str("id") == em2.str("id") || !strings.HasPrefix(em1.str("id"), "eml_") || em1.str("status") != "sent" || em1.str("reference") != ref {
		t.Errorf("emails: %s and %s", em1.Raw, em2.Raw)
	}
	if em2.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("an email claims to be replayed")
	}
	found := e.must(200, "GET", "/emails?reference="+ref, "").data()
	if len(found) != 2 || found[0]["id"] != em1.str("id") || found[1]["id"] != em2.str("id") {
		t.Errorf("search by reference found %v, want both emails in order", found)
	}

	const aref = "apply:job-42:cand-7"
	body := `{"job_id": "job-42", "candidate": "cand-7", "reference": "` + aref + `"}`
	ap1 := e.must(201, "POST", "/applications", body)
	ap2 := e.must(201, "POST", "/applications", body)
	if ap1.str("id") == ap2.str("id") || !strings.HasPrefix(ap1.str("id"), "app_") || ap1.str("status") != "submitted" || ap1.str("reference") != aref {
		t.Errorf("applications: %s and %s", ap1.Raw, ap2.Raw)
	}
	if found := e.must(200, "GET", "/applications?reference="+aref, "").data(); len(found) != 2 {
		t.Errorf("search by reference found %d applications, want 2", len(found))
	}
	e.wantCount(ref, 2)
	e.wantCount(aref, 2)
	if got := e.p.Effects(); got.Total != 4 || got.Effects["email:"+ref] != 2 || got.Effects["application:"+aref] != 2 {
		t.Errorf("effects %+v", got)
	}

	// Without a reference the id is the effect key.
	noRef := e.must(202, "POST", "/emails", `{"to": "b@example.com"}`)
	if noRef.Body["reference"] != nil || noRef.str("effect_key") != noRef.str("id") {
		t.Errorf("email without reference: %s", noRef.Raw)
	}
	for _, tc := range []struct{ path, body string }{
		{"/emails", `{"subject": "no recipient"}`},
		{"/emails", `{"to": ""}`},
		{"/emails", `{"to": "a@example.com", "reference": 7}`},
		{"/applications", `{"job_id": "j"}`},
		{"/applications", `{"candidate": "c", "job_id": 1}`},
	} {
		e.must(400, "POST", tc.path, tc.body)
	}
	if got := e.p.Effects().Total; got != 5 {
		t.Errorf("total effects %d after rejected requests, want 5", got)
	}
}

func TestGetByIDAndSearchParameters(t *testing.T) {
	e := newEnv(t, Options{})
	pay := e.must(201, "POST", "/payments", payBody, "Idempotency-Key", "k1")
	got := e.must(200, "GET", "/payments/"+pay.str("id"), "")
	if got.Raw != pay.Raw {
		t.Errorf("by id %s, created %s", got.Raw, pay.Raw)
	}
	e.must(404, "GET", "/payments/pay_999999", "")
	e.must(404, "GET", "/emails/"+pay.str("id"), "") // a payment id is not an email

	if d := e.must(200, "GET", "/payments?idempotency_key=k1", "").data(); len(d) != 1 || d[0]["id"] != pay.str("id") {
		t.Errorf("search by key: %v", d)
	}
	if d := e.must(200, "GET", "/payments?idempotency_key=other", "").data(); len(d) != 0 {
		t.Errorf("search by another key: %v", d)
	}
	if d := e.must(200, "GET", "/payments?order_id=817&idempotency_key=k1", "").data(); len(d) != 1 {
		t.Errorf("search by order and key: %v", d)
	}
	if d := e.must(200, "GET", "/payments", "").data(); len(d) != 1 {
		t.Errorf("list: %v", d)
	}
	// A typo must not turn a search into a listing.
	e.must(400, "GET", "/payments?idempotencykey=k1", "")
	e.must(400, "GET", "/emails?reference=", "")
	e.must(400, "GET", "/emails?reference=a&reference=b", "")
	e.must(400, "GET", "/payments?reference=k1", "")
}
