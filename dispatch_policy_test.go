package bus_test

import (
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
)

// The sender's dispatch retry policy travels with a scheduled row for the
// dispatcher only: the message handed to the transport carries no
// postbus.dispatch.* header, and its other headers arrive as they were sent.
func TestDispatchPolicyHeadersStayInTheStore(t *testing.T) {
	t.Parallel()
	eachDispatchMode(t, func(t *testing.T, lookAhead time.Duration) {
		tr := bus.NewMemoryTransport()
		shop := bustest.StartBus(t, bus.Config{Endpoint: "shop", Transport: tr, Dispatcher: bus.DispatcherConfig{
			LookAhead: lookAhead, NumberOfRetries: 3, RetryBackoff: 50 * time.Millisecond,
		}}, nil)
		if err := shop.Send(ctxT(t), PlaceOrder{ID: "o-1"}, bus.To("sales"), bus.DeliverAfter(20*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if err := shop.Send(ctxT(t), PlaceOrder{ID: "o-2"}, bus.To("sales"), bus.DeliverAfter(20*time.Millisecond), bus.ReplyTo("shop-replies")); err != nil {
			t.Fatal(err)
		}
		waitLen(t, tr, "sales", 2)
		var plain, replyTo int
		for range 2 {
			env := receiveOne(t, tr, "sales")
			for k := range env.Headers {
				if strings.HasPrefix(k, "postbus.dispatch.") {
					t.Errorf("message %s arrived with header %s=%q", env.ID, k, env.Headers[k])
				}
			}
			switch env.Header(bus.HeaderReplyTo) {
			case "":
				plain++
			case "shop-replies":
				replyTo++
			}
		}
		if plain != 1 || replyTo != 1 {
			t.Errorf("%d messages arrived without a reply-to header and %d with shop-replies, want 1 and 1", plain, replyTo)
		}
	})
}
