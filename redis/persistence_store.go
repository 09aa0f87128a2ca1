package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
)

// StoreOutgoing stores the rows whose IDs are not stored yet, with one
// script per partition and up to 500 rows (pipelined; see run). A row with
// a Delay is due that long after the server's now, read once per call (on
// the node of the first partition, see StoreNow), so rows of one call keep
// the order of their delays whatever partitions they fall in; the others
// are due at their DueAt. A row with an empty ID or no envelope fails the
// call with ErrInvalidRow before anything is stored.
//
// The rows of one partition's script are stored together, all or none;
// the rows of one call, spread over partitions (and nodes), are not: a call
// that fails part way (a lost connection, a node down) may leave some
// stored. Calling again with the same rows stores the rest, each once; a
// batch sent with bus.SendBatch is retryable that way when its messages
// have fixed IDs (bus.WithMessageID).
//
// When it stored a row it publishes the earliest claimable time on the
// due channel (WatchDue).
func (p *Persistence) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	for i := range msgs {
		if msgs[i].ID == "" || msgs[i].Envelope == nil {
			return fmt.Errorf("redis: store row %d (%q): %w: empty ID or no envelope", i, msgs[i].ID, ErrInvalidRow)
		}
	}
	var serverNow int64 // ns
	for i := range msgs {
		if msgs[i].Delay > 0 {
			now, err := p.StoreNow(ctx)
			if err != nil {
				return fmt.Errorf("redis: store: %w", err)
			}
			serverNow = now.UnixNano()
			break
		}
	}
	byPart := make([][]any, len(p.tags))
	var calls []call
	flush := func(part int) {
		if len(byPart[part]) > 0 {
			calls = append(calls, call{part: part, script: storeScript, keys: []string{p.tags[part]}, args: byPart[part]})
			byPart[part] = nil
		}
	}
	for i := range msgs {
		m := &msgs[i]
		part := p.partitionOf(m.ID)
		var dueNs int64
		switch {
		case m.Delay > 0:
			dueNs = serverNow + int64(m.Delay)
		case !m.DueAt.IsZero() && m.DueAt.UnixNano() > 0:
			dueNs = m.DueAt.UnixNano()
		}
		byPart[part] = append(byPart[part], m.ID, m.Envelope, int(m.Kind), m.Type, m.Transport,
			strconv.FormatInt(dueNs, 10), strconv.FormatInt(ceilMicros(dueNs), 10))
		if len(byPart[part]) >= storeChunk*storeArgs {
			flush(part)
		}
	}
	for part := range byPart {
		flush(part)
	}
	cmds, err := p.run(ctx, calls)
	if err != nil {
		return fmt.Errorf("redis: store: %w", err)
	}
	earliest := int64(-1)
	for _, c := range cmds {
		s, err := c.Text()
		if err != nil {
			return fmt.Errorf("redis: store: %w", err)
		}
		if us, _ := strconv.ParseInt(s, 10, 64); us >= 0 && (earliest < 0 || us < earliest) {
			earliest = us
		}
	}
	if earliest >= 0 {
		if err := p.client.Publish(ctx, p.channel, strconv.FormatInt(earliest, 10)).Err(); err != nil {
			p.opts.Logger.WarnContext(ctx, "redis: publishing the due time failed; other dispatchers find the rows at their next poll", "error", err)
		}
	}
	return nil
}

// storeArgs is the number of script arguments per row of storeScript.
const storeArgs = 7

// CancelOutgoing removes a row that no running lease holds (never claimed,
// released, failed, or its lease lapsed on the server's clock) and reports
// whether it did.
func (p *Persistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	part := p.partitionOf(id)
	cmds, err := p.run(ctx, []call{{part: part, script: cancelScript, keys: []string{p.tags[part]}, args: []any{id}}})
	if err != nil {
		return false, fmt.Errorf("redis: cancel: %w", err)
	}
	n, err := cmds[0].Int()
	if err != nil {
		return false, fmt.Errorf("redis: cancel: %w", err)
	}
	return n == 1, nil
}

// NextDueOutgoing returns when the earliest row of transport (or of none)
// becomes claimable: the first entry of each partition's sorted sets,
// read in one pipeline. While some nodes of a cluster do not answer, it
// returns the earliest of the partitions that did; when none did, the
// error.
func (p *Persistence) NextDueOutgoing(ctx context.Context, transport string) (time.Time, bool, error) {
	pipe := p.client.Pipeline()
	var cmds []*goredis.ZSliceCmd
	for i := range p.tags {
		for _, key := range p.claimKeys(i, transport) {
			cmds = append(cmds, pipe.ZRangeWithScores(ctx, key, 0, 0))
			if transport == "" {
				break
			}
		}
	}
	_, err := pipe.Exec(ctx)
	answered := false
	for _, c := range cmds {
		answered = answered || c.Err() == nil
	}
	if err != nil && !answered {
		return time.Time{}, false, fmt.Errorf("redis: next due: %w", err)
	}
	// A node that does not answer (down, failing over) leaves out its
	// partitions; the dispatcher polls again.
	found := false
	var next float64
	for _, c := range cmds {
		if c.Err() != nil {
			continue
		}
		for _, z := range c.Val() {
			if !found || z.Score < next {
				next, found = z.Score, true
			}
		}
	}
	if !found {
		return time.Time{}, false, nil
	}
	return time.UnixMicro(int64(next)), true, nil
}

// ceilMicros rounds nanoseconds up to microseconds: a row is claimable no
// sooner than it is due.
func ceilMicros(ns int64) int64 {
	us := ns / 1000
	if ns%1000 > 0 {
		us++
	}
	return us
}

// parseMicros reads a time in microseconds as a script returned it.
func parseMicros(s string) (time.Time, error) {
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return time.Time{}, fmt.Errorf("read time %q: %w", s, err)
		}
		us = int64(f)
	}
	return time.UnixMicro(us), nil
}
