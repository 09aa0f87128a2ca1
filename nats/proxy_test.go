package nats_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// faultProxy forwards TCP connections to a server and can break them: mute
// drops everything the server sends (the client hears nothing, the server
// still gets what the client writes), cut closes every open connection.
type faultProxy struct {
	ln     net.Listener
	target string
	muted  atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// startProxy listens on a free loopback port and forwards to target until
// the test ends.
func startProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &faultProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// URL is the address clients connect to.
func (p *faultProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(server, client, nil) })
		p.wg.Go(func() { p.pipe(client, server, &p.muted) })
	}
}

// pipe copies src to dst, discarding what it reads while mute is set.
func (p *faultProxy) pipe(dst, src net.Conn, mute *atomic.Bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && (mute == nil || !mute.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every connection open now; new ones are accepted as before.
func (p *faultProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
