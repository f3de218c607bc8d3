package e2e

import (
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// rebound is the name a DNS-rebinding page would have made resolve to
// 127.0.0.1: its Host header is all that tells it from the operator.
const rebound = "rebound.attacker.example"

// withHost sends one request to the server's listener addressed to host,
// with an optional bearer token, and returns status and body.
func withHost(t *testing.T, p *proc, host, token, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, p.BaseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// grpcWithAuthority dials p's gRPC listener presenting authority.
func grpcWithAuthority(t *testing.T, p *proc, authority string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(authority))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestServerWithoutAuthAnswersOnlyLoopbackHosts(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t), "--allowed-hosts", "journal.test")
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.BaseURL, "http://"), ":")
	ctx := ctxFor(t)
	agent := grpcWithAuthority(t, srv, "127.0.0.1:"+port)
	unknownPayment(t, pb.NewJournalServiceClient(agent), "payment:order-7:intent-01", nil)

	// A page on a rebound name reaches nothing of the HTTP listener: not
	// the REST API, not the console (not even its form to get a CSRF
	// token), not the metrics or the OpenAPI document.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/operations", ""},
		{"GET", "/v1/operations:lookup?operation_key=payment:order-7:intent-01", ""},
		{"GET", "/console/queues", ""},
		{"GET", "/console/operation?key=payment:order-7:intent-01", ""},
		{"POST", "/console/decide", "key=payment:order-7:intent-01&verdict=failed_final&reason=x&confirm=yes&attempt=1"},
		{"GET", "/metrics", ""},
		{"GET", "/openapi.json", ""},
		{"GET", "/healthz", ""},
	} {
		for _, host := range []string{rebound + ":" + port, rebound, "0.0.0.0:" + port, "journal.test.attacker.example"} {
			code, body := withHost(t, srv, host, "", c.method, c.path, c.body)
			if code != http.StatusMisdirectedRequest || !strings.Contains(body, "--allowed-hosts") || strings.Contains(body, "payment:order-7") {
				t.Fatalf("%s %s with Host %s: %d %.300s", c.method, c.path, host, code, body)
			}
		}
	}
	// The names of this machine, and the one allowed, are served.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "localhost", "journal.test", "JOURNAL.TEST:" + port} {
		if code, body := withHost(t, srv, host, "", "GET", "/v1/operations?needs_review=false", ""); code != http.StatusOK || !strings.Contains(body, "payment:order-7:intent-01") {
			t.Fatalf("GET /v1/operations with Host %s: %d %.300s", host, code, body)
		}
		if code, _ := withHost(t, srv, host, "", "GET", "/console/queues", ""); code != http.StatusOK {
			t.Fatalf("the console with Host %s: %d", host, code)
		}
	}

	// gRPC checks :authority the same way; the health service stays open
	// to load balancers.
	foreign := grpcWithAuthority(t, srv, rebound+":"+port)
	_, err := pb.NewJournalServiceClient(foreign).Lookup(ctx, &pb.LookupRequest{OperationKey: "payment:order-7:intent-01"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "--allowed-hosts") {
		t.Fatalf("gRPC Lookup with :authority %s: %v", rebound, err)
	}
	if _, err := pb.NewJournalServiceClient(foreign).Resolve(ctx, &pb.ResolveRequest{OperationKey: "payment:order-7:intent-01",
		Resolution: pb.Resolution_RESOLUTION_FAILED_FINAL, Reason: "rebound", Actor: "attacker"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gRPC Resolve with :authority %s: %v", rebound, err)
	}
	if res, err := healthpb.NewHealthClient(foreign).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health with a foreign :authority: %v %v", res, err)
	}
	for _, authority := range []string{"localhost:" + port, "journal.test:" + port} {
		if _, err := pb.NewJournalServiceClient(grpcWithAuthority(t, srv, authority)).Lookup(ctx, &pb.LookupRequest{OperationKey: "payment:order-7:intent-01"}); err != nil {
			t.Fatalf("gRPC Lookup with :authority %s: %v", authority, err)
		}
	}
	// Nothing the refused calls asked for happened.
	op, err := pb.NewJournalServiceClient(agent).Lookup(ctx, &pb.LookupRequest{OperationKey: "payment:order-7:intent-01"})
	if err != nil || op.GetOperation().GetStatus() != pb.Status_STATUS_UNKNOWN {
		t.Fatalf("the operation after the refused calls: %v %v", op, err)
	}
}

