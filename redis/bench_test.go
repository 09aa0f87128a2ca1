package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
)

// BenchmarkSendToHandler measures send→handler throughput: 8 or 64
// goroutines send 1 KiB commands (each Send waits for its XADD) while
// Receive handles them with Concurrency 8. Reported as msgs/s.
//
//	go test -run '^$' -bench SendToHandler -benchtime 50000x
func BenchmarkSendToHandler(b *testing.B) {
	for _, senders := range []int{8, 64} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) { benchSendToHandler(b, senders) })
	}
}

func benchSendToHandler(b *testing.B, senders int) {
	rdb := connect(b)
	tr := mustNew(b, rdb, namespace(b, rdb))
	const queue = "bench"
	if err := tr.Provision(drivertest.Ctx(b, 0), bus.Topology{Queue: queue}); err != nil {
		b.Fatal(err)
	}
	handled := drivertest.CountReceived(b, tr, queue, int64(b.N))
	body := make([]byte, 1024)
	b.SetBytes(1024)
	bustest.MeasureThroughput(b, senders, handled, func(i int64) error {
		env := command(queue, int(i))
		env.Body = body
		return tr.Send(context.Background(), queue, env)
	})
}

// BenchmarkRawClientCeiling measures what go-redis alone reaches on this
// server doing the transport's work: `senders` goroutines each XADD a
// 1 KiB message and wait for the reply before the next; one consumer reads
// its group with XREADGROUP (COUNT 64) and acknowledges and deletes
// each batch (XACK and XDEL in MULTI). No Postbus code runs, so the figure
// is the ceiling BenchmarkSendToHandler and the bench program are compared
// with in docs/transports/redis.md.
//
//	go test -run '^$' -bench RawClientCeiling -benchtime 50000x
func BenchmarkRawClientCeiling(b *testing.B) {
	for _, senders := range []int{8, 64} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) { benchRawClient(b, senders) })
	}
}

func benchRawClient(b *testing.B, senders int) {
	rdb := connect(b)
	opts := namespace(b, rdb)
	ctx := drivertest.Ctx(b, 0)
	key, group := opts.Prefix+":q:raw", "raw"
	if err := rdb.XGroupCreateMkStream(ctx, key, group, "0").Err(); err != nil {
		b.Fatal(err)
	}
	handled := bustest.NewCountdown(int64(b.N))
	stop, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for stop.Err() == nil {
			res, err := rdb.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: 64, Block: 100 * time.Millisecond}).Result()
			if err != nil {
				continue
			}
			ids := make([]string, 0, 64)
			for _, m := range res[0].Messages {
				_ = m.Values["e"]
				ids = append(ids, m.ID)
			}
			_, _ = rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
				p.XAck(ctx, key, group, ids...)
				p.XDel(ctx, key, ids...)
				return nil
			})
			for range ids {
				handled.Done()
			}
		}
	}()
	body := make([]byte, 1024)
	b.SetBytes(1024)
	bustest.MeasureThroughput(b, senders, handled, func(int64) error {
		return rdb.XAdd(context.Background(), &goredis.XAddArgs{Stream: key, Values: []any{"e", body}}).Err()
	})
	cancel()
	<-done
}
