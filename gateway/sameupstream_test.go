package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/testserver"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"github.com/opjournal/opjournal/protocol/policy"
)

// The invariant of the HTTP door: what the provider receives is what was
// hashed. Two requests with one operation key and one request hash reach
// the provider as one request, byte for byte (method, path and query,
// every header, body); a request whose upstream request would differ has
// another hash (the same key is then 422) or is refused (4xx, nothing
// sent). And the hash the journal holds is the hash of what the provider
// received: rebuilt from the upstream's side of the wire alone, it is the
// journal's.
//
// Each check sends request A to one gateway and request B to another, on
// two journals, with the same caller and client key (so the same
// operation key): both are sent, and their upstream requests are
// compared. Then B goes to A's gateway too: a replay when its hash is A's,
// 422 otherwise, never a second request upstream.

// samePolicy is the routes of the checks: a JSON route and a form route,
// each forwarding a Stripe-style header and the operation key as the
// provider's Idempotency-Key and in a body field.
const samePolicy = `actions:
  create_thing:
    gateway:
      http:
        route: POST /things
        upstream: "${UPSTREAM}"
        forward_headers: [Stripe-Account, Stripe-Version]
        forward_key_header: Idempotency-Key
        forward_key_field: reference
  create_charge:
    gateway:
      http:
        route: POST /v1/charges
        upstream: "${UPSTREAM}"
        forward_headers: [Stripe-Account]
        forward_key_header: Idempotency-Key
        forward_key_field: "metadata[reference]"
`

// sameRoutes describes samePolicy's routes to the checks.
var sameRoutes = map[bool]struct{ action, path, keyField string }{
	false: {"create_thing", "/things", "reference"},
	true:  {"create_charge", "/v1/charges", "metadata[reference]"},
}

// sameForwarded are the headers either route forwards.
var sameForwarded = map[bool][]string{false: {"Stripe-Account", "Stripe-Version"}, true: {"Stripe-Account"}}

// received is one request an upstream received, as it came off the wire.
type received struct {
	method, uri string
	header      http.Header
	body        []byte
}

func (r received) String() string {
	return fmt.Sprintf("%s %s %v %q", r.method, r.uri, r.header, r.body)
}

func (r received) equal(o received) bool {
	if r.method != o.method || r.uri != o.uri || !bytes.Equal(r.body, o.body) || len(r.header) != len(o.header) {
		return false
	}
	for k, v := range r.header {
		if !slices.Equal(v, o.header[k]) {
			return false
		}
	}
	return true
}

// sameSide is one journal with a gateway and a recording upstream.
type sameSide struct {
	gw    *gateway.Gateway
	front string
	rpc   pb.JournalServiceClient
	mu    sync.Mutex
	got   []received
}

func (s *sameSide) requests() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// sameFixture is the two sides of the checks.
type sameFixture struct {
	sides [2]*sameSide
	n     atomic.Int64
}

