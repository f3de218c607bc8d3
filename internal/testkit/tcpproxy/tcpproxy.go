// Package tcpproxy is a tiny TCP proxy for tests that need a dependency
// (the database) to go away and come back while the process under test
// keeps running.
//
// A Proxy listens on 127.0.0.1 and forwards every connection to a target
// address. Close takes the target "down": every open connection is cut and
// new ones are refused (nothing listens any more). Stall makes it silently
// dead: connections stay open and new ones are accepted, but not a byte is
// forwarded, like a network partition. Resume brings it back on the same
// address.
package tcpproxy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds the connection to the target.
const dialTimeout = 5 * time.Second

// Proxy forwards TCP connections from Addr to a target. Its methods may be
// called from any goroutine.
type Proxy struct {
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener          // nil while down
	conns   map[net.Conn]struct{} // every open connection, both sides
	stalled chan struct{}         // non-nil while stalled; closed on Resume or Close
	wg      sync.WaitGroup        // accept loops and connection handlers
}

// Listen starts a proxy on 127.0.0.1 (a free port) that forwards to target
// ("host:port").
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: %w", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr is the address clients connect to ("127.0.0.1:port"). It stays the
// same across Close and Resume.
func (p *Proxy) Addr() string { return p.addr }

// Close takes the target down: it stops listening (new connections are
// refused), cuts every open connection and waits until all of them are
// gone. Closing a closed proxy does nothing. Call Resume to listen again.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Stall makes the target silently dead: open connections and new ones stay
// open, but nothing is forwarded in either direction until Resume (or is
// lost, on Close).
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Resume undoes Close or Stall: it listens again on the same address, and
// forwarding resumes on stalled connections (held data is delivered).
func (p *Proxy) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	if p.ln != nil {
		return nil
	}
	// The port is ours (SO_REUSEADDR lets a listener take it back while
	// connections we just cut are in TIME_WAIT), but retry briefly in case
	// the kernel has not yet released it.
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serveLocked(ln)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("tcpproxy: listen again on %s: %w", p.addr, err)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Close
			}
			if !p.track(ln, c) {
				c.Close()
				return
			}
			go p.handle(c)
		}
	}()
}

// track registers c (accepted on ln, or dialled for a connection accepted
// on ln) unless ln has been closed meanwhile.
func (p *Proxy) track(ln net.Listener, c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != ln {
		return false
	}
	p.conns[c] = struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

// handle forwards one client connection. Tracking (and wg) is per client
// connection; the upstream connection is tracked too, so Close cuts both.
func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer client.Close()
	p.wait()
	up, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		return
	}
	defer up.Close()
	p.mu.Lock()
	_, open := p.conns[client]
	if open {
		p.conns[up] = struct{}{}
	}
	p.mu.Unlock()
	if !open {
		return // cut by Close while dialling
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, client); done <- struct{}{} }()
	go func() { p.pipe(client, up); done <- struct{}{} }()
	<-done
	// One direction ended: end the other (like a closed database socket).
	client.Close()
	up.Close()
	<-done
}

// pipe copies src to dst, holding data while the proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or the connection was cut: nothing to report
		}
	}
}

// wait blocks while the proxy is stalled.
func (p *Proxy) wait() {
	p.mu.Lock()
	ch := p.stalled
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}
