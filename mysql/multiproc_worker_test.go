package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mysql"
)

// workerEnv carries "table|name|hangAfter" to a worker of
// TestMultiProcess: this test binary, re-executed.
const workerEnv = "POSTBUS_MYSQL_TEST_WORKER"

// The names the test's envelopes and rows carry.
const (
	tickType        = "mysql_test.Tick"
	workerEndpoint  = "multiproc"
	workerTransport = "multiproc-sync"
)

// tick is the scheduled message of TestMultiProcess.
type tick struct{ N int }

func (tick) MessageName() string { return tickType }

// runClaimerIfAsked runs a worker and exits when this process is one.
func runClaimerIfAsked() {
	v, ok := os.LookupEnv(workerEnv)
	if !ok {
		return
	}
	parts := strings.Split(v, "|")
	hang, _ := strconv.ParseInt(parts[2], 10, 64)
	if err := runWorker(parts[0], parts[1], hang); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runWorker runs a bus whose dispatcher claims from table and whose
// handler records each receipt in table_receipts; every claim is logged
// in table_claims before the dispatcher sees it. It prints "ready" once
// started and runs until SIGTERM; after hangAfter messages (0: never) it
// prints "hung" and blocks every handler, so a SIGKILL lands mid-dispatch.
func runWorker(table, name string, hangAfter int64) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := openDB(ctx, 8)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := mysql.New(db, mysql.Options{Table: table})
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proc", name)
	b, err := bus.New(bus.Config{Endpoint: workerEndpoint, Transport: newSyncTransport(), Logger: log,
		Persistence: &claimLog{Persistence: p, db: db, name: name, table: "`" + table + "_claims`"},
		Dispatcher:  bus.DispatcherConfig{Lease: 3 * time.Second}})
	if err != nil {
		return err
	}
	var handled atomic.Int64
	var hung sync.Once
	err = bus.Handle(b, func(ctx context.Context, m tick) error {
		if hangAfter > 0 && handled.Add(1) > hangAfter {
			hung.Do(func() { fmt.Println("hung") })
			select {} // until SIGKILL: the claimed batch stays unsettled
		}
		env := bus.IncomingMessage(ctx)
		_, err := db.ExecContext(ctx, "INSERT INTO `"+table+"_receipts` (msg_id, proc, due_us, received_us) VALUES (?, ?, ?, "+
			"TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', UTC_TIMESTAMP(6)))", env.ID, name, env.DueAt.UnixMicro())
		return err
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return b.Stop(sctx)
}

// claimLog records which rows this process claimed before the dispatcher
// sees them: a process killed after a claim has logged every row it could
// have handed over. Embedding keeps Setup and WatchDue visible to the bus.
type claimLog struct {
	*mysql.Persistence
	db          *sql.DB
	name, table string
}

func (c *claimLog) ClaimDueOutgoing(ctx context.Context, transport string, now time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	msgs, err := c.Persistence.ClaimDueOutgoing(ctx, transport, now, limit, lease)
	if err != nil || len(msgs) == 0 {
		return msgs, err
	}
	return msgs, c.log(ctx, msgs)
}

// ClaimOutgoingAhead logs look-ahead claims alike: the dispatcher uses it
// instead of ClaimDueOutgoing.
func (c *claimLog) ClaimOutgoingAhead(ctx context.Context, transport string, now time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	claim, err := c.Persistence.ClaimOutgoingAhead(ctx, transport, now, ahead, limit, lease)
	if err != nil || len(claim.Rows) == 0 {
		return claim, err
	}
	return claim, c.log(ctx, claim.Rows)
}

func (c *claimLog) log(ctx context.Context, msgs []bus.OutgoingMessage) error {
	args := make([]any, 0, 2*len(msgs))
	rows := make([]string, len(msgs))
	for i, m := range msgs {
		rows[i] = "(?, ?)"
		args = append(args, m.ID, c.name)
	}
	_, err := c.db.ExecContext(ctx, "INSERT INTO "+c.table+" (msg_id, proc) VALUES "+strings.Join(rows, ", "), args...)
	return err
}

// syncTransport runs the receiving handler inside Send, so Send returns
// nil only once the handler has recorded the message: every row the
// dispatcher deleted has been recorded, and a SIGKILL loses nothing that
// the store had handed over.
type syncTransport struct {
	mu       sync.Mutex
	handlers map[string]bus.DeliveryHandler
	ready    chan struct{} // closed once a queue has a receiver
}

func newSyncTransport() *syncTransport {
	return &syncTransport{handlers: map[string]bus.DeliveryHandler{}, ready: make(chan struct{})}
}

func (t *syncTransport) Identity() string { return workerTransport }

func (t *syncTransport) Provision(context.Context, bus.Topology) error { return nil }

func (t *syncTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	h := t.handlers[queue]
	t.mu.Unlock()
	if h == nil {
		return nil // the error queue: nothing in this test reads it
	}
	return h(context.WithoutCancel(ctx), env.Clone())
}

func (t *syncTransport) Publish(context.Context, *bus.Envelope) error { return nil }

func (t *syncTransport) Receive(ctx context.Context, queue string, _ bus.ReceiveOptions, h bus.DeliveryHandler) error {
	t.mu.Lock()
	t.handlers[queue] = h
	select {
	case <-t.ready:
	default:
		close(t.ready)
	}
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	delete(t.handlers, queue)
	t.mu.Unlock()
	return nil
}
