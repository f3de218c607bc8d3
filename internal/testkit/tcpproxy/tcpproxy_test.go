package tcpproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line it receives with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) (*client, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return &client{Conn: c, r: bufio.NewReader(c)}, nil
}

// roundTrip sends a line and reads the answer within d.
func (c *client) roundTrip(line string, d time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return got, err
	}
	return got[:len(got)-1], nil
}

func mustEcho(t *testing.T, c *client, line string) {
	t.Helper()
	got, err := c.roundTrip(line, 5*time.Second)
	if err != nil || got != line {
		t.Fatalf("echo %q: got %q, %v", line, got, err)
	}
}

func TestCloseRefusesAndResumeOnSameAddress(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	addr := p.Addr()

	c, err := dial(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	mustEcho(t, c, "before")

	p.Close()
	// The open connection is cut...
	if got, err := c.roundTrip("during", 5*time.Second); err == nil {
		t.Fatalf("a cut connection answered %q", got)
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a cut connection hung instead of failing: %v", err)
	}
	// ...and new ones are refused.
	if _, err := dial(t, addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while closed: %v, want connection refused", err)
	}
	p.Close() // idempotent

	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, p.Addr())
	}
	c2, err := dial(t, addr)
	if err != nil {
		t.Fatalf("dial after Resume: %v", err)
	}
	mustEcho(t, c2, "after")
	if err := p.Resume(); err != nil { // resuming a running proxy does nothing
		t.Fatal(err)
	}
	mustEcho(t, c2, "again")
}

func TestStallHoldsDataUntilResume(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := dial(t, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	mustEcho(t, c, "before")

	p.Stall()
	if got, err := c.roundTrip("held", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled connection: got %q, %v; want a timeout", got, err)
	}
	// A new connection is accepted but not served either.
	c2, err := dial(t, p.Addr())
	if err != nil {
		t.Fatalf("dial while stalled: %v", err)
	}
	if got, err := c2.roundTrip("new", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection while stalled: got %q, %v; want a timeout", got, err)
	}

	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	// The held line arrives, then the connection works as before.
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := c.r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("held data after Resume: %q, %v", got, err)
	}
	mustEcho(t, c, "after")
	if err := c2.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := c2.r.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("new connection after Resume: %q, %v", got, err)
	}
}

func TestCloseWhileStalled(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(t, p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	mustEcho(t, c, "before")
	p.Stall()
	if _, err := c.roundTrip("held", 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled connection: %v; want a timeout", err)
	}
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on a stalled connection")
	}
	if _, err := c.roundTrip("cut", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection after Close: %v, want it cut", err)
	}
}
