package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/client"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// runSplit runs a binary of binDir to completion and returns its exit
// code, stdout and stderr apart.
func runSplit(t *testing.T, env []string, name string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	cmd.Env = childEnv(env)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not exit within %v; stderr:\n%s", name, args, startTimeout, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestOpsFlagsAnywhere: the ops flags work before and after the
// subcommand and its key, as -name or --name, and from the environment.
func TestOpsFlagsAnywhere(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "--database-url", sqliteURL(t))
	ctx := ctxFor(t)
	if _, err := srv.Client.Register(ctx, &pb.RegisterRequest{OperationKey: "pay-1", ActionType: "create_payment",
		Payload: mustStruct(t, `{"order_id": "1", "amount_minor": 100, "currency": "EUR"}`), Claim: &pb.ClaimOptions{WorkerId: "w"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: "pay-1", Attempt: 1, ErrorCode: "timeout"}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ops", "list", "--journal-addr", srv.GRPCAddr, "--status", "unknown"},
		{"ops", "--journal-addr", srv.GRPCAddr, "list", "--status", "unknown"},
		{"ops", "list", "--status=unknown", "--journal-addr=" + srv.GRPCAddr, "--timeout", "20s"},
		{"ops", "-journal-addr", srv.GRPCAddr, "list", "-status", "unknown"},
		{"ops", "show", "--journal-addr", srv.GRPCAddr, "pay-1"},
		{"ops", "show", "pay-1", "--json", "--journal-addr", srv.GRPCAddr},
	} {
		code, out, errOut := runSplit(t, nil, "opjournal", args...)
		if code != 0 || !strings.Contains(out, "pay-1") || !strings.Contains(out, "unknown") {
			t.Errorf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
		}
	}
	code, out, errOut := runSplit(t, []string{"OPJOURNAL_JOURNAL_ADDR=" + srv.GRPCAddr}, "opjournal", "ops", "list", "--all")
	if code != 0 || !strings.Contains(out, "pay-1") {
		t.Errorf("OPJOURNAL_JOURNAL_ADDR: exit %d\n%s\n%s", code, out, errOut)
	}
	// A malformed line is refused with the subcommand's usage, before any call.
	code, _, errOut = runSplit(t, nil, "opjournal", "ops", "resolve", "pay-1", "--journal-addr", srv.GRPCAddr, "--succeeded")
	if code != 2 || !strings.Contains(errOut, "--reason is required") || !strings.Contains(errOut, "opjournal ops resolve KEY") {
		t.Errorf("resolve without a reason: exit %d\n%s", code, errOut)
	}
	code, _, errOut = runSplit(t, nil, "opjournal", "ops", "lst")
	if code != 2 || !strings.Contains(errOut, `unknown subcommand "lst"`) || !strings.Contains(errOut, `did you mean "list"?`) {
		t.Errorf("ops lst: exit %d\n%s", code, errOut)
	}
}

// TestEveryCommandHasHelpCompletionAndVersion: --help on every command
// and subcommand shows examples and exits 0; completion scripts for bash,
// zsh and fish; a version.
func TestEveryCommandHasHelpCompletionAndVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve"}, {"migrate"}, {"purge"}, {"token"}, {"hashkey"}, {"version"}, {"budgets"},
		{"ops"}, {"ops", "list"}, {"ops", "show"}, {"ops", "resolve"}, {"ops", "acknowledge"}, {"ops", "release"},
	} {
		code, out, errOut := runSplit(t, nil, "opjournal", append(args, "--help")...)
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "opjournal "+strings.Join(args, " ")) {
			t.Errorf("%v --help: exit %d\n%s\n%s", args, code, out, errOut)
		}
	}
	code, out, _ := runSplit(t, nil, "opjournal", "serve", "-h")
	if code != 0 || !strings.Contains(out, "--database-url") || !strings.Contains(out, `sqlite://opjournal.db`) {
		t.Errorf("serve -h: exit %d\n%s", code, out)
	}
	for shell, want := range map[string]string{"bash": "__start_opjournal", "zsh": "#compdef opjournal", "fish": "complete -c opjournal"} {
		if code, out, errOut := runSplit(t, nil, "opjournal", "completion", shell); code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d\n%.300s\n%s", shell, code, out, errOut)
		}
	}
	// The shells ask the binary itself for flag values.
	if code, out, _ := runSplit(t, nil, "opjournal", "__complete", "ops", "list", "--status", ""); code != 0 || !strings.Contains(out, "unknown\n") {
		t.Errorf("completing --status: exit %d\n%s", code, out)
	}
	if code, out, _ := runSplit(t, nil, "opjournal", "version"); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("version: exit %d %q", code, out)
	}
	if code, _, errOut := runSplit(t, nil, "opjournal", "serve", "--databse-url", "x"); code != 2 || !strings.Contains(errOut, "databse-url") {
		t.Errorf("unknown flag: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runSplit(t, nil, "opjournal", "migrate", "extra"); code != 2 || !strings.Contains(errOut, "unexpected arguments") {
		t.Errorf("positional argument: exit %d\n%s", code, errOut)
	}
}

