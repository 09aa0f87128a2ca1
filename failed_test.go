package bus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

func TestNormalizeReason(t *testing.T) {
	t.Parallel()
	cases := []struct{ a, b string }{
		{"order 42 not found", "order 1234 not found"},
		{`user "alice" has no credit`, `user "bob" has no credit`},
		{"user 'alice' has no credit", "user 'bob' has no credit"},
		{"request 7f3a9c2e-11b4-4c1d-9a3e-0123456789ab failed", "request 0c9e8f7a-2222-4d1d-8a3e-ba9876543210 failed"},
		{"object deadbeef0123 missing at 0x7ffd1234", "object 0a1b2c3d4e5f missing at 0xc000012345"},
		{"timeout  after 1.5s", "timeout after 30s"},
		{"  trailing space ", "trailing space"},
	}
	for _, c := range cases {
		if na, nb := bus.NormalizeReason(c.a), bus.NormalizeReason(c.b); na != nb {
			t.Errorf("NormalizeReason(%q) = %q, NormalizeReason(%q) = %q; want equal", c.a, na, c.b, nb)
		}
	}
	different := [][2]string{
		{"order 42 not found", "customer 42 not found"},
		{"can't connect", "cannot connect"},
		{"connection refused", "connection reset"},
	}
	for _, d := range different {
		if bus.NormalizeReason(d[0]) == bus.NormalizeReason(d[1]) {
			t.Errorf("%q and %q normalise alike: %q", d[0], d[1], bus.NormalizeReason(d[0]))
		}
	}
	if got := bus.NormalizeReason(`order 42 "x" can't`); got != `order <n> "?" can't` {
		t.Errorf("NormalizeReason = %q", got)
	}
	if got := bus.NormalizeReason(strings.Repeat("é", 2000)); len(got) > 1024 || !strings.HasPrefix(got, "éé") || !strings.HasSuffix(got, "é") {
		t.Errorf("long reason not cut at 1,024 bytes on a character boundary: %d bytes", len(got))
	}
}

func TestFailureGroup(t *testing.T) {
	t.Parallel()
	g := bus.FailureGroup("orders.Ship", "shipping", "order 42 not found")
	if len(g) != 16 || g != bus.FailureGroup("orders.Ship", "shipping", "order 7 not found") {
		t.Errorf("FailureGroup = %q; want 16 hex digits, equal for equal normalised reasons", g)
	}
	for _, other := range []string{
		bus.FailureGroup("orders.Cancel", "shipping", "order 42 not found"),
		bus.FailureGroup("orders.Ship", "billing", "order 42 not found"),
		bus.FailureGroup("orders.Ship", "shipping", "customer 42 not found"),
		bus.FailureGroup("orders.Shipshipping", "", "order 42 not found"),
	} {
		if other == g {
			t.Errorf("different failures share group %s", g)
		}
	}
}

// failedEnvelope is a message as the core puts it in the error queue.
func failedEnvelope(id, reason, queue string, at time.Time) *bus.Envelope {
	return &bus.Envelope{
		ID: id, Type: "orders.Ship", Kind: bus.KindCommand, Body: []byte(`{"id":"` + id + `"}`),
		ContentType: "application/json", Destination: queue, Source: "sales", CorrelationID: id,
		SentAt: at.Add(-time.Minute).UTC(),
		Headers: map[string]string{
			bus.HeaderFailureReason: reason, bus.HeaderFailureKind: "handler", bus.HeaderFailureEndpoint: "shipping",
			bus.HeaderFailureQueue: queue, bus.HeaderFailureTime: at.UTC().Format(time.RFC3339Nano),
			bus.HeaderFailureAttempts: "3", bus.HeaderDelayedRetries: "2", "app": "kept",
		},
	}
}

