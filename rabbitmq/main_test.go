package rabbitmq_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/rabbitmq"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// brokerURL is the broker the integration tests use.
func brokerURL() string {
	if u := os.Getenv("POSTBUS_TEST_RABBITMQ_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

var probe = sync.OnceValue(func() error {
	conn, err := amqp.DialConfig(brokerURL(), amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
})

// requireBroker skips the test when RabbitMQ is unreachable, except in CI,
// where it fails.
func requireBroker(t testing.TB) {
	t.Helper()
	if err := probe(); err != nil {
		bustest.SkipOutsideCI(t, "RabbitMQ at %s is unreachable (set POSTBUS_TEST_RABBITMQ_URL): %v", brokerURL(), err)
	}
}

// testEnv is one test's namespace on the broker: a random prefix for its
// queues, its own events exchange and connection name, all deleted at the end.
type testEnv struct {
	t        testing.TB
	prefix   string
	exchange string
	mu       sync.Mutex
	queues   []string
}

func newEnv(t testing.TB) *testEnv {
	t.Helper()
	requireBroker(t)
	e := &testEnv{t: t, prefix: fmt.Sprintf("pbtest-%08x-", rand.Uint32())}
	e.exchange = e.prefix + "events"
	t.Cleanup(e.cleanup)
	return e
}

// queue returns a queue name in the namespace, deleted at the end.
func (e *testEnv) queue(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.prefix + name
	e.queues = append(e.queues, q)
	return q
}

// track adds a queue named by someone else to the ones deleted at the end.
func (e *testEnv) track(q string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !slices.Contains(e.queues, q) {
		e.queues = append(e.queues, q)
	}
}

// options returns Options for this namespace.
func (e *testEnv) options() rabbitmq.Options {
	return rabbitmq.Options{
		EventsExchange: e.exchange,
		ConnectionName: e.prefix + fmt.Sprintf("conn-%04x", rand.Uint32N(1<<16)),
		ReconnectMin:   20 * time.Millisecond,
		ReconnectMax:   500 * time.Millisecond,
		Logger:         testLogger(e.t),
	}
}

// transport returns a transport closed at the end of the test.
func (e *testEnv) transport(opts rabbitmq.Options) *rabbitmq.Transport {
	e.t.Helper()
	tr, err := rabbitmq.New(brokerURL(), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.Close(ctx); err != nil {
			e.t.Errorf("close: %v", err)
		}
	})
	return tr
}

// provisionedQueue returns a new namespace, a transport on it with the
// default options, and a provisioned queue of the given name.
func provisionedQueue(t testing.TB, name string) (*testEnv, *rabbitmq.Transport, string) {
	t.Helper()
	e := newEnv(t)
	tr := e.transport(e.options())
	q := e.queue(name)
	e.provision(tr, bus.Topology{Queue: q})
	return e, tr, q
}

// provision provisions top and fails the test on error.
func (e *testEnv) provision(tr *rabbitmq.Transport, top bus.Topology) {
	e.t.Helper()
	if err := tr.Provision(ctxT(e.t, 10*time.Second), top); err != nil {
		e.t.Fatal(err)
	}
}

// admin runs f on a channel of a separate plain connection.
func (e *testEnv) admin(f func(ch *amqp.Channel) error) error {
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

// ready returns the number of ready messages in q.
func (e *testEnv) ready(q string) int {
	e.t.Helper()
	var n int
	if err := e.admin(func(ch *amqp.Channel) error {
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		n = st.Messages
		return err
	}); err != nil {
		e.t.Fatalf("inspect %s: %v", q, err)
	}
	return n
}

func (e *testEnv) cleanup() {
	err := e.admin(func(ch *amqp.Channel) error {
		for _, q := range e.queues {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				return fmt.Errorf("delete queue %s: %w", q, err)
			}
		}
		if err := ch.ExchangeDelete(e.exchange, false, false); err != nil {
			return fmt.Errorf("delete exchange %s: %w", e.exchange, err)
		}
		return nil
	})
	if err != nil {
		e.t.Errorf("cleanup: %v", err)
	}
}

// closeConnections force-closes the broker connections named name, as a
// broker-side failure would, and returns how many it closed.
func closeConnections(t testing.TB, name string) int {
	t.Helper()
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		bustest.SkipOutsideCI(t, "rabbitmqctl is not on PATH; the reconnection tests need it")
	}
	out, err := exec.Command("rabbitmqctl", "-q", "list_connections", "pid", "client_properties").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v", err)
	}
	// Lines: <rabbit@host.N.N.N>\t[{"product","..."},{"connection_name","NAME"},...]
	n := 0
	for line := range strings.Lines(string(out)) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok || !strings.Contains(props, `{"connection_name","`+name+`"}`) {
			continue
		}
		if out, err := exec.Command("rabbitmqctl", "-q", "close_connection", pid, "postbus test: simulated failure").CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl close_connection: %v: %s", err, out)
		}
		n++
	}
	return n
}

// testLogger logs into the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// receive runs tr.Receive in the background until the returned stop is
// called; stop waits for Receive to return and fails the test on an error.
func receive(t testing.TB, tr *rabbitmq.Transport, queue string, conc int, h bus.DeliveryHandler) (stop func()) {
	t.Helper()
	stop = drivertest.Receive(t, tr, queue, bus.ReceiveOptions{Concurrency: conc}, h)
	t.Cleanup(stop)
	return stop
}

// newEnvelope returns a command envelope with a unique ID.
func newEnvelope(typ string, body []byte) *bus.Envelope {
	return &bus.Envelope{
		ID:          fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64()),
		Type:        typ,
		Kind:        bus.KindCommand,
		Body:        body,
		ContentType: "application/json",
		SentAt:      time.Now(),
	}
}

// ctxT returns a context cancelled after d or at the end of the test.
func ctxT(t testing.TB, d time.Duration) context.Context { return drivertest.Ctx(t, d) }
