package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/redis"
)

// BenchmarkPersistence runs the shared scheduled-store benchmark on the
// local server.
func BenchmarkPersistence(b *testing.B) {
	rdb := connect(b)
	bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore {
		return newPersistence(b, rdb, redis.PersistenceOptions{})
	})
}

// BenchmarkPersistenceBulk stores batches of 1,000 rows (Bus.SendBatch).
func BenchmarkPersistenceBulk(b *testing.B) {
	rdb := connect(b)
	bustest.BenchmarkStoreBulk(b, func(b *testing.B) bus.ScheduledStore {
		return newPersistence(b, rdb, redis.PersistenceOptions{})
	}, 1000)
}

// BenchmarkPersistenceMemoryPerRow reports the server memory a pending row
// takes (used_memory before and after storing 50,000 rows with an
// envelope of about 400 bytes, the size of a small message's), on the
// local server: other clients' keys add noise, so run it on a quiet one.
func BenchmarkPersistenceMemoryPerRow(b *testing.B) {
	rdb := connect(b)
	ctx := context.Background()
	const n = 50_000
	env := []byte(strings.Repeat("e", 400))
	for range b.N {
		b.StopTimer()
		p := newPersistence(b, rdb, redis.PersistenceOptions{})
		before := usedMemory(b, rdb)
		b.StartTimer()
		due := time.Now().Add(time.Hour)
		for i := 0; i < n; i += 1000 {
			msgs := make([]bus.OutgoingMessage, 1000)
			for j := range msgs {
				id := fmt.Sprintf("019%013d-%06d", time.Now().UnixNano()%1e13, i+j)
				msgs[j] = bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: "app.Reminder", Envelope: env,
					DueAt: due.Add(time.Duration(i+j) * time.Millisecond), Transport: "rabbitmq"}
			}
			if err := p.StoreOutgoing(ctx, msgs); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(usedMemory(b, rdb)-before)/n, "bytes/row")
	}
}

func usedMemory(b *testing.B, rdb *goredis.Client) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// BenchmarkClusterPersistence runs the shared scheduled-store benchmark on
// the test cluster (3 masters, 3 replicas on this machine).
func BenchmarkClusterPersistence(b *testing.B) {
	rdb := connectCluster(b)
	bustest.BenchmarkScheduledStore(b, func(b *testing.B) bus.ScheduledStore {
		return newPersistence(b, rdb, redis.PersistenceOptions{})
	})
}
