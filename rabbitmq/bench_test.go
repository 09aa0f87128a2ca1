package rabbitmq_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/rabbitmq"
)

// BenchmarkSendToHandler measures send→handler throughput through the
// broker: 1 KiB bodies, confirmed persistent sends from `senders`
// goroutines, one Receive with concurrency 8 (prefetch 32, the default of
// four times the concurrency, or larger), on a quorum or classic queue. It
// reports msgs/s and the p50/p99 latency from Send to handler.
//
//	go test -run '^$' -bench SendToHandler -benchtime 20000x
func BenchmarkSendToHandler(b *testing.B) {
	for _, qt := range []string{rabbitmq.QueueTypeQuorum, rabbitmq.QueueTypeClassic} {
		for _, c := range []struct{ senders, prefetch int }{{8, 0}, {32, 0}, {32, 64}, {64, 256}} {
			b.Run(fmt.Sprintf("queue=%s/senders=%d/concurrency=8/prefetch=%d", qt, c.senders, cmp.Or(c.prefetch, 4*8)), func(b *testing.B) {
				benchSendToHandler(b, qt, c.senders, 8, c.prefetch)
			})
		}
	}
}

func benchSendToHandler(b *testing.B, queueType string, senders, concurrency, prefetch int) {
	e := newEnv(b)
	opts := e.options()
	opts.QueueType = queueType
	opts.Prefetch = prefetch
	tr := e.transport(opts)
	q := e.queue("bench")
	e.provision(tr, bus.Topology{Queue: q})
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte('a' + i%26)
	}

	n := b.N
	latencies := make([]time.Duration, n)
	handled := bustest.NewCountdown(int64(n))
	receive(b, tr, q, concurrency, func(_ context.Context, env *bus.Envelope) error {
		var i int
		fmt.Sscan(env.Header("i"), &i)
		latencies[i] = time.Since(env.SentAt)
		handled.Done()
		return nil
	})

	bustest.MeasureThroughput(b, senders, handled, func(i int64) error {
		env := newEnvelope("bench.Msg", body)
		env.Headers = map[string]string{"i": fmt.Sprint(i)}
		return tr.Send(context.Background(), q, env)
	})
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[n/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(latencies[n*99/100].Microseconds())/1000, "p99-ms")
}
