package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// TestGracefulShutdownAndHealth checks the gRPC health and reflection
// services, then that SIGTERM stops the server cleanly.
func TestGracefulShutdownAndHealth(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	ctx := ctxFor(t)

	health := healthpb.NewHealthClient(srv.Conn)
	for _, service := range []string{"", pb.JournalService_ServiceDesc.ServiceName} {
		// The per-service status is published by the server's first
		// database ping, just after it starts serving.
		eventually(t, 10*time.Second, func() (bool, string) {
			res, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			return err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING, fmt.Sprintf("health of %q: %v %v", service, res, err)
		})
	}

	stream, err := reflectionpb.NewServerReflectionClient(srv.Conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: ""},
	}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	var services []string
	for _, s := range res.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	for _, want := range []string{"opjournal.v1.JournalService", "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, missing %s", services, want)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// A request in the journal before the signal, to be sure the server is
	// busy-capable up to the end.
	if _, err := srv.Client.Register(ctx, &pb.RegisterRequest{OperationKey: "before-sigterm", ActionType: "send_email", Payload: mustStruct(t, `{"to": "a@example.com"}`)}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if code := srv.Stop(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, srv.Stderr())
	}
	t.Logf("stopped %v after SIGTERM", time.Since(began).Round(time.Millisecond))
	if !strings.Contains(srv.Stderr(), `"msg":"shutting down"`) {
		t.Errorf("no shutdown log line; stderr:\n%s", srv.Stderr())
	}
	if _, err := http.Get(srv.BaseURL + "/healthz"); err == nil {
		t.Errorf("the HTTP listener still answers after exit")
	}
}

// TestEnvironmentConfiguration configures a server only through
// OPJOURNAL_* variables, including a policy file of its own, and checks
// that a malformed policy file stops `serve` with the file and line named.
func TestEnvironmentConfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "policy.yaml")
	writeFile(t, policyPath, `actions:
  open_ticket:
    lease_seconds: 20
    retry:
      on_timeout: retry_same_key
`)
	dbPath := filepath.Join(dir, "from-env.db")
	env := []string{
		"OPJOURNAL_DATABASE_URL=sqlite://" + dbPath,
		"OPJOURNAL_GRPC_ADDR=127.0.0.1:0",
		"OPJOURNAL_HTTP_ADDR=127.0.0.1:0",
		"OPJOURNAL_POLICY=" + policyPath,
		"OPJOURNAL_MAX_PAYLOAD_BYTES=1024",
	}

	t.Run("serves from the environment", func(t *testing.T) {
		t.Parallel()
		srv := startServerOpts(t, serverOpts{Env: env, Dir: t.TempDir()}) // no flags at all
		if got := strings.Join(srv.cmd.Args[1:], " "); got != "serve" {
			t.Fatalf("started with %q, want only serve", got)
		}
		c, ctx := srv.Client, ctxFor(t)
		res, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: "ticket-1", ActionType: "open_ticket",
			Payload: mustStruct(t, `{"title": "printer on fire"}`), Claim: &pb.ClaimOptions{WorkerId: "w", LeaseSeconds: 20}})
		if err != nil || !res.GetCreated() || !res.GetClaimed() {
			t.Fatalf("Register open_ticket: %v %v", res, err)
		}
		_, err = c.Claim(ctx, &pb.ClaimRequest{OperationKey: "ticket-1", WorkerId: "w", LeaseSeconds: 21})
		wantGRPCError(t, err, codes.InvalidArgument, opjournal.CodeInvalidArgument, "lease_seconds")
		_, err = c.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-1", ActionType: "create_payment", Payload: mustStruct(t, `{"order_id": "1", "amount_minor": 1, "currency": "EUR"}`)})
		wantGRPCError(t, err, codes.InvalidArgument, opjournal.CodeUnknownAction, "action_type")
		_, err = c.Register(ctx, &pb.RegisterRequest{OperationKey: "ticket-2", ActionType: "open_ticket",
			Payload: mustStruct(t, `{"title": "`+strings.Repeat("x", 1100)+`"}`)})
		wantGRPCError(t, err, codes.InvalidArgument, opjournal.CodeTooLarge, "payload")
		if _, err := os.Stat(dbPath); err != nil {
			t.Fatalf("OPJOURNAL_DATABASE_URL was not used: %v", err)
		}
	})

	t.Run("a flag wins over the variable", func(t *testing.T) {
		t.Parallel()
		srv := startServerOpts(t, serverOpts{Env: append(slices.Clone(env[1:]), "OPJOURNAL_DATABASE_URL=sqlite://"+filepath.Join(t.TempDir(), "env.db"))},
			"--policy", filepath.Join(mustGetwd(t), "..", "..", "protocol", "policy", "default.yaml"))
		_, err := srv.Client.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: "pay-1", ActionType: "create_payment", Payload: mustStruct(t, `{"order_id": "1", "amount_minor": 1, "currency": "EUR"}`)})
		if err != nil {
			t.Fatalf("--policy did not override OPJOURNAL_POLICY: %v", err)
		}
	})

	badPolicy := filepath.Join(dir, "broken-policy.yaml")
	writeFile(t, badPolicy, `actions:
  open_ticket:
    lease_seconds: 20
    retry:
      on_timeout: retry_whenever
`)
	for name, o := range map[string]struct {
		env  []string
		args []string
	}{
		"malformed policy from the environment": {env: append(slices.Clone(env[:3]), "OPJOURNAL_POLICY="+badPolicy), args: []string{"serve"}},
		"malformed policy from a flag":          {env: env[:3], args: []string{"serve", "--policy", badPolicy}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, out := runBinary(t, serverOpts{Env: o.env, Dir: t.TempDir()}, o.args...)
			if code == 0 {
				t.Fatalf("serve with a malformed policy exited 0; output:\n%s", out)
			}
			if want := badPolicy + ":5:"; !strings.Contains(out, want) || !strings.Contains(out, "on_timeout") {
				t.Fatalf("the error does not name %q and the field; output:\n%s", want, out)
			}
			if strings.Contains(out, `"msg":"serving"`) {
				t.Fatalf("served with a malformed policy; output:\n%s", out)
			}
		})
	}
}

