package mysql_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mysql"
)

// holderEnv carries "table|mode" to a worker of the claim failover tests:
// this test binary, re-executed. Mode "block": the transport blocks every
// send until its context ends, so the rows handed over stay claimed and
// unsettled. Mode "freeze": a 1 s look-ahead window and a 3 s lease, and a
// transport that records every send in table_sends and succeeds, so the
// rows claimed ahead are held until they fall due.
const holderEnv = "POSTBUS_MYSQL_TEST_HOLDER"

// runHolderIfAsked runs a holder and exits when this process is one.
func runHolderIfAsked() {
	v, ok := os.LookupEnv(holderEnv)
	if !ok {
		return
	}
	table, mode, _ := strings.Cut(v, "|")
	if err := runHolder(table, mode); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runHolder runs a bus whose dispatcher claims from table, as mode says.
// It prints "ready" once started, "sending" when its first send starts,
// and runs until SIGTERM.
func runHolder(table, mode string) error {
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
	tr := &holdTransport{block: mode == "block", record: func(ctx context.Context, id string) error {
		_, err := db.ExecContext(ctx, "INSERT INTO `"+table+"_sends` (msg_id, sent_us) VALUES (?, "+
			"TIMESTAMPDIFF(MICROSECOND, TIMESTAMP'1970-01-01 00:00:00', UTC_TIMESTAMP(6)))", id)
		return err
	}}
	cfg := bus.DispatcherConfig{}
	if mode == "freeze" {
		cfg = bus.DispatcherConfig{Lease: 3 * time.Second, LookAhead: time.Second}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("proc", "holder")
	b, err := bus.New(bus.Config{Endpoint: "holder", Transport: tr, Logger: log, Persistence: p, Dispatcher: cfg})
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

// holdTransport is the holder's transport: it has the identity of the
// rows (workerTransport) and either blocks every send until its context
// ends or records it.
type holdTransport struct {
	block  bool
	record func(ctx context.Context, id string) error
	once   sync.Once
}

func (t *holdTransport) Identity() string { return workerTransport }

func (t *holdTransport) Provision(context.Context, bus.Topology) error { return nil }

func (t *holdTransport) Send(ctx context.Context, _ string, env *bus.Envelope) error {
	t.once.Do(func() { fmt.Println("sending") })
	if t.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return t.record(context.WithoutCancel(ctx), env.ID)
}

func (t *holdTransport) Publish(context.Context, *bus.Envelope) error { return nil }

func (t *holdTransport) Receive(ctx context.Context, _ string, _ bus.ReceiveOptions, _ bus.DeliveryHandler) error {
	<-ctx.Done()
	return nil
}
