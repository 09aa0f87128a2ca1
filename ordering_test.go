package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// Step is the message of the ordering tests: N is its position in the
// sending order.
type Step struct{ N int }

// sendLog records what reaches the transport, in the order it arrives.
type sendLog struct {
	*bus.MemoryTransport
	mu   sync.Mutex
	got  []int
	fail map[int]int // failures left per N
}

func (l *sendLog) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	var s Step
	if env.Type == "bus_test.Step" || env.OrderingKey != "" {
		_, _ = fmt.Sscanf(string(env.Body), `{"N":%d}`, &s.N)
		l.mu.Lock()
		if l.fail[s.N] > 0 {
			l.fail[s.N]--
			l.mu.Unlock()
			return errors.New("broker hiccup")
		}
		l.got = append(l.got, s.N)
		l.mu.Unlock()
	}
	return l.MemoryTransport.Send(ctx, queue, env)
}

func (l *sendLog) arrived() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

func (l *sendLog) waitFor(t *testing.T, n int) []int {
	t.Helper()
	drivertest.Eventually(t, 30*time.Second, func() bool { return len(l.arrived()) >= n }, "%d keyed messages at the transport", n)
	return l.arrived()
}

// batchLog is a sendLog that is a BatchTransport: the dispatcher hands it
// claimed rows in pipelined calls.
type batchLog struct{ *sendLog }

func (l batchLog) SendBatch(ctx context.Context, batch []bus.Outbound) []error {
	errs := make([]error, len(batch))
	for i, o := range batch {
		errs[i] = l.Send(ctx, o.Queue, o.Envelope)
	}
	return errs
}

func inOrder(n int) []int {
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	return want
}

// The rows of one SendBatch share a due time and were claimed by ID, then
// handed over concurrently: 20 sends with one ordering key reached the
// transport shuffled. They now arrive in the order they were sent, with
// generated IDs and with IDs of the caller's that sort the other way, on a
// transport with and without batches, with Dispatcher.Concurrency 1 and
// the default.
func TestSendBatchKeepsOrderingKeyOrder(t *testing.T) {
	t.Parallel()
	for _, batchTransport := range []bool{false, true} {
		for _, conc := range []int{1, 0} {
			for _, ownIDs := range []bool{false, true} {
				name := fmt.Sprintf("batchTransport=%v/concurrency=%d/ownIDs=%v", batchTransport, conc, ownIDs)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					log := &sendLog{MemoryTransport: bus.NewMemoryTransport()}
					var tr bus.Transport = log
					if batchTransport {
						tr = batchLog{log}
					}
					b := bustest.StartBus(t, bus.Config{Endpoint: "steps", Transport: tr, Persistence: bus.NewMemoryPersistence(),
						Logger: quiet(), Dispatcher: bus.DispatcherConfig{Concurrency: conc}}, nil)
					const n = 20
					var batch bus.Batch
					for i := range n {
						opts := []bus.Option{bus.To("sink"), bus.WithOrderingKey("order-7")}
						if ownIDs {
							opts = append(opts, bus.WithMessageID(fmt.Sprintf("step-%02d", n-i)))
						}
						batch.Send(Step{N: i}, opts...)
					}
					if err := b.SendBatch(ctxT(t), &batch); err != nil {
						t.Fatal(err)
					}
					if got := log.waitFor(t, n); !slices.Equal(got, inOrder(n)) {
						t.Errorf("arrived %v, want the sending order", got)
					}
				})
			}
		}
	}
}

// A keyed row whose hand-over fails is retried before the later rows of
// its key: they wait behind it, and arrive after it in sending order.
func TestFailedKeyedRowIsNotOvertaken(t *testing.T) {
	t.Parallel()
	for _, batchTransport := range []bool{false, true} {
		t.Run(fmt.Sprintf("batchTransport=%v", batchTransport), func(t *testing.T) {
			t.Parallel()
			log := &sendLog{MemoryTransport: bus.NewMemoryTransport(), fail: map[int]int{3: 2}}
			var tr bus.Transport = log
			if batchTransport {
				tr = batchLog{log}
			}
			b := bustest.StartBus(t, bus.Config{Endpoint: "steps", Transport: tr, Persistence: bus.NewMemoryPersistence(), Logger: quiet(),
				Dispatcher: bus.DispatcherConfig{RetryBackoff: time.Millisecond, PollInterval: 10 * time.Millisecond,
					MaximumRecoveryFailuresPerSecond: 1000}}, nil)
			const n = 10
			var batch bus.Batch
			for i := range n {
				batch.Send(Step{N: i}, bus.To("sink"), bus.WithOrderingKey("k"))
			}
			if err := b.SendBatch(ctxT(t), &batch); err != nil {
				t.Fatal(err)
			}
			if got := log.waitFor(t, n); !slices.Equal(got, inOrder(n)) {
				t.Errorf("arrived %v, want the sending order despite the failures of 3", got)
			}
		})
	}
}

// A failed keyed row also holds back the rows of its key that the
// dispatcher claims in later batches: they fall due while it waits for its
// retry, and arrive after it, with and without look-ahead.
func TestFailedKeyedRowIsNotOvertakenByLaterBatches(t *testing.T) {
	t.Parallel()
	for _, lookAhead := range []time.Duration{0, -1} {
		t.Run(fmt.Sprintf("lookAhead=%v", lookAhead), func(t *testing.T) {
			t.Parallel()
			log := &sendLog{MemoryTransport: bus.NewMemoryTransport(), fail: map[int]int{3: 2}}
			b := bustest.StartBus(t, bus.Config{Endpoint: "steps", Transport: log, Persistence: bus.NewMemoryPersistence(), Logger: quiet(),
				Dispatcher: bus.DispatcherConfig{RetryBackoff: 500 * time.Millisecond, PollInterval: 10 * time.Millisecond,
					MaximumRecoveryFailuresPerSecond: 1000, LookAhead: lookAhead}}, nil)
			const n = 10
			var batch bus.Batch
			for i := range n {
				opts := []bus.Option{bus.To("sink"), bus.WithOrderingKey("k")}
				if i >= 5 { // due while 3 waits for its retry
					opts = append(opts, bus.DeliverAfter(300*time.Millisecond))
				}
				batch.Send(Step{N: i}, opts...)
			}
			if err := b.SendBatch(ctxT(t), &batch); err != nil {
				t.Fatal(err)
			}
			if got := log.waitFor(t, n); !slices.Equal(got, inOrder(n)) {
				t.Errorf("arrived %v, want the sending order despite the failures of 3", got)
			}
		})
	}
}
