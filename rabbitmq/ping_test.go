package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/rabbitmq"
)

// Ping answers while the transport holds a live connection, fails while
// the broker is cut off, and answers again once the transport reconnected.
func TestPingFollowsTheConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy, proxyURL := newOutageProxy(t)
	tr, err := rabbitmq.New(proxyURL, e.options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	if err := tr.Ping(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("ping with the broker up: %v", err)
	}
	proxy.cut()
	drivertest.Eventually(t, 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return tr.Ping(ctx) != nil
	}, "a ping fails while the broker is cut off")
	proxy.restore()
	if err := tr.Ping(ctxT(t, 20*time.Second)); err != nil {
		t.Fatalf("ping after the broker came back: %v", err)
	}
}
