package e2e_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/nats"
	"github.com/postbus/bus/rabbitmq"
)

// kit is one test's namespace on a broker: an endpoint, its error and
// dead-letter queues, and a factory of transport values on that namespace
// (each with a connection of its own, like separate processes). Everything
// it creates on the broker is deleted at cleanup.
type kit struct {
	name       string // "rabbitmq" or "nats"
	endpoint   string
	errorQueue string
	deadLetter string
	// connName is the RabbitMQ connection name of every transport (the
	// management UI shows it).
	connName string
	// newTransport returns a new transport value; url overrides the
	// broker address when not empty (a proxy, an embedded server).
	newTransport func(t testing.TB, url string) bus.Transport
}

// config returns a bus.Config for the kit's endpoint on tr and store.
func (k *kit) config(tr bus.Transport, store bus.Persistence) bus.Config {
	return bus.Config{
		Endpoint: k.endpoint, Transport: tr, Persistence: store,
		ErrorQueue: k.errorQueue, DeadLetterQueue: k.deadLetter, Concurrency: 8,
	}
}

// rabbitKit probes RabbitMQ, then returns a namespace on it.
func rabbitKit(t testing.TB) *kit {
	t.Helper()
	conn, err := amqp.DialConfig(rabbitURL(), amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		unavailable(t, "RabbitMQ", rabbitURL(), err)
	}
	_ = conn.Close()
	s := suffix()
	k := &kit{
		name: "rabbitmq", endpoint: "pbe2e-" + s, errorQueue: "pbe2e-" + s + "-error",
		deadLetter: "pbe2e-" + s + "-deadletter", connName: "pbe2e-" + s,
	}
	exchange := "pbe2e-" + s + "-events"
	t.Cleanup(func() { deleteRabbitTopology(t, exchange, k.endpoint, k.errorQueue, k.deadLetter) })
	k.newTransport = func(t testing.TB, addr string) bus.Transport {
		t.Helper()
		u := rabbitURL()
		if addr != "" {
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			pu.Host = addr
			u = pu.String()
		}
		tr, err := rabbitmq.New(u, rabbitmq.Options{
			EventsExchange: exchange, ConnectionName: k.connName, Logger: quietLogger(t),
			ReconnectMax: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Close(ctx); err != nil {
				t.Errorf("close rabbitmq transport: %v", err)
			}
		})
		return tr
	}
	return k
}

// deleteRabbitTopology deletes queues, then the exchange unless it is "".
func deleteRabbitTopology(t testing.TB, exchange string, queues ...string) {
	conn, err := amqp.DialConfig(rabbitURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, q := range queues {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Errorf("cleanup: delete queue %s: %v", q, err)
			return // the channel is closed after an error
		}
	}
	if exchange == "" {
		return
	}
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		t.Errorf("cleanup: delete exchange %s: %v", exchange, err)
	}
}

// natsKit returns a namespace (a stream and subject prefix of its own) on
// the NATS server at serverURL, or on the shared server when it is empty.
// A stream left on the shared server is deleted at cleanup; an embedded
// server's store is the test's temporary directory.
func natsKit(t testing.TB, serverURL string) *kit {
	t.Helper()
	shared := serverURL == ""
	if shared {
		serverURL = natsURL()
	}
	probe, err := natsio.Connect(serverURL, natsio.Timeout(3*time.Second))
	if err != nil {
		unavailable(t, "NATS", serverURL, err)
	}
	probe.Close()
	s := suffix()
	k := &kit{
		name: "nats", endpoint: "pbe2e-" + s, errorQueue: "pbe2e-" + s + "-error",
		deadLetter: "pbe2e-" + s + "-deadletter",
	}
	opts := nats.Options{Stream: "PBE2E_" + s, SubjectPrefix: "pbe2e." + s, Logger: quietLogger(t)}
	if shared {
		t.Cleanup(func() { deleteStream(t, serverURL, opts.Stream) })
	}
	k.newTransport = func(t testing.TB, addr string) bus.Transport {
		t.Helper()
		u := serverURL
		if addr != "" {
			u = addr
		}
		nc, err := natsio.Connect(u, natsio.MaxReconnects(-1), natsio.ReconnectWait(50*time.Millisecond),
			natsio.Timeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		o := opts
		o.PublishTimeout = 2 * time.Second // a due message waits in the store, not in a publish
		tr, err := nats.New(nc, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	return k
}

func deleteStream(t testing.TB, serverURL, stream string) {
	nc, err := natsio.Connect(serverURL, natsio.Timeout(3*time.Second))
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("cleanup: delete stream %s: %v", stream, err)
	}
}
