package redis

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
)

var _ bus.FailedStore = (*Persistence)(nil)

// StoreFailed stores the failures, with one script per partition (see
// bus.FailedStore): a message already stored counts a new failure, and
// takes the new one's fields when it is the latest. Like StoreOutgoing,
// the messages of one partition are stored together, those of a call are
// not.
func (p *Persistence) StoreFailed(ctx context.Context, msgs []bus.FailedMessage) error {
	byPart := make([][]any, len(p.tags))
	var calls []call
	flush := func(part int) {
		if len(byPart[part]) > 0 {
			calls = append(calls, call{part: part, script: failedStoreScript, keys: []string{p.tags[part]}, args: byPart[part]})
			byPart[part] = nil
		}
	}
	for i := range msgs {
		m := &msgs[i]
		if m.ID == "" {
			return fmt.Errorf("redis: store failed message %d: %w: empty ID", i, ErrInvalidRow)
		}
		last := max(m.LastFailed.UnixNano(), 0)
		first := last
		if !m.FirstFailed.IsZero() {
			first = max(m.FirstFailed.UnixNano(), 0)
		}
		part := p.partitionOf(m.ID)
		byPart[part] = append(byPart[part], m.ID, m.Type, m.Endpoint, m.Queue, m.Kind, m.Reason, m.Group,
			m.Attempts, max(m.Failures, 1), strconv.FormatInt(first, 10), strconv.FormatInt(last, 10), m.Envelope)
		if len(byPart[part]) >= storeChunk*12 {
			flush(part)
		}
	}
	for part := range byPart {
		flush(part)
	}
	if _, err := p.run(ctx, calls); err != nil {
		return fmt.Errorf("redis: store failed: %w", err)
	}
	return nil
}

// ListFailed returns the messages q selects, most recent failure first,
// then by ID (descending): each partition reads the index of the query's
// narrowest filter (the ID, the group, the type, the endpoint, or all)
// from the keyset on.
func (p *Persistence) ListFailed(ctx context.Context, q bus.FailedQuery) ([]bus.FailedMessage, error) {
	limit := cmp.Or(max(q.Limit, 0), defaultListLimit)
	cmds, err := p.runPipelined(ctx, p.scanCalls(q, "list", limit, true))
	if err != nil {
		return nil, fmt.Errorf("redis: list failed: %w", err)
	}
	out, err := records(cmds, 12, failedOf)
	if err != nil {
		return nil, fmt.Errorf("redis: list failed: %w", err)
	}
	slices.SortFunc(out, func(a, b bus.FailedMessage) int {
		return cmp.Or(b.LastFailed.Compare(a.LastFailed), cmp.Compare(b.ID, a.ID))
	})
	return out[:min(len(out), limit)], nil
}

// CountFailed counts the messages q selects: the size of each partition's
// index when one filter (or none) is set, otherwise a scan of the
// narrowest index.
func (p *Persistence) CountFailed(ctx context.Context, q bus.FailedQuery) (int64, error) {
	q.BeforeFailed, q.BeforeID, q.Limit = time.Time{}, "", 0
	filters := 0
	for _, f := range []string{q.Group, q.Type, q.Endpoint} {
		if f != "" {
			filters++
		}
	}
	if q.Search == "" && filters <= 1 {
		// The index of the one filter holds exactly the messages selected.
		pipe := p.client.Pipeline()
		calls := p.scanCalls(q, "count", 0, false)
		cards := make([]*goredis.IntCmd, len(calls))
		for i, c := range calls {
			cards[i] = pipe.ZCard(ctx, c.keys[1])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("redis: count failed: %w", err)
		}
		var n int64
		for _, c := range cards {
			n += c.Val()
		}
		return n, nil
	}
	cmds, err := p.runPipelined(ctx, p.scanCalls(q, "count", 0, false))
	if err != nil {
		return 0, fmt.Errorf("redis: count failed: %w", err)
	}
	var n int64
	for _, c := range cmds {
		k, err := c.Int64()
		if err != nil {
			return 0, fmt.Errorf("redis: count failed: %w", err)
		}
		n += k
	}
	return n, nil
}

