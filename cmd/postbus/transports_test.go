package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/sqlite"
)

// The tests of the Redis, Kafka and SQS flags run the command end to end:
// a failed message is stored in a SQLite file, "postbus failed retry" with
// the transport's flags sends it back, and the test receives it on that
// transport; "postbus provision" with the same flags creates the
// endpoint's queues and subscriptions, which the test finds on the broker.

// failedInSQLite stores one failed message, whose queue is queue, in a
// fresh SQLite file, and returns the file's path and the message's ID.
func failedInSQLite(t *testing.T, queue string) (path, id string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "app.db")
	p, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	id = drivertest.ID()
	at := time.Now().UTC().Add(-time.Minute)
	env := &bus.Envelope{ID: id, Type: "billing.ChargeCard", Kind: bus.KindCommand, Body: []byte(`{"card":"4242"}`),
		ContentType: "application/json", Destination: queue, SentAt: at.Add(-time.Minute), Headers: map[string]string{
			bus.HeaderFailureReason: "card declined", bus.HeaderFailureEndpoint: queue, bus.HeaderFailureQueue: queue,
			bus.HeaderFailureKind: "handler", bus.HeaderFailureAttempts: "5", bus.HeaderFailureTime: at.Format(time.RFC3339Nano)}}
	if err := p.StoreFailed(ctx, []bus.FailedMessage{bus.FailedFromEnvelope(env, at)}); err != nil {
		t.Fatal(err)
	}
	return path, id
}

// checkRetried runs "postbus failed retry" for the message id stored at
// path with the transport given by env and args, then receives queue on
// tr until the message arrives, and checks the store no longer holds it.
func checkRetried(t *testing.T, tr bus.Transport, env map[string]string, args []string, path, queue, id string) {
	t.Helper()
	r := runApp(t, openBackends, env, append([]string{"failed", "retry", "--sqlite-path", path, id}, args...)...)
	if r.code != exitOK || r.stdout != "retried 1 of 1 message(s)\n" {
		t.Fatalf("postbus failed retry: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	got := make(chan *bus.Envelope, 16)
	stop := drivertest.Receive(t, tr, queue, bus.ReceiveOptions{Concurrency: 1}, func(_ context.Context, e *bus.Envelope) error {
		got <- e
		return nil
	})
	defer stop()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case e := <-got:
			if e.ID != id {
				continue
			}
			if e.Type != "billing.ChargeCard" || string(e.Body) != `{"card":"4242"}` || e.Headers[bus.HeaderFailureReason] != "" {
				t.Errorf("retried message: type %q, body %q, headers %v", e.Type, e.Body, e.Headers)
			}
			p, err := sqlite.Open(path, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if n, err := p.CountFailed(context.Background(), bus.FailedQuery{}); err != nil || n != 0 {
				t.Errorf("failed messages after the retry: %d, %v; want 0", n, err)
			}
			return
		case <-deadline:
			t.Fatalf("the retried message %s did not arrive on queue %s", id, queue)
		}
	}
}

// provisionArgs provisions endpoint with one event, its own error and
// dead-letter queues.
func provisionArgs(endpoint string) []string {
	return []string{"provision", "--endpoint", endpoint, "--event", "orders.OrderPlaced",
		"--error-queue", endpoint + "-error", "--deadletter-queue", endpoint + "-deadletter"}
}

// runProvision runs provision with args and checks it reports objects.
func runProvision(t *testing.T, env map[string]string, args ...string) {
	t.Helper()
	r := runApp(t, openBackends, env, args...)
	if r.code != exitOK || !strings.Contains(r.stdout, "provisioned") {
		t.Fatalf("postbus %v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
	}
}
