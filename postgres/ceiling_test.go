package postgres_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postbus/bus/postgres"
)

// BenchmarkRawInsertCeiling measures what pgx alone reaches on this server
// with at most 64 rows waiting for their commit, the most that 64 senders
// can have: `conns` goroutines each insert `rows` rows per statement, the
// statement the persistence uses, into a table made by Setup, and start the
// next statement only after the commit. No batcher and no bus run, so the
// figure is the ceiling that BenchmarkStoreOutgoingConcurrent and the bench
// program's schedule workload are compared with in docs/benchmarks-log.md.
//
//	go test -run '^$' -bench RawInsertCeiling -benchtime 100000x
func BenchmarkRawInsertCeiling(b *testing.B) {
	for _, shape := range []struct{ conns, rows int }{{1, 64}, {2, 32}, {4, 16}} {
		b.Run(fmt.Sprintf("conns=%d/rows=%d", shape.conns, shape.rows), func(b *testing.B) {
			benchRawInsert(b, shape.conns, shape.rows)
		})
	}
}

func benchRawInsert(b *testing.B, conns, rows int) {
	pool := newPool(b, int32(conns))
	schema := freshSchema(b, pool)
	newStore(b, pool, postgres.Options{Schema: schema})
	insert := postgres.InsertSQL(pgx.Identifier{schema, postgres.DefaultTable}.Sanitize())
	env := make([]byte, 250)
	due := time.Now().Add(time.Hour)
	n := int64(b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	ctx := b.Context()
	b.ResetTimer()
	start := time.Now()
	for range conns {
		wg.Go(func() {
			ids := make([]string, rows)
			kinds := make([]int16, rows)
			envs := make([][]byte, rows)
			dues := make([]time.Time, rows)
			delays := make([]int64, rows)
			transports := make([]string, rows)
			for first := next.Add(int64(rows)) - int64(rows); first < n; first = next.Add(int64(rows)) - int64(rows) {
				for i := range rows {
					ids[i], envs[i], dues[i], transports[i] = fmt.Sprintf("raw-%012d", first+int64(i)), env, due, "bench"
				}
				if _, err := pool.Exec(ctx, insert, ids, kinds, envs, dues, delays, transports); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "rows/s")
}