// scanCalls returns the failedScanScript call of each partition for q.
func (p *Persistence) scanCalls(q bus.FailedQuery, mode string, limit int, keyset bool) []call {
	parts := make([]int, 0, len(p.tags))
	if q.Search != "" {
		parts = append(parts, p.partitionOf(q.Search))
	} else {
		for i := range p.tags {
			parts = append(parts, i)
		}
	}
	before, beforeNs := "+inf", ""
	if keyset && !q.BeforeFailed.IsZero() {
		ns := max(q.BeforeFailed.UnixNano(), 0)
		before, beforeNs = strconv.FormatInt(ns/1000, 10), strconv.FormatInt(ns, 10)
	}
	calls := make([]call, 0, len(parts))
	for _, i := range parts {
		tag := p.tags[i]
		index := tag + ":fl"
		switch {
		case q.Group != "":
			index = tag + ":fg:" + q.Group
		case q.Type != "":
			index = tag + ":ft:" + q.Type
		case q.Endpoint != "":
			index = tag + ":fe:" + q.Endpoint
		}
		calls = append(calls, call{part: i, script: failedScanScript, keys: []string{tag, index},
			args: []any{mode, limit, before, beforeNs, q.BeforeID, q.Group, q.Type, q.Endpoint, q.Search}})
	}
	return calls
}

// GetFailed returns the message with the ID.
func (p *Persistence) GetFailed(ctx context.Context, id string) (bus.FailedMessage, bool, error) {
	part := p.partitionOf(id)
	cmds, err := p.runPipelined(ctx, []call{{part: part, script: failedGetScript, keys: []string{p.tags[part]}, args: []any{id}}})
	if err != nil {
		return bus.FailedMessage{}, false, fmt.Errorf("redis: get failed: %w", err)
	}
	vals, err := texts(cmds[0])
	if err != nil {
		return bus.FailedMessage{}, false, fmt.Errorf("redis: get failed: %w", err)
	}
	if len(vals) < 12 {
		return bus.FailedMessage{}, false, nil
	}
	return failedOf(vals), true, nil
}

// FailedGroups returns up to limit groups (0: 100), largest first, then
// most recent failure first, then by Group: each partition summarises its
// groups, and the summaries are added up.
func (p *Persistence) FailedGroups(ctx context.Context, limit int) ([]bus.FailedGroup, error) {
	calls := make([]call, len(p.tags))
	for i, tag := range p.tags {
		calls[i] = call{part: i, script: failedGroupsScript, keys: []string{tag}}
	}
	cmds, err := p.runPipelined(ctx, calls) // it drops empty groups from the set: no WAIT
	if err != nil {
		return nil, fmt.Errorf("redis: failed groups: %w", err)
	}
	groups := map[string]*bus.FailedGroup{}
	for _, c := range cmds {
		vals, err := texts(c)
		if err != nil {
			return nil, fmt.Errorf("redis: failed groups: %w", err)
		}
		for i := 0; i+6 < len(vals); i += 7 {
			count, _ := strconv.ParseInt(vals[i+1], 10, 64)
			first, last := fromNsText(vals[i+5]), fromNsText(vals[i+6])
			g := groups[vals[i]]
			if g == nil {
				g = &bus.FailedGroup{Group: vals[i], Type: vals[i+2], Endpoint: vals[i+3], Reason: bus.NormalizeReason(vals[i+4]),
					FirstFailed: first, LastFailed: last}
				groups[vals[i]] = g
			}
			g.Count += count
			if first.Before(g.FirstFailed) {
				g.FirstFailed = first
			}
			if last.After(g.LastFailed) {
				g.LastFailed = last
			}
		}
	}
	out := make([]bus.FailedGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b bus.FailedGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastFailed.Compare(a.LastFailed), cmp.Compare(a.Group, b.Group))
	})
	return out[:min(len(out), cmp.Or(max(limit, 0), defaultListLimit))], nil
}

// DeleteFailed deletes the messages with the IDs and returns how many it
// deleted.
func (p *Persistence) DeleteFailed(ctx context.Context, ids []string) (int, error) {
	byPart := map[int][]any{}
	for _, id := range ids {
		part := p.partitionOf(id)
		byPart[part] = append(byPart[part], id)
	}
	var calls []call
	for part, args := range byPart {
		calls = append(calls, call{part: part, script: failedDeleteScript, keys: []string{p.tags[part]}, args: args})
	}
	cmds, err := p.run(ctx, calls)
	n := 0
	for _, c := range cmds {
		if c == nil {
			continue
		}
		if k, err := c.Int(); err == nil {
			n += k
		}
	}
	if err != nil {
		return n, fmt.Errorf("redis: delete failed: %w", err)
	}
	return n, nil
}

// failedOf reads the 12 values of a failed message a script returned.
func failedOf(v []string) bus.FailedMessage {
	attempts, _ := strconv.Atoi(v[7])
	failures, _ := strconv.Atoi(v[8])
	return bus.FailedMessage{
		ID: v[0], Type: v[1], Endpoint: v[2], Queue: v[3], Kind: v[4], Reason: v[5], Group: v[6],
		Attempts: attempts, Failures: failures, FirstFailed: fromNsText(v[9]), LastFailed: fromNsText(v[10]),
		Envelope: []byte(v[11]),
	}
}
