package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// downTransport is a transport whose broker is down: Provision waits for a
// connection until its ctx ends, then says so, as the broker transports
// do. It records the deadline Provision was given.
type downTransport struct {
	*bus.MemoryTransport
	deadline chan time.Time
}

func (d *downTransport) Provision(ctx context.Context, _ bus.Topology) error {
	dl, _ := ctx.Deadline()
	d.deadline <- dl
	<-ctx.Done()
	return errors.Join(errors.New("not connected: dial tcp 127.0.0.1:1: connection refused"), ctx.Err())
}

// TestStartWithBrokerDownReturnsAfterStartTimeout: Start with a ctx that
// never ends still returns, with an error naming StartTimeout and the
// transport's, when the transport cannot be provisioned; by default
// within a minute.
func TestStartWithBrokerDownReturnsAfterStartTimeout(t *testing.T) {
	t.Parallel()
	tr := &downTransport{MemoryTransport: bus.NewMemoryTransport(), deadline: make(chan time.Time, 2)}
	b, err := bus.New(bus.Config{Endpoint: "sales", Transport: tr, Logger: quiet(), StartTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Start(context.Background()) }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Start with the broker down did not return")
	}
	if !errors.Is(err, bus.ErrStartTimeout) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Start = %v, want ErrStartTimeout with the transport's error", err)
	}
	_ = b.Stop(context.Background())
	<-tr.deadline

	before := time.Now()
	b2, _ := bus.New(bus.Config{Endpoint: "sales", Transport: tr, Logger: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- b2.Start(ctx) }()
	dl := <-tr.deadline
	cancel()
	<-done
	_ = b2.Stop(context.Background())
	if d := dl.Sub(before); d < 59*time.Second || d > 70*time.Second {
		t.Errorf("default bound on Start's setup = %v, want 1 minute", d)
	}
}