func TestFailedFromEnvelope(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	env := failedEnvelope("m1", "order 42 not found", "shipping", at)
	m := bus.FailedFromEnvelope(env, time.Now())
	if m.ID != "m1" || m.Type != "orders.Ship" || m.Endpoint != "shipping" || m.Queue != "shipping" || m.Kind != "handler" ||
		m.Reason != "order 42 not found" || m.Attempts != 3 || m.Failures != 1 || !m.FirstFailed.Equal(at) || !m.LastFailed.Equal(at) ||
		m.Group != bus.FailureGroup("orders.Ship", "shipping", "order 42 not found") {
		t.Errorf("FailedFromEnvelope = %+v", m)
	}
	if back, err := bus.UnmarshalEnvelope(m.Envelope); err != nil || back.Header(bus.HeaderFailureReason) != "order 42 not found" {
		t.Errorf("stored envelope = %v, %v", back, err)
	}
	now := time.Now().UTC()
	raw := bus.FailedFromEnvelope(&bus.Envelope{Body: []byte("\x00garbage"), Headers: map[string]string{bus.HeaderDecodeError: "bad frame"}}, now)
	if !strings.HasPrefix(raw.ID, "undecodable-") || raw.Reason != "bad frame" || !raw.LastFailed.Equal(now) {
		t.Errorf("undecodable message = %+v; want a derived ID, the decode error, now", raw)
	}
}

// flakyStore fails every third StoreFailed call.
type flakyStore struct {
	bus.FailedStore
	calls atomic.Int64
}

func (f *flakyStore) StoreFailed(ctx context.Context, msgs []bus.FailedMessage) error {
	if f.calls.Add(1)%3 == 0 {
		return errors.New("database unavailable")
	}
	return f.FailedStore.StoreFailed(ctx, msgs)
}

func runIngest(t *testing.T, tr bus.Transport, store bus.FailedStore) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- bus.IngestFailed(ctx, tr, "", store, bus.IngestOptions{Concurrency: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("IngestFailed: %v", err)
		}
	}
}

func waitFailedCount(t *testing.T, s bus.FailedStore, q bus.FailedQuery, n int64) {
	t.Helper()
	drivertest.Eventually(t, 20*time.Second, func() bool {
		got, err := s.CountFailed(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		return got == n
	}, "the store to hold %d failed messages", n)
}

// Nothing is lost: a message the store refused stays in the error queue
// until a later delivery is stored; a redelivered failure changes nothing,
// and a new failure of a stored message updates it.
func TestIngestFailedLosesNothing(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	mem := bus.NewMemoryPersistence()
	store := &flakyStore{FailedStore: mem}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 300
	for i := range n {
		if err := tr.Send(ctxT(t), "error", failedEnvelope(fmt.Sprintf("m-%03d", i), fmt.Sprintf("order %d not found", i), "shipping", at)); err != nil {
			t.Fatal(err)
		}
	}
	stop := runIngest(t, tr, store)
	waitFailedCount(t, mem, bus.FailedQuery{}, n)
	for i := range 100 {
		// Redeliveries of the same failure, and new failures (later).
		when := at
		if i%2 == 1 {
			when = at.Add(time.Minute)
		}
		if err := tr.Send(ctxT(t), "error", failedEnvelope(fmt.Sprintf("m-%03d", i), "order 1 not found", "shipping", when)); err != nil {
			t.Fatal(err)
		}
	}
	// A message whose store write failed is out of the queue while the bus
	// backs off, then back: the queue is done when it stays empty for a
	// while longer than that backoff.
	deadline := time.Now().Add(30 * time.Second)
	var emptySince time.Time
	for ; time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if tr.Len("error") > 0 {
			emptySince = time.Time{}
			continue
		}
		if emptySince.IsZero() {
			emptySince = time.Now()
		}
		if time.Since(emptySince) > 2*time.Second {
			break
		}
	}
	stop()
	if l := tr.Len("error"); l != 0 {
		t.Fatalf("%d messages left in the error queue", l)
	}
	if store.calls.Load() < n+100+(n+100)/3-1 {
		t.Errorf("%d StoreFailed calls; the flaky store should have forced redeliveries", store.calls.Load())
	}
	msgs, err := mem.ListFailed(ctxT(t), bus.FailedQuery{Limit: 1000})
	if err != nil || len(msgs) != n {
		t.Fatalf("ListFailed = %d messages, %v; want %d", len(msgs), err, n)
	}
	for _, m := range msgs {
		var i int
		fmt.Sscanf(m.ID, "m-%03d", &i)
		want := 1
		if i < 100 && i%2 == 1 {
			want = 2
		}
		if m.Failures != want {
			t.Errorf("%s has %d failures, want %d", m.ID, m.Failures, want)
		}
	}
	if gs, _ := mem.FailedGroups(ctxT(t), 10); len(gs) != 1 || gs[0].Count != n {
		t.Errorf("groups = %+v; want one group of %d", gs, n)
	}
}

