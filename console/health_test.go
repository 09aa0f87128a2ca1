package console_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
)

// downTransport is a memory transport whose broker does not answer, with
// an error that carries a password, as a driver's might.
type downTransport struct{ *bus.MemoryTransport }

func (downTransport) Ping(context.Context) error {
	return errors.New("dial amqp://ops:hunter2@mq.internal:5672/: connection refused")
}

func healthBus(t *testing.T, tr bus.Transport) *bus.Bus {
	t.Helper()
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	return b
}

// The overview shows the bus's health as /readyz judges it: not ready
// before Start, ready once started, with each check and the lags.
func TestOverviewShowsHealth(t *testing.T) {
	t.Parallel()
	b := healthBus(t, nil)
	f := newFixture(t, func(o *console.Options) { o.Health = b.Health })
	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	mustContain(t, body, `<h2>Health: <span id="health-status" class="late">not ready</span></h2>`,
		"<td>started</td><td class=\"late\">failing</td><td>not started yet</td>",
		"<td>store</td><td class=\"\">ok</td><td>reachable in ", "dispatch lag 0s", "last claim none yet")
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, body = f.get(t, "/")
	mustContain(t, body, `<span id="health-status" class="">ready</span>`,
		"<td>started</td><td class=\"\">ok</td><td>started</td>",
		"<td>dispatch_lag</td><td class=\"\">ok</td><td>0s (max 1m0s)</td>",
		"<td>recurring_lag</td><td class=\"\">ok</td>")
}

// A backend that does not answer makes the overview not ready, naming the
// backend but not the error's text.
func TestOverviewHealthShowsNoSecrets(t *testing.T) {
	t.Parallel()
	b := healthBus(t, downTransport{bus.NewMemoryTransport()})
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *console.Options) {
		o.Health = b.Health
		o.HealthOptions = bus.HealthOptions{Timeout: 5 * time.Second}
	})
	_, body := f.get(t, "/")
	mustContain(t, body, "not ready", "<td>transport</td><td class=\"late\">failing</td><td>unreachable: the check failed</td>")
	for _, secret := range []string{"hunter2", "mq.internal", "amqp://"} {
		if strings.Contains(body, secret) {
			t.Fatalf("the overview shows %q", secret)
		}
	}
}

// A console may show the health alone.
func TestHealthAloneIsEnough(t *testing.T) {
	t.Parallel()
	if _, err := console.Handler(console.Options{Health: healthBus(t, nil).Health}); err != nil {
		t.Fatal(err)
	}
}
