package e2e_test

import (
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/faultproxy"
)

// outage takes the broker away from the bus under test and brings it back.
type outage struct {
	addr    string // what the transport dials: a proxy or an embedded server
	cut     func(t testing.TB)
	restore func(t testing.TB)
}

// rabbitOutage puts a TCP proxy between the transport and RabbitMQ: cutting
// it is, for this transport, a broker outage, while the shared broker keeps
// serving the other tests.
func rabbitOutage(t testing.TB) outage {
	p := rabbitProxy(t)
	return outage{
		addr:    p.Addr(),
		cut:     func(testing.TB) { p.Cut() },
		restore: func(testing.TB) { p.Restore() },
	}
}

// rabbitProxy starts a TCP proxy to RabbitMQ, closed at cleanup. A
// transport that dials it can lose its connections without the broker or
// its other clients noticing.
func rabbitProxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	u, err := url.Parse(rabbitURL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// natsOutage runs an embedded JetStream server on a free port with its
// store in a temporary directory; the outage shuts it down and starts it
// again on the same port and store. The shared nats-server is untouched.
func natsOutage(t testing.TB) outage {
	dir := t.TempDir()
	s := runNATS(t, dir, server.RANDOM_PORT)
	port := s.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return outage{
		addr: "nats://127.0.0.1:" + strconv.Itoa(port),
		cut: func(testing.TB) {
			s.Shutdown()
			s.WaitForShutdown()
		},
		restore: func(t testing.TB) { s = runNATS(t, dir, port) },
	}
}

func runNATS(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true, ServerName: "pbe2e-outage",
	})
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("embedded nats-server not ready within 10s")
	}
	return s
}

// TestBrokerOutage: the broker is away while
// scheduled messages fall due. They wait in the PostgreSQL store with their
// failures counted, nothing reaches a handler, and once the broker is back
// every message is delivered, none early.
func TestBrokerOutage(t *testing.T) {
	t.Parallel()
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		o := rabbitOutage(t)
		brokerOutage(t, rabbitKit(t), o)
	})
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		o := natsOutage(t)
		brokerOutage(t, natsKit(t, o.addr), o)
	})
}

func brokerOutage(t *testing.T, k *kit, o outage) {
	const n, spread = 300, time.Second
	pool := newPool(t, 10)
	store := newStore(t, pool, freshSchema(t, pool))
	rec := newRecorder()
	cfg := k.config(k.newTransport(t, o.addr), store)
	cfg.Dispatcher.RetryBackoff = 200 * time.Millisecond
	// Bound each hand-over well below the wait for a counted failure
	// below, so a loaded machine cannot outlast it.
	cfg.Dispatcher.SendTimeout = 2 * time.Second
	cfg.Dispatcher.MaximumRecoveryFailuresPerSecond = 10
	b := startBus(t, cfg, func(b *bus.Bus) {
		if err := bus.Handle(b, rec.handle); err != nil {
			t.Fatal(err)
		}
	})
	first := time.Now().Add(5 * time.Second) // scheduling takes far less, even on a loaded machine
	schedule(t, rec, []*bus.Bus{b}, k.endpoint, "outage", n, first, spread)
	if time.Now().After(first) {
		t.Fatal("scheduling took longer than the lead time; the outage would start late")
	}
	o.cut(t)
	cutAt := time.Now()
	last := first.Add(spread)
	drivertest.Eventually(t, 30*time.Second, func() bool { return time.Now().After(last.Add(500 * time.Millisecond)) }, "every message due")
	counted := waitFor(30*time.Second, func() bool {
		_, failures := storeStats(t, pool, store.Table())
		return failures > 0 && b.Metrics().DispatchFails > 0
	})
	rows, failures := storeStats(t, pool, store.Table())
	m := b.Metrics()
	t.Logf("outage of %v: %d rows waiting, %d failures recorded on them, %d failed hand-overs, %d handler calls",
		time.Since(cutAt).Round(time.Millisecond), rows, failures, m.DispatchFails, rec.calls())
	if rows != n {
		t.Errorf("%d rows in the store during the outage, want all %d", rows, n)
	}
	if !counted {
		// The dispatcher gives the transport its own long-lived context, so
		// a transport that waits for its broker (RabbitMQ does, by design)
		// holds every hand-over until the broker returns: no failure is
		// recorded, the dispatch breaker never trips, and a hand-over can
		// outlive its row's lease. The core needs a bound per hand-over.
		t.Errorf("no dispatch failure counted %v into the outage (store failures %d, DispatchFails %d): "+
			"the dispatcher's hand-over is not bounded in time", time.Since(cutAt).Round(time.Millisecond), failures, m.DispatchFails)
	}
	if c := rec.calls(); c != 0 {
		t.Errorf("%d handler calls during the outage", c)
	}
	o.restore(t)
	restoredAt := time.Now()
	rec.waitAll(t, 90*time.Second)
	t.Logf("all delivered %v after the broker returned", time.Since(restoredAt).Round(time.Millisecond))
	waitStoreEmpty(t, pool, store.Table())
	rec.check(t, false)
}
