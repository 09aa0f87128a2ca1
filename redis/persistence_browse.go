package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/postbus/bus"
)

var _ bus.ScheduledBrowser = (*Persistence)(nil)

// defaultListLimit is the page size of ListScheduled when the query has none.
const defaultListLimit = 100

// ListScheduled returns the rows q selects, earliest due first, then by
// ID: each partition's due index (or that of q.Type) is read from the
// query's bounds, up to the limit, and the first rows of them all are
// kept.
func (p *Persistence) ListScheduled(ctx context.Context, q bus.ScheduledQuery) ([]bus.OutgoingMessage, error) {
	limit := cmp.Or(max(q.Limit, 0), defaultListLimit)
	from := "-inf"
	if !q.DueAfter.IsZero() {
		from = strconv.FormatInt(ceilMicros(max(q.DueAfter.UnixNano(), 0)), 10)
	}
	if !q.AfterDue.IsZero() {
		if after := ceilMicros(max(q.AfterDue.UnixNano(), 0)); from == "-inf" || after > mustInt(from) {
			from = strconv.FormatInt(after, 10)
		}
	}
	before := "+inf"
	if !q.DueBefore.IsZero() {
		before = strconv.FormatInt(ceilMicros(max(q.DueBefore.UnixNano(), 0)), 10)
	}
	afterDue := ""
	if !q.AfterDue.IsZero() {
		afterDue = strconv.FormatInt(max(q.AfterDue.UnixNano(), 0), 10)
	}
	calls := make([]call, len(p.tags))
	for i, tag := range p.tags {
		index := tag + ":du"
		if q.Type != "" {
			index = tag + ":dt:" + q.Type
		}
		calls[i] = call{part: i, script: browseListScript, keys: []string{tag, index},
			args: []any{from, before, afterDue, q.AfterID, limit}}
	}
	cmds, err := p.runPipelined(ctx, calls)
	if err != nil {
		return nil, fmt.Errorf("redis: list scheduled: %w", err)
	}
	out, err := records(cmds, 11, browsedRow)
	if err != nil {
		return nil, fmt.Errorf("redis: list scheduled: %w", err)
	}
	slices.SortFunc(out, func(a, b bus.OutgoingMessage) int {
		return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(len(out), limit)], nil
}

// GetScheduled returns the row with the ID.
func (p *Persistence) GetScheduled(ctx context.Context, id string) (bus.OutgoingMessage, bool, error) {
	part := p.partitionOf(id)
	cmds, err := p.runPipelined(ctx, []call{{part: part, script: browseGetScript, keys: []string{p.tags[part]}, args: []any{id}}})
	if err != nil {
		return bus.OutgoingMessage{}, false, fmt.Errorf("redis: get scheduled: %w", err)
	}
	vals, err := texts(cmds[0])
	if err != nil {
		return bus.OutgoingMessage{}, false, fmt.Errorf("redis: get scheduled: %w", err)
	}
	if len(vals) < 11 {
		return bus.OutgoingMessage{}, false, nil
	}
	return browsedRow(vals), true, nil
}

// StatsScheduled counts the rows (exactly: each partition's due index
// knows its size) and the rows claimable at the server's now. The now
// argument is ignored.
func (p *Persistence) StatsScheduled(ctx context.Context, _ time.Time) (bus.ScheduledStats, error) {
	calls := make([]call, len(p.tags))
	for i, tag := range p.tags {
		calls[i] = call{part: i, script: browseStatsScript, keys: []string{tag}, args: []any{bus.OverdueCap}}
	}
	cmds, err := p.runPipelined(ctx, calls)
	if err != nil {
		return bus.ScheduledStats{}, fmt.Errorf("redis: stats: %w", err)
	}
	var st bus.ScheduledStats
	best := int64(-1)
	for _, c := range cmds {
		vals, err := texts(c)
		if err != nil || len(vals) < 4 {
			return bus.ScheduledStats{}, fmt.Errorf("redis: stats: %w", err)
		}
		count, _ := strconv.ParseInt(vals[0], 10, 64)
		overdue, _ := strconv.ParseInt(vals[1], 10, 64)
		st.Count += count
		st.Overdue = min(st.Overdue+overdue, bus.OverdueCap)
		if vals[2] != "" {
			if b, _ := strconv.ParseInt(vals[2], 10, 64); best < 0 || b < best {
				best = b
				st.OldestOverdue = fromNsText(vals[3])
			}
		}
	}
	return st, nil
}

// DueHistogram counts the rows due in each of n buckets of width from
// from, with one script per partition.
func (p *Persistence) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error) {
	if err := bus.CheckHistogram(width, n); err != nil {
		return nil, err
	}
	calls := make([]call, len(p.tags))
	for i, tag := range p.tags {
		calls[i] = call{part: i, script: browseHistogramScript, keys: []string{tag},
			args: []any{ceilMicros(max(from.UnixNano(), 0)), max(width.Microseconds(), 1), n}}
	}
	cmds, err := p.runPipelined(ctx, calls)
	if err != nil {
		return nil, fmt.Errorf("redis: histogram: %w", err)
	}
	out := make([]int64, n)
	for _, c := range cmds {
		vals, err := c.Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("redis: histogram: %w", err)
		}
		for i := range min(len(vals), n) {
			out[i] += vals[i]
		}
	}
	return out, nil
}

// SendNow makes a row that no running lease holds due at the server's now.
func (p *Persistence) SendNow(ctx context.Context, id string) (bool, error) {
	part := p.partitionOf(id)
	cmds, err := p.run(ctx, []call{{part: part, script: sendNowScript, keys: []string{p.tags[part]}, args: []any{id}}})
	if err != nil {
		return false, fmt.Errorf("redis: send now: %w", err)
	}
	n, err := cmds[0].Int()
	if err != nil {
		return false, fmt.Errorf("redis: send now: %w", err)
	}
	if n == 1 {
		if due, err := p.StoreNow(ctx); err == nil {
			_ = p.client.Publish(ctx, p.channel, strconv.FormatInt(due.UnixMicro(), 10)).Err()
		}
	}
	return n == 1, nil
}

// browsedRow reads the 11 fields of a row a browser script returned.
func browsedRow(f []string) bus.OutgoingMessage {
	kind, _ := strconv.Atoi(f[2])
	failures, _ := strconv.Atoi(f[6])
	m := bus.OutgoingMessage{
		ID: f[0], Envelope: []byte(f[1]), Kind: bus.Kind(kind), Type: f[3], Transport: f[4],
		DueAt: fromNsText(f[5]), Failures: failures, LastError: f[7], Token: f[10],
	}
	if us, err := strconv.ParseInt(f[8], 10, 64); err == nil {
		m.AvailableAt = time.UnixMicro(us)
	}
	if us, err := strconv.ParseInt(f[9], 10, 64); err == nil && m.Token != "" {
		m.LeaseUntil = time.UnixMicro(us)
	}
	return m
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