// TestDefaultsNeedNoSetup runs `opjournal serve` with nothing but listen
// addresses: it serves on an embedded SQLite file in its working directory.
func TestDefaultsNeedNoSetup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := startServerOpts(t, serverOpts{Dir: dir}, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if got := strings.Join(srv.cmd.Args[1:], " "); got != "serve --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0" {
		t.Fatalf("started with %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "opjournal.db")); err != nil {
		t.Fatalf("no opjournal.db in the working directory: %v", err)
	}
	res, err := srv.Client.Register(ctxFor(t), &pb.RegisterRequest{OperationKey: "first", ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "1", "amount_minor": 100, "currency": "EUR"}`), Claim: &pb.ClaimOptions{WorkerId: "w"}})
	if err != nil || !res.GetCreated() || !res.GetClaimed() {
		t.Fatalf("Register with the shipped policy: %v %v", res, err)
	}
	if r := do(t, http.MethodGet, srv.BaseURL+"/healthz", nil); r.Status != http.StatusOK {
		t.Fatalf("healthz: %d %s", r.Status, r.Body)
	}
	if code := srv.StopWith(os.Interrupt); code != 0 {
		t.Fatalf("exit code %d after SIGINT, want 0", code)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestStartupFailures checks that a server that cannot start says why and
// exits non-zero instead of serving half-configured.
func TestStartupFailures(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	missingDir := filepath.Join(t.TempDir(), "no-such-dir", "journal.db")
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the output
	}{
		{"unsupported database URL", []string{"--database-url", "mysql://db/journal"}, []string{"--database-url", "postgres://", "sqlite://"}},
		{"SQLite file in a missing directory", []string{"--database-url", "sqlite://" + missingDir}, []string{missingDir}},
		// --database-wait 0: exit at once instead of waiting for it
		// (TestServeDatabaseWaitBounds covers the wait).
		{"unreachable PostgreSQL", []string{"--database-url", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5", "--database-wait", "0"}, []string{"UNAVAILABLE", "127.0.0.1:1", "connection refused"}},
		{"gRPC port in use", []string{"--database-url", "sqlite://" + filepath.Join(t.TempDir(), "j.db"), "--grpc-addr", busy.Addr().String()}, []string{busy.Addr().String(), "address already in use"}},
		{"HTTP port in use", []string{"--database-url", "sqlite://" + filepath.Join(t.TempDir(), "j.db"), "--http-addr", busy.Addr().String()}, []string{busy.Addr().String(), "address already in use"}},
		{"unknown flag", []string{"--databse-url", "sqlite://x.db"}, []string{"databse-url"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"serve"}, tc.args...)
			if !hasFlag(args, "grpc-addr") {
				args = append(args, "--grpc-addr", "127.0.0.1:0")
			}
			if !hasFlag(args, "http-addr") {
				args = append(args, "--http-addr", "127.0.0.1:0")
			}
			code, out := runBinary(t, serverOpts{Dir: t.TempDir()}, args...)
			if code == 0 {
				t.Fatalf("exit code 0; output:\n%s", out)
			}
			if strings.Contains(out, `"msg":"serving"`) {
				t.Fatalf("it served; output:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not mention %q:\n%s", w, out)
				}
			}
		})
	}
}
