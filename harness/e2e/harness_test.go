package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"github.com/opjournal/opjournal/protocol/hashkey"
	"google.golang.org/grpc/metadata"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/server"
)

// binary is the opjournal binary; binDir holds it and the other commands.
var binary, binDir string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "opjournal-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	binary = filepath.Join(dir, "opjournal")
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/opjournal/opjournal/cmd/opjournal",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-fakeprovider",
		"github.com/opjournal/opjournal/cmd/opjournal-reconciler",
		"github.com/opjournal/opjournal/cmd/opjournal-gateway",
		"github.com/opjournal/opjournal/harness/cmd/opjournal-demo",
		"github.com/opjournal/opjournal/examples/mcp-server")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the binaries:", err)
		return 1
	}
	return m.Run()
}

// Timeouts. Generous, because two cores run every test in parallel; none is
// a synchronisation delay: each bounds a wait for an event.
const (
	startTimeout = 60 * time.Second // until the "serving" line
	stopTimeout  = 15 * time.Second // SIGTERM until exit
	callTimeout  = 30 * time.Second // one test's RPCs
)

// proc is a running opjournal server.
type proc struct {
	t           *testing.T
	cmd         *exec.Cmd
	GRPCAddr    string
	HTTPAddr    string
	BaseURL     string // http://HTTPAddr
	MetricsAddr string // with --metrics-addr
	Conn        *grpc.ClientConn
	Client      pb.JournalServiceClient

	stderr *logBuffer
	done   chan struct{} // closed when the process has exited
	ready  chan servingLine
}

// servingLine is the log line a server writes once both listeners are up.
type servingLine struct {
	Msg      string   `json:"msg"`
	GRPCAddr string   `json:"grpc_addr"`
	HTTPAddr string   `json:"http_addr"`
	Metrics  string   `json:"metrics_addr"`
	Store    string   `json:"store"`
	Actions  []string `json:"actions"`
}

// serverOpts are the less common ways to start a server.
type serverOpts struct {
	// Env is added to the environment (after every OPJOURNAL_* variable of
	// the test's own environment is removed).
	Env []string
	// Dir is the working directory (default: the test's).
	Dir string
	// OnLine, if set, is called with every line the process writes.
	OnLine func(line []byte)
}

// startServer runs `opjournal serve ARGS… --grpc-addr 127.0.0.1:0
// --http-addr 127.0.0.1:0` (the listen flags only where neither ARGS nor
// the environment set them), waits for its "serving" line and returns it
// with a gRPC client. The process is killed when the test ends; if the test
// failed its stderr is logged.
func startServer(t *testing.T, args ...string) *proc {
	t.Helper()
	return startServerOpts(t, serverOpts{}, args...)
}

