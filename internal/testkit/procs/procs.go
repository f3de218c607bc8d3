// Package procs starts opjournal's real binaries as child processes and
// waits until they are ready, for the demo, end-to-end tests and the soak
// harness. Every binary logs one JSON line (log/slog) with a known message
// once it is listening; Start reads stderr until it sees that line, so
// nothing waits on a guessed sleep.
package procs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Spec describes a process to start.
type Spec struct {
	Name  string   // for messages ("journal", "provider", "reconciler")
	Path  string   // the binary
	Args  []string // its arguments
	Env   []string // added to the current environment
	Dir   string   // working directory ("" = current)
	Ready string   // the "msg" of the JSON log line that means ready
	// Log, if set, receives every line the process writes to stderr.
	Log io.Writer
}

// Proc is a started process.
type Proc struct {
	Spec
	// Fields holds the ready line's fields (e.g. "grpc_addr").
	Fields map[string]any

	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, valid after done

	mu  sync.Mutex
	buf bytes.Buffer // the whole stderr, for diagnostics
}

// Start starts s and waits up to timeout for its ready line. It returns an
// error with the process's output if the process exits or stays silent.
func Start(ctx context.Context, s Spec, timeout time.Duration) (*Proc, error) {
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Dir = s.Dir
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Proc{Spec: s, cmd: cmd, done: make(chan struct{})}
	ready := make(chan map[string]any, 1)
	go p.readLog(stderr, ready)
	go func() { p.err = cmd.Wait(); close(p.done) }()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case f := <-ready:
		p.Fields = f
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before it was ready (%v):\n%s", s.Name, p.err, p.Output())
	case <-t.C:
		p.Kill()
		return nil, fmt.Errorf("%s not ready after %s:\n%s", s.Name, timeout, p.Output())
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	}
}

func (p *Proc) readLog(r io.Reader, ready chan<- map[string]any) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	signalled := false
	for sc.Scan() {
		line := sc.Bytes()
		p.mu.Lock()
		p.buf.Write(line)
		p.buf.WriteByte('\n')
		p.mu.Unlock()
		if p.Log != nil {
			fmt.Fprintf(p.Log, "[%s] %s\n", p.Name, line)
		}
		if signalled {
			continue
		}
		var f map[string]any
		if json.Unmarshal(line, &f) == nil && f["msg"] == p.Ready {
			ready <- f
			signalled = true
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// Field returns a string field of the ready line ("" if absent).
func (p *Proc) Field(name string) string {
	s, _ := p.Fields[name].(string)
	return s
}

// Output returns everything the process wrote to stderr so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL (no cleanup at all, like a crash) and waits for the exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to timeout for a graceful exit, then
// kills. It returns the exit error (nil for exit code 0).
func (p *Proc) Stop(timeout time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.Kill()
		return errors.New(p.Name + " did not stop within " + timeout.String() + "; killed")
	}
}
