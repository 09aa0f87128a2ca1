package postgres_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/postgres"
)

// Messages of the exactly-once case.
type (
	shipOrder    struct{ Key string }
	orderShipped struct{ Key string }
)

func (shipOrder) MessageName() string    { return "postgres_test.ShipOrder" }
func (orderShipped) MessageName() string { return "postgres_test.OrderShipped" }

// transportChildEnv carries "<schema>|<endpoint>|<billing>|<stall>" to the
// child process of the exactly-once cases.
const transportChildEnv = "POSTBUS_PGTRANSPORT_CHILD"

// exactlyOnceWorld is one endpoint handling shipOrder over the PostgreSQL
// transport with the PostgreSQL outbox on the same database: the handler
// inserts a business row through postgres.Tx and publishes orderShipped.
type exactlyOnceWorld struct {
	pool     *pgxpool.Pool
	schema   string
	endpoint string
	billing  string
	// stall is where the child stops for good: "handler" (in the
	// handler, after its writes and sends) or "acked" (after the handling
	// committed, before the transport acknowledges).
	stall string
}

func (w exactlyOnceWorld) shipments() string { return pgx.Identifier{w.schema, "shipments"}.Sanitize() }

// stallingTransport hands deliveries to the bus and, once the bus has
// concluded one, prints "concluded" and never returns it to the transport.
type stallingTransport struct{ *postgres.Transport }

func (s stallingTransport) Receive(ctx context.Context, queue string, opts bus.ReceiveOptions, h bus.DeliveryHandler) error {
	return s.Transport.Receive(ctx, queue, opts, func(ctx context.Context, env *bus.Envelope) error {
		if err := h(ctx, env); err != nil {
			return err
		}
		fmt.Println("concluded")
		select {}
	})
}