// A message whose handler keeps failing goes to the error queue, the
// ingester stores it with its failure, and a retry hands it back to its
// handler, which now succeeds.
func TestIngestAndRetryThroughBus(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	mem := bus.NewMemoryPersistence()
	var broken atomic.Bool
	broken.Store(true)
	in := bustest.NewRecorder[PlaceOrder]()
	b := bustest.StartBus(t, bus.Config{Endpoint: "sales", Transport: tr, Retries: bus.RetryConfig{Immediate: -1, Delayed: -1}}, func(b *bus.Bus) {
		_ = bus.Handle(b, func(ctx context.Context, m PlaceOrder) error {
			if broken.Load() {
				return fmt.Errorf("order %s: warehouse 17 unreachable", m.ID)
			}
			return in.Handler(ctx, m)
		})
	})
	stop := runIngest(t, tr, mem)
	for _, id := range []string{"o-1", "o-2"} {
		if err := b.Send(ctxT(t), PlaceOrder{ID: id}, bus.To("sales"), bus.WithMessageID(id)); err != nil {
			t.Fatal(err)
		}
	}
	waitFailedCount(t, mem, bus.FailedQuery{}, 2)
	stop()
	m, ok, err := mem.GetFailed(ctxT(t), "o-1")
	if err != nil || !ok || m.Endpoint != "sales" || m.Queue != "sales" || m.Kind != "handler" || m.Type == "" ||
		!strings.Contains(m.Reason, "warehouse 17 unreachable") {
		t.Fatalf("stored failure = %+v, %v, %v", m, ok, err)
	}
	if gs, _ := mem.FailedGroups(ctxT(t), 10); len(gs) != 1 || gs[0].Count != 2 {
		t.Errorf("groups = %+v; want the two failures in one group", gs)
	}
	broken.Store(false)
	n, err := bus.RetryFailed(ctxT(t), tr, mem, []string{"o-1", "o-2", "never-stored"})
	if err != nil || n != 2 {
		t.Fatalf("RetryFailed = %d, %v; want 2", n, err)
	}
	in.WaitFor(t, 2)
	if c, _ := mem.CountFailed(ctxT(t), bus.FailedQuery{}); c != 0 {
		t.Errorf("%d failures still stored after the retry", c)
	}
}

// countingTransport records what a retry sends, and fails sends of one ID.
type countingTransport struct {
	bus.Transport
	mu     sync.Mutex
	sent   map[string]int
	failID string
}

func (c *countingTransport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if env.ID == c.failID {
		return errors.New("broker unavailable")
	}
	for k := range env.Headers {
		if strings.HasPrefix(k, "postbus.failure.") || k == bus.HeaderDelayedRetries {
			return fmt.Errorf("retry of %s kept header %s", env.ID, k)
		}
	}
	if env.Header("app") != "kept" || queue != "shipping" {
		return fmt.Errorf("retry of %s to %s lost its headers or queue", env.ID, queue)
	}
	c.mu.Lock()
	c.sent[env.ID]++
	c.mu.Unlock()
	return c.Transport.Send(ctx, queue, env)
}