// TestTokenAppendMakesAWorkingTokensFile: opjournal token --append writes
// a tokens file the server accepts, prints the token only on stdout and
// nowhere else, and refuses a name the file has.
func TestTokenAppendMakesAWorkingTokensFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.yaml")
	code, alice, errOut := runSplit(t, nil, "opjournal", "token", "--name", "alice", "--tenant", "team-a", "--roles", "operator", "--append", file)
	alice = strings.TrimSpace(alice)
	if code != 0 || !strings.HasPrefix(alice, "opj_") || strings.Contains(alice, "\n") || strings.Contains(errOut, alice) {
		t.Fatalf("token --append: exit %d\nstdout:\n%s\nstderr:\n%s", code, alice, errOut)
	}
	code, agent, errOut := runSplit(t, nil, "opjournal", "token", "--append", file, "--name", "agent-a", "--tenant", "team-a")
	agent = strings.TrimSpace(agent)
	if code != 0 || !strings.HasPrefix(agent, "opj_") {
		t.Fatalf("second token: exit %d\n%s\n%s", code, agent, errOut)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("tokens file: %v %v", st.Mode(), err)
	}
	b, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(b), "tokens:\n") || strings.Contains(string(b), alice) || strings.Contains(string(b), agent) {
		t.Fatalf("tokens file:\n%s", b)
	}
	if code, out, errOut := runSplit(t, nil, "opjournal", "token", "--name", "alice", "--append", file); code == 0 || !strings.Contains(errOut, `"alice"`) || out != "" {
		t.Fatalf("duplicate name: exit %d\n%s\n%s", code, out, errOut)
	}
	if c, _ := os.ReadFile(file); !bytes.Equal(c, b) {
		t.Fatal("a refused append changed the file")
	}

	srv := startServer(t, "--database-url", sqliteURL(t), "--auth-file", file)
	code, out, errOut := runSplit(t, []string{"OPJOURNAL_TOKEN=" + alice}, "opjournal", "ops", "list", "--journal-addr", srv.GRPCAddr)
	if code != 0 || !strings.Contains(out, "no operations") {
		t.Fatalf("ops list as alice: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := as(t, srv, agent).Register(ctxFor(t), &pb.RegisterRequest{OperationKey: "k", ActionType: "send_email", Payload: mustStruct(t, `{"to":"x"}`)}); err != nil {
		t.Fatalf("Register as the agent: %v", err)
	}

	// Without --append the output is what a tokens file holds.
	code, out, _ = runSplit(t, nil, "opjournal", "token", "--name", "bob", "--tenant", "team-a", "--roles", "agent,reconciler")
	if i := strings.Index(out, "tokens:\n"); code != 0 || i < 0 {
		t.Fatalf("token: exit %d\n%s", code, out)
	} else if err := os.WriteFile(filepath.Join(dir, "pasted.yaml"), []byte(out[i:]), 0o600); err != nil {
		t.Fatal(err)
	}
	startServer(t, "--database-url", sqliteURL(t), "--auth-file", filepath.Join(dir, "pasted.yaml"))

	// A bare list, as older versions printed, is explained.
	bare := filepath.Join(dir, "bare.yaml")
	writeFile(t, bare, strings.TrimPrefix(out[strings.Index(out, "tokens:\n"):], "tokens:\n"))
	code, _, errOut = runSplit(t, nil, "opjournal", "serve", "--database-url", sqliteURL(t), "--auth-file", bare, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "the file must have a top-level tokens: list (see opjournal token --help)") {
		t.Fatalf("bare list: exit %d\n%s", code, errOut)
	}
	if code, out, _ := runSplit(t, nil, "opjournal", "token", "--help"); code != 0 || !strings.Contains(out, "tokens:\n  - name:") {
		t.Fatalf("token --help does not show the file:\n%s", out)
	}
}

