// Package faultproxy is a TCP relay that tests put between a
// client and a shared service, so they can take the service away from that
// one client (a broker outage as the client sees it) without stopping the
// service other tests use.
//
// # Use
//
//	p, err := faultproxy.Listen("127.0.0.1:5672")
//	// connect the client to p.Addr() instead of the service
//	p.Cut()     // every relayed connection is closed, new ones are refused
//	p.Restore() // new connections are relayed again
//	p.Close()
//
// ListenOn listens on an address of the caller's choosing, so a test can
// make a service appear late at an address its client already dials.
//
// A Trap takes one request away instead: the first the client sends that
// a match function recognises is lost (never relayed), or its reply is
// (the server does the work, the client never hears of it), and that
// connection is closed. A reply lost after a COMMIT is the in-doubt
// commit, made deterministic.
package faultproxy

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy relays TCP connections from its listening address to a target until
// it is cut. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	down   bool
	closed bool
	conns  map[net.Conn]struct{}
	trap   *trap // armed, not sprung yet; nil when none
	wg     sync.WaitGroup
}

// Fault is what a Trap does to the request it catches.
type Fault int

// The faults of a Trap.
const (
	// LoseRequest closes the connection instead of relaying the request:
	// the server never sees it.
	LoseRequest Fault = iota + 1
	// LoseReply relays the request, then closes the connection when the
	// server's reply starts to arrive, without relaying it: the server did
	// the work, and the client sees its connection end.
	LoseReply
)

type trap struct {
	match  func([]byte) bool
	fault  Fault
	sprung chan struct{}
}

// Trap arms the proxy once: the first read from any relayed client for
// which match reports true gets fault, and the returned channel is closed.
// match sees each read from the client as it comes (up to 32 KiB, possibly
// several protocol messages, or part of a large one), so it should look
// for something a small request carries, such as a unique ID or a
// COMMIT. A new Trap replaces one not sprung yet.
func (p *Proxy) Trap(match func(chunk []byte) bool, fault Fault) <-chan struct{} {
	t := &trap{match: match, fault: fault, sprung: make(chan struct{})}
	p.mu.Lock()
	p.trap = t
	p.mu.Unlock()
	return t.sprung
}

// spring returns the armed trap if it matches chunk, disarming it.
func (p *Proxy) spring(chunk []byte) *trap {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.trap
	if t == nil || !t.match(chunk) {
		return nil
	}
	p.trap = nil
	return t
}

// Listen starts a proxy on a free loopback port that relays to target
// (host:port).
func Listen(target string) (*Proxy, error) { return ListenOn("127.0.0.1:0", target) }

// ListenOn starts a proxy listening on addr (host:port) that relays to
// target: a service that comes up at an address clients already dial.
func ListenOn(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the host:port clients should connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every relayed connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// Active returns how many client connections are being relayed.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Restore relays new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the relay
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.relay(c) })
	}
}

// track registers c, or reports false when the proxy is cut or closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down || p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) relay(client net.Conn) {
	if !p.track(client) {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.track(server) {
		_ = client.Close()
		if server != nil {
			_ = server.Close()
		}
		return
	}
	var wg sync.WaitGroup
	closeBoth := func() {
		// One direction ended: end both, so the peer sees the loss.
		_ = server.Close()
		_ = client.Close()
	}
	var loseReply atomic.Bool
	wg.Go(func() {
		defer closeBoth()
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				t := p.spring(buf[:n])
				if t != nil && t.fault == LoseRequest {
					close(t.sprung)
					return
				}
				if t != nil {
					loseReply.Store(true) // before the server can answer
				}
				_, werr := server.Write(buf[:n])
				if t != nil {
					close(t.sprung)
				}
				if werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	wg.Go(func() {
		defer closeBoth()
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if loseReply.Load() {
					return
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}