func TestRetryFailedMovesEachOnce(t *testing.T) {
	t.Parallel()
	tr := &countingTransport{Transport: bus.NewMemoryTransport(), sent: map[string]int{}}
	mem := bus.NewMemoryPersistence()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 1000
	var msgs []bus.FailedMessage
	for i := range n {
		msgs = append(msgs, bus.FailedFromEnvelope(failedEnvelope(fmt.Sprintf("r-%04d", i), fmt.Sprintf("order %d not found", i), "shipping", at.Add(time.Duration(i)*time.Millisecond)), at))
	}
	if err := mem.StoreFailed(ctxT(t), msgs); err != nil {
		t.Fatal(err)
	}
	group := msgs[0].Group
	// Select the group page by page, as an operator's tool does, and retry.
	var ids []string
	q := bus.FailedQuery{Group: group, Limit: 300}
	for {
		page, err := mem.ListFailed(ctxT(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			ids = append(ids, m.ID)
		}
		if len(page) < q.Limit {
			break
		}
		q.BeforeFailed, q.BeforeID = page[len(page)-1].LastFailed, page[len(page)-1].ID
	}
	if len(ids) != n {
		t.Fatalf("selected %d of the group, want %d", len(ids), n)
	}
	// A broker failure on one message stops the retry there: what was sent
	// is deleted, the rest stays stored.
	tr.failID = ids[550]
	moved, err := bus.RetryFailed(ctxT(t), tr, mem, ids)
	if err == nil || moved != 550 {
		t.Fatalf("RetryFailed with a broken send = %d, %v; want 550 and the error", moved, err)
	}
	tr.failID = ""
	more, err := bus.RetryFailed(ctxT(t), tr, mem, ids) // again, all of them: the moved ones are gone
	if err != nil || moved+more != n {
		t.Fatalf("second RetryFailed = %d, %v; want %d", more, err, n-moved)
	}
	if len(tr.sent) != n {
		t.Errorf("sent %d distinct messages, want %d", len(tr.sent), n)
	}
	for id, times := range tr.sent {
		if times != 1 {
			t.Errorf("%s sent %d times", id, times)
		}
	}
	if l := tr.Transport.(*bus.MemoryTransport).Len("shipping"); l != n {
		t.Errorf("shipping queue holds %d, want %d", l, n)
	}
	if c, _ := mem.CountFailed(ctxT(t), bus.FailedQuery{}); c != 0 {
		t.Errorf("%d failures still stored", c)
	}
}

// An event that could not be dispatched has no queue: a retry publishes it.
func TestRetryFailedPublishesEventsWithoutQueue(t *testing.T) {
	t.Parallel()
	tr := bus.NewMemoryTransport()
	if err := tr.Provision(ctxT(t), bus.Topology{Queue: "audit", Events: []string{"orders.Shipped"}}); err != nil {
		t.Fatal(err)
	}
	mem := bus.NewMemoryPersistence()
	env := failedEnvelope("ev-1", "broker down", "", time.Now())
	env.Kind, env.Type, env.Destination = bus.KindEvent, "orders.Shipped", ""
	delete(env.Headers, bus.HeaderFailureQueue)
	if err := mem.StoreFailed(ctxT(t), []bus.FailedMessage{bus.FailedFromEnvelope(env, time.Now())}); err != nil {
		t.Fatal(err)
	}
	if n, err := bus.RetryFailed(ctxT(t), tr, mem, []string{"ev-1"}); err != nil || n != 1 {
		t.Fatalf("RetryFailed = %d, %v", n, err)
	}
	if l := tr.Len("audit"); l != 1 {
		t.Errorf("subscriber queue holds %d, want the published event", l)
	}
}