// TestTLSMismatchIsExplained: a client without --tls-ca talking to a TLS
// journal, or with it to a plain-text one, is told which flag to change.
func TestTLSMismatchIsExplained(t *testing.T) {
	t.Parallel()
	certPEM, keyPEM := selfSigned(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, string(certPEM))
	writeFile(t, keyFile, string(keyPEM))
	tlsSrv := startServer(t, "--database-url", sqliteURL(t), "--tls-cert", certFile, "--tls-key", keyFile)
	plain := startServer(t, "--database-url", sqliteURL(t))

	needTLS := "the journal at " + tlsSrv.GRPCAddr + " speaks TLS: give --tls-ca (or OPJOURNAL_TLS_CA)"
	dropTLS := "the journal at " + plain.GRPCAddr + " does not speak TLS: drop --tls-ca"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"opjournal", []string{"ops", "list", "--journal-addr", tlsSrv.GRPCAddr}, needTLS},
		{"opjournal", []string{"ops", "list", "--journal-addr", plain.GRPCAddr, "--tls-ca", certFile}, dropTLS},
		{"opjournal-reconciler", []string{"--once", "--journal-addr", tlsSrv.GRPCAddr}, needTLS},
		{"opjournal-reconciler", []string{"--once", "--journal-addr", plain.GRPCAddr, "--tls-ca", certFile}, dropTLS},
	} {
		code, out, errOut := runSplit(t, nil, tc.name, tc.args...)
		t.Logf("%s %v: exit %d: %s", tc.name, tc.args, code, strings.TrimSpace(errOut))
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s %v: exit %d, want %q\nstdout:\n%s\nstderr:\n%s", tc.name, tc.args, code, tc.want, out, errOut)
		}
	}
	// With the CA it works.
	if code, out, errOut := runSplit(t, nil, "opjournal", "ops", "list", "--journal-addr", tlsSrv.GRPCAddr, "--tls-ca", certFile); code != 0 {
		t.Errorf("with --tls-ca: exit %d\n%s\n%s", code, out, errOut)
	}
	// The Go SDK's plain-text Dial.
	c, err := client.Dial(tlsSrv.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Lookup(ctxFor(t), "k")
	if err == nil || !strings.Contains(err.Error(), "the journal at "+tlsSrv.GRPCAddr+" speaks TLS") || client.CodeOf(err) != "UNAVAILABLE" {
		t.Fatalf("client.Dial to a TLS journal: %v (code %s)", err, client.CodeOf(err))
	}
}

