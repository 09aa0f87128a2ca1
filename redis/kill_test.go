package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

// Environment of the child process of TestKilledConsumerMessagesTakenOver.
const (
	envChildPrefix = "POSTBUS_REDIS_CHILD_PREFIX"
	envChildQueue  = "POSTBUS_REDIS_CHILD_QUEUE"
)

// childLease is the lease of both consumers in the kill test.
const childLease = 2 * time.Second

// TestKilledConsumerChild is the consumer process the kill test starts: it
// receives the queue, prints "held <id>" for each message and never
// finishes a handler. It does nothing in a normal test run.
func TestKilledConsumerChild(t *testing.T) {
	prefix, queue := os.Getenv(envChildPrefix), os.Getenv(envChildQueue)
	if prefix == "" {
		return // not started as the child: nothing to do
	}
	rdb := connect(t)
	tr := mustNew(t, rdb, redis.Options{Prefix: prefix, Lease: childLease, Logger: drivertest.Logger()})
	_ = tr.Receive(context.Background(), queue, bus.ReceiveOptions{Concurrency: 100}, func(ctx context.Context, env *bus.Envelope) error {
		fmt.Printf("held %s\n", env.ID)
		<-ctx.Done() // until killed
		return ctx.Err()
	})
}

// A consumer process killed with SIGKILL while it holds messages: another
// consumer takes each of them over once the lease ran out, and handles it
// with its ID.
func TestKilledConsumerMessagesTakenOver(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	opts := namespace(t, rdb)
	opts.Lease = childLease
	opts.ClaimInterval = 200 * time.Millisecond
	tr := mustNew(t, rdb, opts)
	ctx := drivertest.Ctx(t, 0)
	const queue, n = "killed", 20
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i := range n {
		env := command(queue, i)
		ids[env.ID] = true
		if err := tr.Send(ctx, queue, env); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledConsumerChild$", "-test.v")
	cmd.Env = append(os.Environ(), envChildPrefix+"="+opts.Prefix, envChildQueue+"="+queue)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	lines := bufio.NewScanner(out)
	timeout := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	for len(held) < n && lines.Scan() {
		if id, ok := strings.CutPrefix(lines.Text(), "held "); ok {
			held[id] = true
		}
	}
	timeout.Stop()
	if len(held) < n {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the child holds %d of %d messages", len(held), n)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killedAt := time.Now()

	c := newCollector()
	firstAt := make(chan time.Time, 1)
	receive(t, tr, queue, 8, func(_ context.Context, env *bus.Envelope) error {
		select {
		case firstAt <- time.Now():
		default:
		}
		c.add(env.ID)
		return nil
	})
	c.waitFor(t, n, 60*time.Second)
	t.Logf("all %d taken over and handled %v after the kill", n, time.Since(killedAt).Round(time.Millisecond))
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.got {
		if !held[id] || !ids[id] {
			t.Errorf("handled %s, which the killed consumer did not hold", id)
		}
	}
	// The child renewed its claims every Lease/3 until the kill, so its
	// messages become idle for a lease at least 2/3 of a lease after it;
	// the bound leaves room for a renewal delayed on a busy machine.
	if d := (<-firstAt).Sub(killedAt); d < childLease/3 {
		t.Errorf("first message taken over %v after the kill, before its lease of %v ran out", d, childLease)
	}
}
