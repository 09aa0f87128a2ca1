package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

type OrderAccepted struct{ ID string }

// TestReplyGoesToReplyToQueue: a command sent with ReplyTo is answered in
// that queue, not in the sender's endpoint.
func TestReplyGoesToReplyToQueue(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			return bus.Reply(ctx, OrderAccepted(m))
		})
	})
	shop := bustest.StartBus(t, bus.Config{Endpoint: "shop", Transport: tr, SendOnly: true}, nil)
	if err := shop.Send(ctxT(t), PlaceOrder{ID: "o-7"}, bus.To("sales"), bus.ReplyTo("shop-replies")); err != nil {
		t.Fatal(err)
	}
	waitLen(t, tr, "shop-replies", 1)
	if n := tr.Len("shop"); n != 0 {
		t.Errorf("%d replies reached the sender's endpoint, want 0", n)
	}
	if env := receiveOne(t, tr, "shop-replies"); env.Kind != bus.KindReply || env.Destination != "shop-replies" {
		t.Errorf("shop-replies got a %s to %q, want a reply to shop-replies", env.Kind, env.Destination)
	}
}

// TestReplyToRefusesBadQueueNames: ReplyTo checks its queue as bus.New
// checks an endpoint, before anything is sent.
func TestReplyToRefusesBadQueueNames(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	b := bustest.StartBus(t, bus.Config{Endpoint: "shop", Transport: tr, SendOnly: true}, nil)
	for _, q := range []string{"", "nc3 bad!", "a.*.b", ".."} {
		err := b.Send(ctxT(t), PlaceOrder{}, bus.To("sales"), bus.ReplyTo(q))
		var oe *bus.OptionError
		if !errors.As(err, &oe) || oe.Option != "ReplyTo" || !errors.Is(err, bus.ErrInvalidOption) {
			t.Errorf("ReplyTo(%q) = %v, want an *OptionError for ReplyTo", q, err)
		}
	}
	if n := tr.Len("sales"); n != 0 {
		t.Errorf("%d messages sent with a bad ReplyTo, want 0", n)
	}
}

// Replies to a command sent with ReplyTo go to that queue: here a queue
// the shop's reply handler consumes, rather than the shop endpoint itself.
func ExampleReplyTo() {
	ctx := context.Background()
	transport := bus.NewMemoryTransport()
	done := make(chan string)

	sales, _ := bus.New(bus.Config{Endpoint: "sales", Transport: transport, Logger: quiet()})
	_ = bus.Handle(sales, func(ctx context.Context, m PlaceOrder) error {
		return bus.Reply(ctx, OrderAccepted(m))
	})
	replies, _ := bus.New(bus.Config{Endpoint: "shop-replies", Transport: transport, Logger: quiet()})
	_ = bus.Handle(replies, func(ctx context.Context, m OrderAccepted) error {
		done <- m.ID
		return nil
	})
	shop, _ := bus.New(bus.Config{Endpoint: "shop", Transport: transport, SendOnly: true, Logger: quiet()})
	for _, b := range []*bus.Bus{sales, replies, shop} {
		_ = b.Start(ctx)
		defer b.Stop(ctx)
	}

	_ = shop.Send(ctx, PlaceOrder{ID: "o-1"}, bus.To("sales"), bus.ReplyTo("shop-replies"))
	fmt.Println("reply for", <-done, "arrived at shop-replies")
	// Output: reply for o-1 arrived at shop-replies
}
