package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opjournal/opjournal/internal/testkit/await"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
)

// binary is the opjournal-fakeprovider executable TestMain builds.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "opjournal-fakeprovider-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "opjournal-fakeprovider")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building opjournal-fakeprovider:", err)
		return 1
	}
	return m.Run()
}

// syncBuffer is a goroutine-safe stderr sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// started is a running binary.
type started struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	addr   string
}

// start runs the binary and waits for its serving line.
func start(t *testing.T, args ...string) *started {
	t.Helper()
	s := &started{cmd: exec.Command(binary, args...), stderr: &syncBuffer{}, done: make(chan struct{})}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	await.Within(t, 30*time.Second, "the serving line", func() bool {
		for line := range strings.Lines(s.stderr.String()) {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving" {
				s.addr = l.Addr
			}
		}
		select {
		case <-s.done:
			t.Fatalf("exited before serving: %v; stderr:\n%s", s.cmd.ProcessState, s.stderr)
		default:
		}
		return s.addr != ""
	})
	return s
}

// stop sends SIGTERM and returns the exit code.
func (s *started) stop(t *testing.T) int {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15s after SIGTERM; stderr:\n%s", s.stderr)
	}
	return s.cmd.ProcessState.ExitCode()
}

func TestServeAndSIGTERM(t *testing.T) {
	s := start(t, "--addr", "127.0.0.1:0", "--index-lag", "0s", "--seed", "5")
	if !strings.HasPrefix(s.addr, "127.0.0.1:") || strings.HasSuffix(s.addr, ":0") {
		t.Fatalf("serving addr %q", s.addr)
	}
	base := "http://" + s.addr
	req, _ := http.NewRequest("POST", base+"/payments", strings.NewReader(`{"amount_minor": 490000, "currency": "RUB", "order_id": "817"}`))
	req.Header.Set("Idempotency-Key", "payment:order-817:intent-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 || !strings.Contains(string(body), `"id":"pay_000001"`) {
		t.Fatalf("POST /payments: %d %s", res.StatusCode, body)
	}

	ctx := context.Background()
	c := fakeprovider.NewControlClient(base, nil)
	if n, err := c.Count(ctx, "payment:order-817:intent-01"); err != nil || n != 1 {
		t.Fatalf("effects: %d, %v", n, err)
	}

	// A request held by a fault must not hold up the shutdown: it is
	// released and answered.
	if _, err := c.AddFault(ctx, fakeprovider.Fault{Path: "/emails", Kind: fakeprovider.CommitThenTimeout, Count: 1, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		res, err := http.Post(base+"/emails", "application/json", strings.NewReader(`{"to": "a@example.com", "reference": "held"}`))
		if err == nil {
			res.Body.Close()
			if res.StatusCode != 202 {
				err = fmt.Errorf("status %d", res.StatusCode)
			}
		}
		held <- err
	}()
	await.Until(t, "the held email to be stored", func() bool {
		n, err := c.Count(ctx, "held")
		return err == nil && n == 1
	})

	began := time.Now()
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0; stderr:\n%s", code, s.stderr)
	}
	t.Logf("stopped %v after SIGTERM", time.Since(began).Round(time.Millisecond))
	if err := <-held; err != nil {
		t.Errorf("the held request: %v", err)
	}
	for _, want := range []string{`"msg":"serving"`, `"seed":5`, `"index_lag":"0s"`, `"msg":"fault fired"`, `"msg":"shutting down"`, `"msg":"stopped"`} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("stderr lacks %s:\n%s", want, s.stderr)
		}
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("still answering after exit")
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--index-lag", "soon"}, {"--index-lag", "-1s"}, {"--log-level", "loud"}, {"extra"}} {
		cmd := exec.Command(binary, args...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: %v, want exit code 2; output:\n%s", args, err, out)
		}
	}
	// A port already taken: a clear error and exit 1.
	s := start(t, "--addr", "127.0.0.1:0")
	out, err := exec.Command(binary, "--addr", s.addr).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "address already in use") {
		t.Errorf("a taken port: %v; output:\n%s", err, out)
	}
	if code := s.stop(t); code != 0 {
		t.Errorf("exit code %d", code)
	}
}
