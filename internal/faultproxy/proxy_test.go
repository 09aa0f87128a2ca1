package faultproxy_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/postbus/bus/internal/faultproxy"
	"github.com/postbus/bus/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// echoServer answers each line with the same line, until the test ends.
func echoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// waitActive waits up to 10 s until p relays want connections.
func waitActive(t *testing.T, p *faultproxy.Proxy, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Active() != want {
		if time.Now().After(deadline) {
			t.Fatalf("proxy relays %d connections, want %d", p.Active(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCutClosesAndRefusesUntilRestore(t *testing.T) {
	t.Parallel()
	p, err := faultproxy.Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	open, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if got, err := roundTrip(p.Addr()); err != nil || got != "ping\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	waitActive(t, p, 1) // open, relayed
	p.Cut()
	if n := p.Active(); n != 0 {
		t.Errorf("%d connections relayed after the cut, want 0", n)
	}
	_ = open.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil {
		t.Error("a connection open at the cut still reads")
	}
	if got, err := roundTrip(p.Addr()); err == nil {
		t.Errorf("during the cut a new connection got %q", got)
	}
	p.Restore()
	if got, err := roundTrip(p.Addr()); err != nil || got != "ping\n" {
		t.Fatalf("after restore: %q, %v", got, err)
	}
}

func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0") // stands in for a broker
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello\n"))
			_ = c.Close()
		}
	}()
	p, _ := faultproxy.Listen(ln.Addr().String())
	defer p.Close()
	greet := func() string {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			return "refused"
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "cut"
		}
		return line[:len(line)-1]
	}
	fmt.Println(greet())
	p.Cut()
	fmt.Println(greet())
	p.Restore()
	fmt.Println(greet())
	// Output:
	// hello
	// cut
	// hello
}

// ListenOn relays from the address it was given: a client that dials it
// before is refused, one that dials it after reaches the target.
func TestListenOnGivenAddress(t *testing.T) {
	target := echoServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	if _, err := roundTrip(addr); err == nil {
		t.Fatal("round trip before the proxy listens succeeded")
	}
	p, err := faultproxy.ListenOn(addr, target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Addr() != addr {
		t.Errorf("Addr() = %s, want %s", p.Addr(), addr)
	}
	if got, err := roundTrip(addr); err != nil || got != "ping\n" {
		t.Errorf("round trip = %q, %v", got, err)
	}
}

// recordingServer answers each line with "ok" and sends what it read on
// the returned channel.
func recordingServer(t testing.TB) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					if _, err := c.Write([]byte("ok\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String(), got
}

// TestTrapLosesTheRequestOrItsReplyOnce: LoseRequest keeps the request
// from the server, LoseReply lets the server handle it but keeps its reply
// from the client; either way the client's connection ends, and the trap
// springs once.
func TestTrapLosesTheRequestOrItsReplyOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		fault      faultproxy.Fault
		serverSees bool
	}{{faultproxy.LoseRequest, false}, {faultproxy.LoseReply, true}} {
		addr, got := recordingServer(t)
		p, err := faultproxy.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		sprung := p.Trap(func(b []byte) bool { return string(b) == "ping\n" }, c.fault)
		if reply, err := roundTrip(p.Addr()); err == nil {
			t.Errorf("fault %d: the client got %q, want its connection cut", c.fault, reply)
		}
		<-sprung
		select {
		case line := <-got:
			if !c.serverSees {
				t.Errorf("fault %d: the server read %q, want nothing", c.fault, line)
			}
		case <-time.After(time.Second):
			if c.serverSees {
				t.Errorf("fault %d: the server never read the request", c.fault)
			}
		}
		if reply, err := roundTrip(p.Addr()); err != nil || reply != "ok\n" {
			t.Errorf("fault %d: after the trap sprang: %q, %v; want ok", c.fault, reply, err)
		}
		_ = p.Close()
	}
}