func startServerOpts(t *testing.T, o serverOpts, args ...string) *proc {
	t.Helper()
	p, err := spawn(t, o, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// spawnInBackground spawns the server while the test goes on: its process
// once it serves, or why it did not start.
func spawnInBackground(t *testing.T, o serverOpts, args ...string) (<-chan *proc, <-chan error) {
	started := make(chan *proc, 1)
	failed := make(chan error, 1)
	go func() {
		p, err := spawn(t, o, args...)
		if err != nil {
			failed <- err
			return
		}
		started <- p
	}()
	return started, failed
}

// spawn is startServer without t.Fatal, so that several servers can be
// started from goroutines.
func spawn(t *testing.T, o serverOpts, args ...string) (*proc, error) {
	env := childEnv(o.Env)
	full := append([]string{"serve"}, args...)
	if !hasFlag(args, "grpc-addr") && !hasEnv(env, "OPJOURNAL_GRPC_ADDR") {
		full = append(full, "--grpc-addr", "127.0.0.1:0")
	}
	if !hasFlag(args, "http-addr") && !hasEnv(env, "OPJOURNAL_HTTP_ADDR") {
		full = append(full, "--http-addr", "127.0.0.1:0")
	}
	cmd := exec.Command(binary, full...)
	cmd.Env = env
	cmd.Dir = o.Dir
	setProcAttr(cmd)
	p := &proc{
		t:     t,
		cmd:   cmd,
		done:  make(chan struct{}),
		ready: make(chan servingLine, 1),
	}
	p.stderr = &logBuffer{onLine: func(line []byte) {
		p.scanServing(line)
		if o.OnLine != nil {
			o.OnLine(line)
		}
	}}
	cmd.Stderr = p.stderr
	cmd.Stdout = p.stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if p.Conn != nil {
			p.Conn.Close()
		}
		if t.Failed() {
			t.Logf("opjournal %s\nstderr:\n%s", strings.Join(full, " "), p.stderr.String())
		}
	})

	var line servingLine
	select {
	case line = <-p.ready:
	case <-p.done:
		return nil, fmt.Errorf("opjournal %s exited with %v before serving; stderr:\n%s",
			strings.Join(full, " "), cmd.ProcessState, p.stderr.String())
	case <-time.After(startTimeout):
		return nil, fmt.Errorf("opjournal %s did not log \"serving\" within %v; stderr:\n%s",
			strings.Join(full, " "), startTimeout, p.stderr.String())
	}
	p.GRPCAddr, p.HTTPAddr, p.MetricsAddr = line.GRPCAddr, line.HTTPAddr, line.Metrics
	p.BaseURL = "http://" + line.HTTPAddr
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("grpc client for %s: %w", p.GRPCAddr, err)
	}
	p.Conn, p.Client = conn, pb.NewJournalServiceClient(conn)
	return p, nil
}

// scanServing is called with every stderr line until the serving line.
func (p *proc) scanServing(line []byte) {
	var l servingLine
	if json.Unmarshal(line, &l) == nil && l.Msg == "serving" && l.GRPCAddr != "" && l.HTTPAddr != "" {
		select {
		case p.ready <- l:
		default:
		}
	}
}

// Exited reports whether the process has exited.
func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop sends SIGTERM and returns the exit code; it fails the test if the
// process is still running after stopTimeout.
func (p *proc) Stop() int {
	p.t.Helper()
	return p.StopWith(syscall.SIGTERM)
}

// StopWith is Stop with another signal.
func (p *proc) StopWith(sig os.Signal) int {
	p.t.Helper()
	if !p.Exited() {
		if err := p.cmd.Process.Signal(sig); err != nil {
			p.t.Fatalf("%v: %v", sig, err)
		}
	}
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.Kill()
		p.t.Fatalf("the server did not exit within %v of %v", stopTimeout, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// Stderr returns everything the process wrote so far.
func (p *proc) Stderr() string { return p.stderr.String() }

// logBuffer collects a process's output and calls onLine for every
// complete line.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	scanned int
	onLine  func([]byte)
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	for {
		rest := b.buf.Bytes()[b.scanned:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		if b.onLine != nil {
			b.onLine(rest[:i])
		}
		b.scanned += i + 1
	}
	return len(p), nil
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// childEnv is the test's environment without OPJOURNAL_* variables, plus extra.
func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPJOURNAL_") {
			env = append(env, kv)
		}
	}
	// Every server of a test run shares one request-hash key, as the
	// replicas of a deployment do (two servers on one PostgreSQL).
	if !hasEnv(extra, "OPJOURNAL_HASH_KEYS") {
		env = append(env, testHashKeys)
	}
	return append(env, extra...)
}

// testHashKeys is the request-hash key of the servers a test run starts.
var testHashKeys = hashkey.EnvFor(hashkey.Random("e2e"))

func hasFlag(args []string, name string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		a = strings.TrimLeft(a, "-")
		return a == name || strings.HasPrefix(a, name+"=")
	})
}

