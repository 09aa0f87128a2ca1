package rabbitmq_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// outageProxy forwards TCP connections to the broker until cut: then it
// closes every open connection and refuses new ones until restored. It
// stands in for a broker outage without stopping the shared broker.
type outageProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newOutageProxy(t testing.TB) (*outageProxy, string) {
	t.Helper()
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &outageProxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *outageProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(c) })
	}
}

func (p *outageProxy) pipe(c net.Conn) {
	defer p.forget(c)
	b, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[b] = struct{}{}
	p.mu.Unlock()
	defer p.forget(b)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

func (p *outageProxy) forget(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// cut starts an outage: open connections drop, new ones are refused.
func (p *outageProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// restore ends the outage.
func (p *outageProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