func newSameFixture(t testing.TB) *sameFixture {
	t.Helper()
	pol, err := policy.Parse([]byte(samePolicy), "same-upstream.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := &sameFixture{}
	for i := range f.sides {
		s := &sameSide{}
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			s.got = append(s.got, received{r.Method, r.RequestURI, r.Header.Clone(), b})
			s.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"x_1"}`)
		}))
		t.Cleanup(up.Close)
		a, _ := testAuth(t)
		j := testserver.Start(t, pol, testserver.WithAuth(a, tokenAdmin))
		s.rpc = pb.NewJournalServiceClient(client.BearerConn(j.Conn, tokenAdmin))
		s.gw, err = gateway.New(gateway.Config{
			Journal: client.New(j.Conn, client.WithWorkerID(fmt.Sprintf("gateway-same-%d", i))), Policy: pol,
			LookupEnv: func(name string) (string, bool) { return up.URL, name == "UPSTREAM" },
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(s.gw)
		t.Cleanup(front.Close)
		t.Cleanup(s.gw.Wait)
		s.front = front.URL
		f.sides[i] = s
	}
	return f
}

// failer is what the checks need of a *testing.T or a *rapid.T.
type failer interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// sameRequest is a request as a client spells it.
type sameRequest struct {
	form     bool
	body     []byte
	rawQuery string
	headers  [][2]string // names as written
}

func (r sameRequest) String() string {
	return fmt.Sprintf("form=%v body=%q query=%q headers=%q", r.form, r.body, r.rawQuery, r.headers)
}

// sameClient sends the checks' requests; a request never waits long.
var sameClient = &http.Client{Timeout: 30 * time.Second}

// answer is what the gateway answered, and what its upstream received
// for it (nil: nothing).
type answer struct {
	status   int
	ctype    string
	replayed bool
	sent     *received
}

// send sends r to side s with the client key and returns the answer.
func (s *sameSide) send(t failer, r sameRequest, key string) answer {
	t.Helper()
	before := len(s.requests())
	req, err := http.NewRequest(http.MethodPost, s.front+sameRoutes[r.form].path, bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.RawQuery = r.rawQuery // as written, invalid escapes and all
	ct := "application/json"
	if r.form {
		ct = "application/x-www-form-urlencoded"
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	req.Header.Set("Idempotency-Key", key)
	for _, h := range r.headers {
		req.Header[h[0]] = append(req.Header[h[0]], h[1]) // the name as written
	}
	res, err := sameClient.Do(req)
	if err != nil {
		t.Fatalf("%v: %v", r, err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	s.gw.Wait() // the answer is recorded before the next request
	a := answer{status: res.StatusCode, ctype: res.Header.Get("Content-Type"), replayed: res.Header.Get("Idempotent-Replayed") == "true"}
	got := s.requests()
	switch len(got) - before {
	case 0:
	case 1:
		a.sent = &got[before]
	default:
		t.Fatalf("%v: %d upstream requests for one request", r, len(got)-before)
	}
	return a
}

// hashOf is the journal's request hash of the operation key ("" when it
// holds none).
func (s *sameSide) hashOf(t failer, key string) string {
	t.Helper()
	res, err := s.rpc.Lookup(context.Background(), &pb.LookupRequest{OperationKey: key})
	if err != nil {
		return ""
	}
	return res.GetOperation().GetRequestHash()
}

// hashOfReceived rebuilds the request hash from what the upstream
// received alone: the body's members (without the forwarded key field),
// the query's pairs as "$query", the forwarded headers as "$headers".
func hashOfReceived(t failer, form bool, r received) string {
	t.Helper()
	route := sameRoutes[form]
	payload := map[string]any{}
	pairsObj := func(vs url.Values) map[string]any {
		out := map[string]any{}
		for n, v := range vs {
			if len(v) == 1 {
				out[n] = v[0]
			} else {
				out[n] = v
			}
		}
		return out
	}
	if form {
		vs, err := url.ParseQuery(string(r.body))
		if err != nil {
			t.Fatalf("the upstream's form %q: %v", r.body, err)
		}
		payload = pairsObj(vs)
	} else {
		dec := json.NewDecoder(bytes.NewReader(r.body))
		dec.UseNumber()
		if err := dec.Decode(&payload); err != nil {
			t.Fatalf("the upstream's body %q: %v", r.body, err)
		}
	}
	delete(payload, route.keyField)
	_, rawQuery, _ := strings.Cut(r.uri, "?")
	if rawQuery != "" {
		vs, err := url.ParseQuery(rawQuery)
		if err != nil {
			t.Fatalf("the upstream's query %q: %v", rawQuery, err)
		}
		payload["$query"] = pairsObj(vs)
	}
	headers := map[string]any{}
	for _, h := range sameForwarded[form] {
		switch vs := r.header.Values(h); len(vs) {
		case 0:
		case 1:
			headers[strings.ToLower(h)] = vs[0]
		default:
			headers[strings.ToLower(h)] = vs
		}
	}
	if len(headers) > 0 {
		payload["$headers"] = headers
	}
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := canonjson.RequestHash(route.action, b, canonjson.Options{})
	if err != nil {
		t.Fatalf("the upstream received %v, which does not hash: %v", r, err)
	}
	return h
}

// check sends a and b as described at the top of the file and fails
// unless the invariant holds.
func (f *sameFixture) check(t failer, a, b sameRequest) {
	t.Helper()
	key := "same-" + strconv.FormatInt(f.n.Add(1), 10)
	opKey := "http:" + sameRoutes[a.form].action + ":" + scopeOf("agent-a") + ":" + key
	ra := f.sides[0].send(t, a, key)
	rb := f.sides[1].send(t, b, key)
	hashes := [2]string{}
	for i, c := range []struct {
		r   sameRequest
		ans answer
	}{{a, ra}, {b, rb}} {
		switch {
		case c.ans.status >= 400 && c.ans.status < 500:
			if c.ans.sent != nil || c.ans.ctype != "application/problem+json" {
				t.Fatalf("%v: refused with %d (%s), yet the upstream received %v", c.r, c.ans.status, c.ans.ctype, c.ans.sent)
			}
		case c.ans.status == http.StatusCreated && c.ans.sent != nil:
			hashes[i] = f.sides[i].hashOf(t, opKey)
			if got := hashOfReceived(t, c.r.form, *c.ans.sent); got != hashes[i] || got == "" {
				t.Fatalf("%v: the upstream received %v, whose hash is %s; the journal holds %s", c.r, c.ans.sent, got, hashes[i])
			}
		default:
			t.Fatalf("%v: %d, upstream %v", c.r, c.ans.status, c.ans.sent)
		}
	}
	if ra.sent != nil && rb.sent != nil && a.form == b.form {
		if same := ra.sent.equal(*rb.sent); same != (hashes[0] == hashes[1]) {
			t.Fatalf("one key, hashes equal %v, upstream requests equal %v:\nA %v\n  → %v\nB %v\n  → %v", hashes[0] == hashes[1], same, a, ra.sent, b, rb.sent)
		}
	}
	// B with A's key at A's gateway.
	again := f.sides[0].send(t, b, key)
	switch {
	case again.sent != nil && ra.sent != nil:
		t.Fatalf("the key of %v was sent again for %v: %v", a, b, again.sent)
	case rb.sent == nil:
		if again.status != rb.status || again.sent != nil {
			t.Fatalf("%v refused with %d by one gateway, %d (sent %v) by the other", b, rb.status, again.status, again.sent)
		}
	case ra.sent == nil:
		// A was refused: B is the key's first request here too, and is
		// the same upstream request the other gateway sent.
		if again.sent == nil || !again.sent.equal(*rb.sent) {
			t.Fatalf("%v: sent %v by one gateway, %v by the other", b, rb.sent, again.sent)
		}
	case a.form == b.form && hashes[0] == hashes[1]:
		if !again.replayed || again.status != http.StatusCreated {
			t.Fatalf("%v after %v (one hash): %d, replayed %v", b, a, again.status, again.replayed)
		}
	default:
		if again.status != http.StatusUnprocessableEntity {
			t.Fatalf("%v after %v (another hash): %d, want 422", b, a, again.status)
		}
	}
}

// --- generated requests ---

// sameNames are body member names, with case variants and the special
// folds Go's encoding/json applies (the Kelvin sign, the long s, the
// dotted capital I), and the reserved "$query".
var sameNames = []string{"amount_minor", "Amount_Minor", "AMOUNT_MINOR", "currency", "destination", "Destination",
	"status", "\u017ftatus", "kind", "\u212aind", "id", "\u0130d", "memo", "$query"}

// sameValue is a generated JSON value and its spellings.
type sameValue struct {
	kind byte // 'i' integer, 's' string, 'n' null, 'o' object
	i    int
	s    string
	obj  []sameMember
}

type sameMember struct {
	name string
	v    sameValue
}

func genValue(t *rapid.T, depth int) sameValue {
	kinds := "iisn"
	if depth < 2 {
		kinds += "o"
	}
	v := sameValue{kind: rapid.SampledFrom([]byte(kinds)).Draw(t, "kind")}
	switch v.kind {
	case 'i':
		v.i = rapid.SampledFrom([]int{0, 100, 99999999, -1}).Draw(t, "int")
	case 's':
		v.s = rapid.SampledFrom([]string{"a", "acct_1", "acct_attacker", "RUB", "é", "a b&c=d"}).Draw(t, "str")
	case 'o':
		v.obj = genMembers(t, depth+1)
	}
	return v
}

func genMembers(t *rapid.T, depth int) []sameMember {
	var out []sameMember
	for range rapid.IntRange(0, 4).Draw(t, "members") {
		out = append(out, sameMember{rapid.SampledFrom(sameNames).Draw(t, "name"), genValue(t, depth)})
	}
	return out
}

// spellJSON writes members as a JSON object, choosing among equivalent
// spellings: member order, whitespace, escapes, number forms.
func spellJSON(t *rapid.T, b *strings.Builder, members []sameMember) {
	ws := func() { b.WriteString(rapid.SampledFrom([]string{"", " ", "\n"}).Draw(t, "ws")) }
	order := rapid.Permutation(members).Draw(t, "order")
	b.WriteByte('{')
	for i, m := range order {
		if i > 0 {
			b.WriteByte(',')
		}
		ws()
		spellString(t, b, m.name)
		b.WriteByte(':')
		ws()
		switch m.v.kind {
		case 'i':
			n := m.v.i
			b.WriteString(rapid.SampledFrom([]string{strconv.Itoa(n), strconv.Itoa(n) + ".0", fmt.Sprintf("%de0", n), fmt.Sprintf("%.2e", float64(n))}).Draw(t, "num"))
		case 's':
			spellString(t, b, m.v.s)
		case 'n':
			b.WriteString("null")
		case 'o':
			spellJSON(t, b, m.v.obj)
		}
	}
	ws()
	b.WriteByte('}')
}

// spellString writes s as a JSON string, escaping each character or not.
func spellString(t *rapid.T, b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x10000 && rapid.Bool().Draw(t, "escape"):
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// samePairs are a form's or query's pairs.
func genPairs(t *rapid.T, names []string) [][2]string {
	var out [][2]string
	for range rapid.IntRange(0, 3).Draw(t, "pairs") {
		out = append(out, [2]string{rapid.SampledFrom(names).Draw(t, "pname"), rapid.SampledFrom([]string{"1", "100", "a b", "é", "x&y", ""}).Draw(t, "pvalue")})
	}
	return out
}

// spellPairs writes pairs form-encoded, in an order that keeps a repeated
// name's values in order, each byte escaped or not, a space as + or %20.
func spellPairs(t *rapid.T, pairs [][2]string) string {
	// Interleave by name: shuffle the names' first appearances, keep each
	// name's values in order.
	byName := map[string][]string{}
	var names []string
	for _, p := range pairs {
		if _, ok := byName[p[0]]; !ok {
			names = append(names, p[0])
		}
		byName[p[0]] = append(byName[p[0]], p[1])
	}
	names = rapid.Permutation(names).Draw(t, "pair order")
	esc := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case c == ' ':
				b.WriteString(rapid.SampledFrom([]string{"+", "%20"}).Draw(t, "space"))
			case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_':
				if rapid.Bool().Draw(t, "pct") {
					fmt.Fprintf(&b, "%%%02X", c)
				} else {
					b.WriteByte(c)
				}
			default:
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String()
	}
	var parts []string
	for _, n := range names {
		for _, v := range byName[n] {
			parts = append(parts, esc(n)+"="+esc(v))
		}
	}
	return strings.Join(parts, "&")
}

// sameIntent is what a request means; spell makes one of its spellings.
type sameIntent struct {
	form    bool
	members []sameMember // JSON
	pairs   [][2]string  // form
	query   [][2]string
	headers [][2]string // canonical names
}

func genIntent(t *rapid.T) sameIntent {
	in := sameIntent{form: rapid.Bool().Draw(t, "form")}
	if in.form {
		in.pairs = genPairs(t, []string{"amount", "Amount", "currency", "metadata[order]", "expand[]", "items[][price]", "$headers"})
	} else {
		in.members = genMembers(t, 0)
	}
	in.query = genPairs(t, []string{"amount", "mode", "Mode"})
	for _, h := range []string{"Stripe-Account", "Stripe-Version", "X-Http-Method-Override", "X-Other"} {
		if rapid.Bool().Draw(t, "has "+h) {
			in.headers = append(in.headers, [2]string{h, rapid.SampledFrom([]string{"acct_1", "acct_attacker", "PUT", "2024-06-20", ""}).Draw(t, "hvalue")})
		}
	}
	return in
}

// mutate changes one thing the provider would see, or nothing.
func mutate(t *rapid.T, in sameIntent) sameIntent {
	out := in
	out.members, out.pairs = slices.Clone(in.members), slices.Clone(in.pairs)
	out.query, out.headers = slices.Clone(in.query), slices.Clone(in.headers)
	switch rapid.IntRange(0, 4).Draw(t, "mutation") {
	case 0: // none
	case 1:
		if len(out.members) > 0 {
			i := rapid.IntRange(0, len(out.members)-1).Draw(t, "which")
			out.members[i].v = genValue(t, 1)
		} else if len(out.pairs) > 0 {
			out.pairs[0][1] += "0"
		}
	case 2:
		out.query = genPairs(t, []string{"amount", "mode"})
	case 3:
		out.headers = append(out.headers, [2]string{"Stripe-Account", "acct_attacker"})
	case 4:
		out.headers = nil
	}
	return out
}

// spell makes one client's spelling of in, maybe broken: bytes after the
// JSON value, invalid UTF-8 in the body, the query or a header.
func spell(t *rapid.T, in sameIntent) sameRequest {
	r := sameRequest{form: in.form}
	if in.form {
		r.body = []byte(spellPairs(t, in.pairs))
	} else {
		var b strings.Builder
		spellJSON(t, &b, in.members)
		r.body = []byte(b.String())
	}
	r.rawQuery = spellPairs(t, in.query)
	for _, h := range in.headers {
		name := rapid.SampledFrom([]string{h[0], strings.ToLower(h[0]), strings.ToUpper(h[0])}).Draw(t, "hname")
		r.headers = append(r.headers, [2]string{name, h[1]})
	}
	switch rapid.IntRange(0, 9).Draw(t, "break") {
	case 0:
		r.body = append(r.body, rapid.SampledFrom([]string{"]", " {}", "x", "\n"}).Draw(t, "trailing")...)
	case 1:
		if i := bytes.IndexByte(r.body, '"'); !in.form && i >= 0 {
			r.body = slices.Insert(r.body, i+1, 0xff)
		} else if in.form {
			r.body = append(r.body, "&memo=%FF"...)
		}
	case 2:
		r.rawQuery += "&q=%C3"
	case 3:
		r.headers = append(r.headers, [2]string{"Stripe-Account", "acct_\xff"})
	}
	return r
}

// TestSameHashSameUpstreamRequest is the invariant over generated pairs
// of requests: re-spellings of one intent (member order, whitespace,
// escapes, number forms, header names' case, extra headers the route
// does not forward, query escapes and order) and changed intents (a
// value, the query, a forwarded header), with case-variant member names,
// reserved names, interleaving-dependent form names, trailing data and
// invalid UTF-8 mixed in.
func TestSameHashSameUpstreamRequest(t *testing.T) {
	t.Parallel()
	f := newSameFixture(t)
	rapid.Check(t, func(rt *rapid.T) {
		in := genIntent(rt)
		other := in
		if rapid.Bool().Draw(rt, "mutate") {
			other = mutate(rt, in)
		}
		f.check(rt, spell(rt, in), spell(rt, other))
	})
}

// FuzzSameHashSameUpstreamRequest is the invariant over arbitrary bodies,
// queries and forwarded header values (`make fuzz` runs it). Its seeds
// run in every `go test`: the audit's cases among them.
func FuzzSameHashSameUpstreamRequest(f *testing.F) {
	for _, s := range []struct {
		form                   bool
		bodyA, bodyB           string
		queryA, queryB         string
		acctA, acctB, override string
	}{
		// Another Stripe-Account, and a method override, after the first.
		{false, `{"amount_minor":100}`, `{"amount_minor":100}`, "", "", "acct_1", "acct_attacker", "PUT"},
		// A case variant that encoding/json would read.
		{false, `{"amount_minor":100}`, `{"amount_minor":100,"Amount_Minor":99999999}`, "", "", "", "", ""},
		{false, `{"kind":"a"}`, "{\"kind\":\"a\",\"\u212aind\":\"b\"}", "", "", "", "", ""},
		// Two spellings of one request.
		{false, `{"amount_minor":100,"to":"a"}`, "{ \"to\" : \"\\u0061\", \"amount_minor\" : 1e2 }", "a=1&b=2", "b=%32&a=1", "acct_1", "acct_1", ""},
		// Invalid UTF-8, trailing data.
		{false, "{\"to\":\"a\xffb@example.com\"}", "{\"to\":\"a\xfeb@example.com\"}", "", "", "", "", ""},
		{false, `{"amount_minor":100}`, `{"amount_minor":100}]`, "", "", "", "", ""},
		{false, `{"a":1}`, `{"a":1}`, "q=%FF", "q=%FE", "", "", ""},
		// A reserved member against a query.
		{false, `{"$query":{"a":"1"}}`, `{}`, "", "a=1", "", "", ""},
		// Forms: order, escapes, a repeated name, a reference of the client's.
		{true, "amount=100&currency=usd&expand[]=a&expand[]=b", "currency=usd&expand%5B%5D=a&amount=100&expand%5B%5D=b", "", "", "acct_1", "acct_1", ""},
		{true, "amount=100&expand[]=a&expand[]=b", "amount=100&expand[]=b&expand[]=a", "", "", "", "", ""},
		{true, "items[][price]=1&items[][qty]=2&items[][price]=3", "items[][price]=1&items[][price]=3&items[][qty]=2", "", "", "", "", ""},
		{true, "amount=100&metadata[reference]=mine", "amount=100", "", "", "", "", ""},
		{true, "memo=%FF", "memo=%FE", "", "", "", "", ""},
	} {
		f.Add(s.form, []byte(s.bodyA), []byte(s.bodyB), s.queryA, s.queryB, s.acctA, s.acctB, s.override)
	}
	fx := newSameFixture(f)
	f.Fuzz(func(t *testing.T, form bool, bodyA, bodyB []byte, queryA, queryB, acctA, acctB, override string) {
		req := func(body []byte, query, acct string) sameRequest {
			r := sameRequest{form: form, body: body, rawQuery: query}
			if acct != "" {
				r.headers = append(r.headers, [2]string{"Stripe-Account", acct})
			}
			if override != "" {
				r.headers = append(r.headers, [2]string{"X-HTTP-Method-Override", override})
			}
			return r
		}
		a, b := req(bodyA, queryA, acctA), req(bodyB, queryB, acctB)
		if !sendable(a) || !sendable(b) {
			t.Skip("not a request an HTTP client can send")
		}
		fx.check(t, a, b)
	})
}

// sendable reports whether net/http's client sends r as it is (a header
// value with a control character, or a query with a space, '#' or a
// byte beyond ASCII, it refuses or changes).
func sendable(r sameRequest) bool {
	for _, h := range r.headers {
		for i := 0; i < len(h[1]); i++ {
			if c := h[1][i]; c < 0x20 && c != '\t' || c == 0x7f {
				return false
			}
		}
		if strings.TrimSpace(h[1]) != h[1] {
			return false // the server trims it: not what was written
		}
	}
	for i := 0; i < len(r.rawQuery); i++ {
		if c := r.rawQuery[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return false // a request target is printable ASCII
		}
	}
	return len(r.body) < 1<<16 && len(r.rawQuery) < 4096
}