// TestEveryBinaryFollowsTheCommandLineConvention: every binary answers
// --help with examples (exit 0), has a version subcommand and --version
// printing the same, a completion subcommand, and refuses an unknown
// flag, a bad flag value and a positional argument with exit status 2 and
// a message naming what is wrong. The binaries that mirror flags by
// OPJOURNAL_* variables refuse a bad one with exit 2, naming it.
func TestEveryBinaryFollowsTheCommandLineConvention(t *testing.T) {
	t.Parallel()
	// The e2e harness builds four; the harnesses are built here.
	extra := t.TempDir()
	build := exec.Command("go", "build", "-o", extra+string(filepath.Separator),
		"github.com/opjournal/opjournal/harness/cmd/opjournal-demo",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-soak",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-soak-failover",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-bench")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, b := range []struct {
		name, dir string
		// badValue is a typed flag with a value it refuses; flag names it.
		badValue []string
		flag     string
		// env is a mirrored variable with a value its flag refuses ("": none mirrored).
		env string
	}{
		{"opjournal", binDir, []string{"serve", "--rate-burst", "lots"}, "--rate-burst", ""},
		{"opjournal-gateway", binDir, []string{"--rate-burst", "lots"}, "--rate-burst", "OPJOURNAL_RATE_BURST"},
		{"opjournal-reconciler", binDir, []string{"--concurrency", "lots"}, "--concurrency", "OPJOURNAL_CONCURRENCY"},
		{"opjournal-fakeprovider", binDir, []string{"-seed", "lots"}, "--seed", ""},
		{"opjournal-demo", extra, []string{"--gateway=lots"}, "--gateway", ""},
		{"opjournal-soak", extra, []string{"--agents", "lots"}, "--agents", ""},
		{"opjournal-soak-failover", extra, []string{"--agents", "lots"}, "--agents", ""},
		{"opjournal-bench", extra, []string{"--duration", "lots"}, "--duration", ""},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			run := func(env []string, args ...string) (int, string, string) {
				t.Helper()
				cmd := exec.Command(filepath.Join(b.dir, b.name), args...)
				cmd.Env = childEnv(env)
				cmd.Dir = t.TempDir()
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				var exit *exec.ExitError
				if err != nil && !errors.As(err, &exit) {
					t.Fatalf("%s %v: %v", b.name, args, err)
				}
				return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
			}
			for _, help := range []string{"--help", "-h", "-help"} {
				code, out, errOut := run(nil, help)
				if code != 0 || !strings.Contains(out, "Usage:\n  "+b.name) || !strings.Contains(out, "Examples:\n  ") {
					t.Errorf("%s: exit %d, want 0 and the usage with examples\nstdout:\n%s\nstderr:\n%s", help, code, out, errOut)
				}
			}
			code, version, errOut := run(nil, "version")
			if code != 0 || strings.TrimSpace(version) == "" {
				t.Errorf("version: exit %d %q\n%s", code, version, errOut)
			}
			if code, out, _ := run(nil, "--version"); code != 0 || out != version {
				t.Errorf("--version: exit %d %q, want %q", code, out, version)
			}
			if code, out, errOut := run(nil, "completion", "bash"); code != 0 || !strings.Contains(out, "__start_"+b.name) {
				t.Errorf("completion bash: exit %d\n%.200s\n%s", code, out, errOut)
			}
			if code, _, errOut := run(nil, "--no-such-flag"); code != 2 || !strings.Contains(errOut, "unknown flag: --no-such-flag") {
				t.Errorf("--no-such-flag: exit %d, want 2 naming the flag\n%s", code, errOut)
			}
			if code, _, errOut := run(nil, b.badValue...); code != 2 || !strings.Contains(errOut, b.flag) || !strings.Contains(errOut, "lots") {
				t.Errorf("%v: exit %d, want 2 naming %s\n%s", b.badValue, code, b.flag, errOut)
			}
			if code, _, errOut := run(nil, "extra"); code != 2 || !strings.Contains(errOut, `"extra"`) && !strings.Contains(errOut, "[extra]") {
				t.Errorf("a positional argument: exit %d, want 2\n%s", code, errOut)
			}
			if b.env != "" {
				if code, _, errOut := run([]string{b.env + "=lots"}); code != 2 || !strings.Contains(errOut, b.env) {
					t.Errorf("%s=lots: exit %d, want 2 naming the variable\n%s", b.env, code, errOut)
				}
			}
		})
	}
}