func hasEnv(env []string, name string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// runBinary runs the binary to completion (for commands that must fail)
// and returns its exit code and combined output.
func runBinary(t *testing.T, o serverOpts, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = childEnv(o.Env)
	cmd.Dir = o.Dir
	setProcAttr(cmd)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run opjournal %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("opjournal %v did not exit within %v; output:\n%s", args, startTimeout, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// --- stores ---

// sqliteURL is a new SQLite database under the test's temporary directory.
func sqliteURL(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "journal.db")
}

// pgURL is a new, empty PostgreSQL schema, dropped when the test ends.
func pgURL(t *testing.T) string {
	return pgtest.NewSchema(t)
}

// forEachStore runs f as a parallel subtest per store with a fresh database.
func forEachStore(t *testing.T, f func(t *testing.T, dbURL string)) {
	for _, s := range []struct {
		name string
		url  func(*testing.T) string
	}{{"sqlite", sqliteURL}, {"postgres", pgURL}} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, s.url(t))
		})
	}
}

// --- waiting ---

// ctxFor returns a context for one test's calls.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it returns true, failing the test after
// timeout with the last description cond gave (internal/testkit/await).
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	await.State(t, timeout, cond)
}

// --- gRPC helpers ---

// mustStruct builds a Struct from JSON text (so tests can write payloads
// with nulls, exponents and any member order, as a client would).
func mustStruct(t *testing.T, js string) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(js), s); err != nil {
		t.Fatalf("struct %s: %v", js, err)
	}
	return s
}

// wantGRPCError fails unless err is a gRPC status with the code, the
// opjournal code (via server.CodeOf) and, if field is not "-", the field.
func wantGRPCError(t *testing.T, err error, code codes.Code, oj opjournal.Code, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want %v / %s", code, oj)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a gRPC status: %v", err)
	}
	if st.Code() != code || client.CodeOf(err) != oj {
		t.Fatalf("got %v / %q (%v), want %v / %s", st.Code(), client.CodeOf(err), err, code, oj)
	}
	if field == "-" {
		return
	}
	got := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == server.ErrorDomain {
			got = info.Metadata["field"]
		}
	}
	if got != field {
		t.Fatalf("field %q, want %q (%v)", got, field, err)
	}
}

func lookup(t *testing.T, ctx context.Context, c pb.JournalServiceClient, key string) *pb.Operation {
	t.Helper()
	res, err := c.Lookup(ctx, &pb.LookupRequest{OperationKey: key})
	if err != nil {
		t.Fatalf("Lookup %q: %v", key, err)
	}
	return res.GetOperation()
}

// --- REST helpers ---

// apiError is the REST error body.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// restResponse is one REST exchange.
type restResponse struct {
	Status int
	Body   []byte
}

// JSON decodes the body as an object.
func (r restResponse) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v\n%s", r.Status, err, r.Body)
	}
	return m
}

// Err decodes the body as an error.
func (r restResponse) Err(t *testing.T) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("response %d is not an error body (%v):\n%s", r.Status, err, r.Body)
	}
	return e
}

var httpClient = &http.Client{Timeout: callTimeout}

// do sends one request; body may be nil, a string, []byte or an io.Reader
// (sent chunked, without Content-Length).
func do(t *testing.T, method, url string, body any) restResponse {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	case io.Reader:
		r = b
	default:
		t.Fatalf("body type %T", body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return restResponse{Status: resp.StatusCode, Body: data}
}

// post sends v (marshalled unless it is already a string) to /v1/operations:VERB.
func post(t *testing.T, p *proc, verb string, v any) restResponse {
	t.Helper()
	body, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		body = string(b)
	}
	return do(t, http.MethodPost, p.BaseURL+"/v1/operations:"+verb, body)
}

// wantRESTError fails unless r is an error response with the status, code and field.
func wantRESTError(t *testing.T, r restResponse, httpStatus int, code opjournal.Code, field string) {
	t.Helper()
	if r.Status != httpStatus {
		t.Fatalf("status %d, want %d; body %s", r.Status, httpStatus, r.Body)
	}
	e := r.Err(t)
	if e.Error.Code != string(code) || e.Error.Field != field {
		t.Fatalf("error %s field %q, want %s field %q; body %s", e.Error.Code, e.Error.Field, code, field, r.Body)
	}
	if e.Error.Message == "" {
		t.Fatalf("error without a message: %s", r.Body)
	}
}

// metadataWithToken adds a bearer token to a context's outgoing metadata.
func metadataWithToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}
