package sqlite_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

type Reminder struct{ N int }

// A scheduled message whose ID was not valid UTF-8 made every claim of the
// store roll back ("leased 0 rows of 1 selected"), so no scheduled message
// was dispatched again. Such an ID is now refused at Send, and a message
// scheduled after it arrives.
func TestNonUTF8MessageIDNeverBlocksScheduledMessages(t *testing.T) {
	t.Parallel()
	p := openTemp(t)
	got := make(chan int, 4)
	b := bustest.StartBus(t, bus.Config{Endpoint: "ids-utf8", Transport: bus.NewMemoryTransport(), Persistence: p,
		Dispatcher: bus.DispatcherConfig{PollInterval: 50 * time.Millisecond}},
		func(b *bus.Bus) {
			_ = bus.Handle(b, func(_ context.Context, m Reminder) error { got <- m.N; return nil })
		})
	ctx := t.Context()
	err := b.Send(ctx, Reminder{N: 1}, bus.To("ids-utf8"), bus.DeliverAfter(time.Millisecond), bus.WithMessageID("msg-\xff"))
	if !errors.Is(err, bus.ErrInvalidOption) {
		t.Errorf("Send with a non-UTF-8 ID: err = %v, want an *OptionError", err)
	}
	if err := b.Send(ctx, Reminder{N: 2}, bus.To("ids-utf8"), bus.DeliverAfter(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 2 {
			t.Errorf("received reminder %d first, want 2", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the scheduled message never arrived: the store's claims fail")
	}
}