// orders returns a bus for the endpoint; in the child (block) it stops for
// good where w.stall says, after printing "handling" or "concluded".
func (w exactlyOnceWorld) orders(t testing.TB, block bool, calls *atomic.Int64) (*bus.Bus, error) {
	store, err := postgres.New(w.pool, postgres.Options{Schema: w.schema})
	if err != nil {
		return nil, err
	}
	tr, err := postgres.NewTransport(w.pool, postgres.TransportOptions{Schema: w.schema, Lease: time.Second, PollInterval: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	var transport bus.Transport = tr
	if block && w.stall == "acked" {
		transport = stallingTransport{tr}
	}
	// Concurrency 2 fits the child's pool of 8 beside the dispatcher and
	// the transport on any machine (Start checks it).
	b, err := bus.New(bus.Config{Endpoint: w.endpoint, Transport: transport, Persistence: store, Concurrency: 2,
		Outbox: bus.OutboxConfig{Enabled: true}, Retries: bus.RetryConfig{Immediate: -1, Delayed: -1},
		Dispatcher: bus.DispatcherConfig{PollInterval: 100 * time.Millisecond, Lease: time.Second}})
	if err != nil {
		return nil, err
	}
	err = bus.Handle(b, func(ctx context.Context, m shipOrder) error {
		if calls != nil {
			calls.Add(1)
		}
		tx, ok := postgres.Tx(ctx)
		if !ok {
			return fmt.Errorf("no handling transaction")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+w.shipments()+` (key) VALUES ($1)`, m.Key); err != nil {
			return err
		}
		if err := b.Publish(ctx, orderShipped(m)); err != nil {
			return err
		}
		if block && w.stall == "handler" {
			fmt.Println("handling")
			select {}
		}
		return nil
	})
	return b, err
}

// runTransportChild is the child of the exactly-once case: it starts the
// endpoint with a handler that blocks mid-handling, and is killed there.
func runTransportChild(v string) {
	parts := strings.Split(v, "|")
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "transport child:", err)
		os.Exit(2)
	}
	if len(parts) != 4 {
		fail(fmt.Errorf("bad %s %q", transportChildEnv, v))
	}
	pool, err := openPool(context.Background(), 8)
	if err != nil {
		fail(err)
	}
	w := exactlyOnceWorld{pool: pool, schema: parts[0], endpoint: parts[1], billing: parts[2], stall: parts[3]}
	b, err := w.orders(nil, true, nil)
	if err == nil {
		err = b.Start(context.Background())
	}
	if err != nil {
		fail(err)
	}
	select {}
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestTransportExactlyOnceWithOutbox kills a process (SIGKILL) handling a
// message over the PostgreSQL transport with the PostgreSQL outbox on the
// same database, then lets a second process take over.
//
// Killed in the handler, after it inserted its business row and published
// an event: the database holds neither, and the message is still queued.
// The redelivery inserts the row and publishes the event, once.
//
// Killed after the handling committed but before the transport was told
// the handler succeeded: the message was acknowledged by the commit, so it
// is never handled again, and the committed event is sent once.
func TestTransportExactlyOnceWithOutbox(t *testing.T) {
	t.Parallel()
	t.Run("KilledMidHandling", func(t *testing.T) {
		t.Parallel()
		exactlyOnce(t, "handler")
	})
	t.Run("KilledAfterCommitBeforeAck", func(t *testing.T) {
		t.Parallel()
		exactlyOnce(t, "acked")
	})
}

func exactlyOnce(t *testing.T, stall string) {
	pool := newPool(t, 20)
	schema := freshSchema(t, pool)
	ns := bustest.Namespace()
	w := exactlyOnceWorld{pool: pool, schema: schema, endpoint: ns + "-orders", billing: ns + "-billing", stall: stall}
	ctx := ctxTimeout(t, 2*time.Minute)
	store := newStore(t, pool, postgres.Options{Schema: schema})
	if _, err := pool.Exec(ctx, `CREATE TABLE `+w.shipments()+` (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, pool, schema, postgres.TransportOptions{})
	events := bustest.NewRecorder[orderShipped]()
	bustest.StartBus(t, bus.Config{Endpoint: w.billing, Transport: tr}, func(b *bus.Bus) { _ = bus.Handle(b, events.Handler) })
	client := bustest.StartBus(t, bus.Config{Endpoint: ns + "-client", Transport: tr, SendOnly: true}, nil)
	if err := client.Send(ctx, shipOrder{Key: "k1"}, bus.To(w.endpoint), bus.WithMessageID(ns+"-ship")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"handler": "handling", "acked": "concluded"}[stall]
	killChild(t, ctx, want, schema+"|"+w.endpoint+"|"+w.billing+"|"+stall)

	shipments := `SELECT count(*) FROM ` + w.shipments()
	outbox := `SELECT count(*) FROM ` + store.Table()
	queued := `SELECT count(*) FROM ` + tr.MessagesTable() + ` WHERE queue = $1`
	if stall == "handler" {
		// The killed connection's transaction is rolled back by the server.
		deadline := time.Now().Add(30 * time.Second)
		for countRows(t, pool, shipments) != 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if n := countRows(t, pool, queued, w.endpoint); n != 1 {
			t.Fatalf("after the kill the input queue holds %d rows, want the message still there", n)
		}
		if n := countRows(t, pool, shipments); n != 0 {
			t.Errorf("after the kill: %d business rows, want 0", n)
		}
		if n := countRows(t, pool, outbox); n != 0 {
			t.Errorf("after the kill: %d outbox rows, want 0", n)
		}
	} else {
		if n := countRows(t, pool, queued, w.endpoint); n != 0 {
			t.Fatalf("after a committed handling the input queue holds %d rows, want none", n)
		}
		if n := countRows(t, pool, shipments); n != 1 {
			t.Errorf("after a committed handling: %d business rows, want 1", n)
		}
		if n := countRows(t, pool, outbox); n != 1 {
			t.Errorf("after a committed handling: %d outbox rows, want the event's", n)
		}
	}
	if n := countRows(t, pool, queued, w.billing); n != 0 || events.Len() != 0 {
		t.Errorf("after the kill: %d events queued and %d received, want none (the child's dispatcher never ran)", n, events.Len())
	}

	// A second process takes over: it handles the redelivery once, or, when
	// the handling committed, only dispatches the committed event.
	var calls atomic.Int64
	b, err := w.orders(t, false, &calls)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	events.WaitFor(t, 1)
	time.Sleep(1500 * time.Millisecond) // past the child's lease: a second delivery or event would show by now
	wantCalls := map[string]int64{"handler": 1, "acked": 0}[stall]
	if n := countRows(t, pool, shipments); n != 1 {
		t.Errorf("after the takeover: %d business rows, want 1", n)
	}
	if events.Len() != 1 || calls.Load() != wantCalls {
		t.Errorf("after the takeover: %d events, %d handler calls; want 1 and %d", events.Len(), calls.Load(), wantCalls)
	}
	if n := countRows(t, pool, `SELECT count(*) FROM `+tr.MessagesTable()); n != 0 {
		t.Errorf("%d rows left in the transport's table", n)
	}
	if n := countRows(t, pool, outbox); n != 0 {
		t.Errorf("%d rows left in the outbox", n)
	}
}

// killChild runs the test binary as the child of the exactly-once case,
// waits for it to print line, and SIGKILLs it.
func killChild(t *testing.T, ctx context.Context, line, arg string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), transportChildEnv+"="+arg)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	reached := false
	for !reached && out.Scan() {
		reached = out.Text() == line
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatalf("kill the child: %v", err)
	}
	_ = cmd.Wait()
	if !reached {
		t.Fatalf("the child never printed %q", line)
	}
}