func TestServerWithAuthChecksHostsOnlyWhenListed(t *testing.T) {
	t.Parallel()
	open, _ := secured(t)
	if code, body := withHost(t, open, rebound, adminA, "GET", "/v1/operations", ""); code != http.StatusOK {
		t.Fatalf("with --auth-file and no --allowed-hosts, a token on any Host is served: %d %.300s", code, body)
	}
	checked, _ := secured(t, "--allowed-hosts", "journal.test")
	if code, _ := withHost(t, checked, rebound, adminA, "GET", "/v1/operations", ""); code != http.StatusMisdirectedRequest {
		t.Fatalf("with --allowed-hosts, Host %s: %d", rebound, code)
	}
	if code, _ := withHost(t, checked, "journal.test", adminA, "GET", "/v1/operations", ""); code != http.StatusOK {
		t.Fatalf("with --allowed-hosts, Host journal.test: %d", code)
	}
}

func TestServeRefusesBadHostFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ flag, value, says string }{
		{"--allowed-hosts", "http://journal.test", "is not a host name"},
		{"--allowed-hosts", "journal test", "is not a host name"},
		{"--public-url", "journal.example", "--public-url"},
	} {
		code, out := runBinary(t, serverOpts{Dir: t.TempDir()}, "serve", "--database-url", sqliteURL(t), c.flag, c.value)
		if code == 0 || !strings.Contains(out, c.says) {
			t.Fatalf("serve %s %q: exit %d:\n%s", c.flag, c.value, code, out)
		}
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// TestConsoleCookieIsNoAPIToken signs in to the real server's console and
// uses what the browser holds everywhere an attacker who stole it would.
func TestConsoleCookieIsNoAPIToken(t *testing.T) {
	t.Parallel()
	srv, _ := secured(t)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: callTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (int, string) {
		resp, err := hc.Get(srv.BaseURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func(path string, form url.Values) int {
		resp, err := hc.PostForm(srv.BaseURL+path, form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	_, form := get("/console/signin")
	m := csrfField.FindStringSubmatch(form)
	if m == nil {
		t.Fatalf("no sign-in form: %.300s", form)
	}
	if code := post("/console/signin", url.Values{"csrf": {m[1]}, "token": {operA}}); code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", code)
	}
	u, _ := url.Parse(srv.BaseURL + "/console/")
	var cookie string
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "opjournal_console" {
			cookie = ck.Value
		}
	}
	if cookie == "" || strings.Contains(cookie, operA) {
		t.Fatalf("session cookie %q", cookie)
	}
	// Neither the cookie value nor any part of it, nor any part decoded, is
	// a bearer token.
	candidates := append([]string{cookie}, strings.FieldsFunc(cookie, func(r rune) bool { return r == ':' || r == '.' })...)
	for _, part := range candidates[1:] {
		for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.StdEncoding} {
			if d, err := enc.DecodeString(part); err == nil {
				candidates = append(candidates, string(d))
			}
		}
		if d, err := hex.DecodeString(part); err == nil {
			candidates = append(candidates, string(d))
		}
	}
	for _, tok := range candidates {
		if tok == "" || strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
			continue // random bytes: no token, and no valid header
		}
		if code, _, body := doAs(t, tok, "GET", srv.BaseURL+"/v1/operations", ""); code != http.StatusUnauthorized {
			t.Fatalf("the console cookie (%q) as a bearer token: %d %.200s", tok, code, body)
		}
	}
	code, page := get("/console/queues")
	m = csrfField.FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("queues: %d", code)
	}
	if code := post("/console/signout", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", code)
	}
	// A copy of the cookie kept from before the sign-out opens nothing.
	jar.SetCookies(u, []*http.Cookie{{Name: "opjournal_console", Value: cookie, Path: "/console/"}})
	if code, _ := get("/console/queues"); code != http.StatusSeeOther {
		t.Fatalf("the console with the cookie of a signed-out session: %d", code)
	}
}
