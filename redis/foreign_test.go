package redis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// TestForeignEntriesGoToErrorQueueWithReason: stream entries another
// program added with the plain client, one without the envelope field and
// one whose envelope field is not an envelope, reach the error queue once
// each with what they held and the reason they could not be read; the
// input stream is left empty and no handler ran.
func TestForeignEntriesGoToErrorQueueWithReason(t *testing.T) {
	t.Parallel()
	rdb := connect(t)
	opts := namespace(t, rdb)
	tr := mustNew(t, rdb, opts)
	handled := make(chan struct{}, 2)
	b := bustest.StartBus(t, bus.Config{Endpoint: "in", ErrorQueue: "in-error", Transport: tr, Logger: drivertest.Logger()},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(context.Context, bustest.Ping) error { handled <- struct{}{}; return nil })
		})
	ctx := drivertest.Ctx(t, 0)
	in := opts.Prefix + ":q:in"
	plain, err := rdb.XAdd(ctx, &goredis.XAddArgs{Stream: in, Values: []any{"data", `{"id":1}`, "source", "legacy"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.XAdd(ctx, &goredis.XAddArgs{Stream: in, Values: []any{"e", "not an envelope"}}).Result(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []*bus.Envelope
	)
	receive(t, tr, "in-error", 1, func(_ context.Context, env *bus.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, env)
		return nil
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a second copy would arrive about now
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("the error queue got %d messages, want 2", len(got))
	}
	for _, env := range got {
		reason := env.Header(bus.HeaderFailureReason)
		if !strings.HasPrefix(reason, "redis: ") || env.Header(bus.HeaderFailureKind) != "poison" {
			t.Errorf("%s: failure reason %q kind %q", env.ID, reason, env.Header(bus.HeaderFailureKind))
		}
		switch env.ID {
		case plain:
			if env.Header("data") != `{"id":1}` || env.Header("source") != "legacy" {
				t.Errorf("the fields of entry %s were lost: headers %v", plain, env.Headers)
			}
		default:
			if string(env.Body) != "not an envelope" {
				t.Errorf("entry %s: body %q", env.ID, env.Body)
			}
		}
	}
	if n, err := rdb.XLen(ctx, in).Result(); err != nil || n != 0 {
		t.Errorf("input stream holds %d entries (%v), want 0", n, err)
	}
	select {
	case <-handled:
		t.Error("a handler ran for a foreign entry")
	default:
	}
	if m := b.Metrics(); m.MovedToError != 2 {
		t.Errorf("moved to error %d, want 2", m.MovedToError)
	}
}
