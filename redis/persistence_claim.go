package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/postbus/bus"
)

// ClaimDueOutgoing leases up to limit rows of transport (or of none) that
// are claimable on the server's clock, earliest first, until server time +
// lease, under a new lease token. The now argument is ignored: each
// partition's script reads the time of its node (see ClaimOutgoingAhead).
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, transport string, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	c, err := p.claim(ctx, transport, 0, limit, lease)
	return c.Rows, err
}

// ClaimOutgoingAhead is ClaimDueOutgoing for the rows claimable by server
// time + ahead, leased until server time + ahead + lease
// (bus.AheadClaimer).
//
// A claim takes two pipelined round trips. The first reads, in every
// partition, the first limit rows claimable by then (a read, no lease);
// the claim keeps the earliest limit of them all, so rows come earliest
// first across partitions and no partition waits behind another. The
// second runs, on each partition with rows kept, one script that leases
// that partition's share: up to that many rows, none later than the last
// one kept. A row another claimer took meanwhile is not returned, so a
// claim may return fewer rows than were due.
//
// The claim's Now is the earliest of the times the leasing scripts read
// on their nodes, so that on a cluster whose nodes' clocks differ no row
// is handed over before its node's time.
func (p *Persistence) ClaimOutgoingAhead(ctx context.Context, transport string, _ time.Time, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	return p.claim(ctx, transport, max(ahead, 0), limit, lease)
}

// candidate is a row a claim's first round trip found claimable.
type candidate struct {
	part  int
	id    string
	score int64 // claimable from, µs
}

func (p *Persistence) claim(ctx context.Context, transport string, ahead time.Duration, limit int, lease time.Duration) (bus.AheadClaim, error) {
	if lease <= 0 {
		return bus.AheadClaim{}, &OptionsError{Field: "lease", Reason: "must be positive"}
	}
	if limit <= 0 {
		return bus.AheadClaim{}, nil
	}
	aheadUs := ahead.Microseconds()
	cands, now, err := p.peek(ctx, transport, aheadUs, limit)
	if err != nil || len(cands) == 0 {
		return bus.AheadClaim{Now: now}, err
	}
	share := map[int]int{}
	last := map[int]int64{}
	var order []int
	for _, c := range cands {
		if share[c.part] == 0 {
			order = append(order, c.part)
		}
		share[c.part]++
		last[c.part] = max(last[c.part], c.score)
	}
	token := rand.Text()
	leaseUs := max(ceilMicros(int64(lease)), 1)
	calls := make([]call, 0, len(order))
	for _, part := range order {
		keys := append([]string{p.tags[part]}, p.claimKeys(part, transport)...)
		calls = append(calls, call{part: part, script: claimScript, keys: keys,
			args: []any{aheadUs, leaseUs, share[part], strconv.FormatInt(last[part], 10), token}})
	}
	cmds, runErr := p.runPipelined(ctx, calls) // no WAIT: see runPipelined
	var out []bus.OutgoingMessage
	var claimNow time.Time
	for _, c := range cmds {
		if c == nil || c.Err() != nil {
			continue
		}
		vals, err := c.StringSlice()
		if err != nil || len(vals) == 0 {
			runErr = cmp.Or(runErr, fmt.Errorf("read claimed rows: %w", err))
			continue
		}
		n, err := parseMicros(vals[0])
		if err != nil {
			runErr = cmp.Or(runErr, err)
			continue
		}
		if claimNow.IsZero() || n.Before(claimNow) {
			claimNow = n
		}
		until := n.Add(time.Duration(aheadUs+leaseUs) * time.Microsecond)
		for i := 1; i+8 < len(vals); i += 9 {
			out = append(out, claimedRow(vals[i:i+9], until, token))
		}
	}
	if runErr != nil {
		if len(out) == 0 {
			return bus.AheadClaim{}, fmt.Errorf("redis: claim: %w", runErr)
		}
		// The leased rows are ours until the lease lapses: hand them over
		// rather than strand them; the next claim reports the error.
		p.opts.Logger.WarnContext(ctx, "redis: claim failed on some partitions; returning the rows already leased", "error", runErr, "claimed", len(out))
	}
	slices.SortFunc(out, func(a, b bus.OutgoingMessage) int {
		return cmp.Or(a.AvailableAt.Compare(b.AvailableAt), cmp.Compare(a.ID, b.ID))
	})
	if claimNow.IsZero() {
		claimNow = now
	}
	return bus.AheadClaim{Rows: out, Now: claimNow}, nil
}

// peek returns the earliest limit rows claimable by now + ahead over every
// partition, and the earliest now the partitions' nodes read.
func (p *Persistence) peek(ctx context.Context, transport string, aheadUs int64, limit int) ([]candidate, time.Time, error) {
	calls := make([]call, len(p.tags))
	for i := range p.tags {
		keys := p.claimKeys(i, transport)
		if transport == "" {
			keys[1] = keys[0]
		}
		calls[i] = call{part: i, script: peekScript, keys: keys, args: []any{aheadUs, limit}}
	}
	cmds, err := p.runPipelined(ctx, calls)
	if err != nil && !p.someAnswered(cmds) {
		return nil, time.Time{}, fmt.Errorf("redis: claim: %w", err)
	}
	if err != nil {
		// A node that does not answer (down, failing over) holds up only
		// its own partitions: the others are claimed from.
		p.opts.Logger.WarnContext(ctx, "redis: claim: some partitions did not answer; claiming from the others", "error", err)
	}
	var cands []candidate
	var now time.Time
	for i, c := range cmds {
		vals, err := c.StringSlice()
		if err != nil || len(vals) == 0 {
			continue
		}
		n, err := parseMicros(vals[0])
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("redis: claim: %w", err)
		}
		if now.IsZero() || n.Before(now) {
			now = n
		}
		for j := 1; j+1 < len(vals); j += 2 {
			s, err := parseMicros(vals[j+1])
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("redis: claim: %w", err)
			}
			cands = append(cands, candidate{part: i, id: vals[j], score: s.UnixMicro()})
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Or(cmp.Compare(a.score, b.score), cmp.Compare(a.id, b.id)) })
	return cands[:min(len(cands), limit)], now, nil
}

// claimedRow reads the 9 fields of a row claimScript returned.
func claimedRow(f []string, until time.Time, token string) bus.OutgoingMessage {
	kind, _ := strconv.Atoi(f[2])
	dueNs, _ := strconv.ParseInt(f[5], 10, 64)
	failures, _ := strconv.Atoi(f[6])
	avail, _ := parseMicros(f[8])
	return bus.OutgoingMessage{
		ID: f[0], Envelope: []byte(f[1]), Kind: bus.Kind(kind), Type: f[3], Transport: f[4],
		DueAt: time.Unix(0, dueNs), Failures: failures, LastError: f[7],
		AvailableAt: avail, LeaseUntil: until, Token: token,
	}
}

// DeleteOutgoing removes the claimed rows that their tokens still hold.
func (p *Persistence) DeleteOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	fs := make([]bus.OutgoingFailure, len(claims))
	for i, c := range claims {
		fs[i] = bus.OutgoingFailure{ID: c.ID, Token: c.Token}
	}
	return p.settle(ctx, "delete", fs)
}

// ReleaseOutgoing ends the leases of the claimed rows that their tokens
// still hold: each is claimable again when it was before the claim.
func (p *Persistence) ReleaseOutgoing(ctx context.Context, claims []bus.Claim) (int, error) {
	fs := make([]bus.OutgoingFailure, len(claims))
	for i, c := range claims {
		fs[i] = bus.OutgoingFailure{ID: c.ID, Token: c.Token}
	}
	return p.settle(ctx, "release", fs)
}

// RecordOutgoingFailures counts a failure on each row its token still
// holds, keeps the error text, ends the lease and makes the row claimable
// again RetryAfter after the server's now (or at RetryAt when RetryAfter is
// 0).
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) (int, error) {
	return p.settle(ctx, "fail", failures)
}

// settle runs settleScript over the rows, grouped by partition.
func (p *Persistence) settle(ctx context.Context, op string, rows []bus.OutgoingFailure) (int, error) {
	byPart := make([][]any, len(p.tags))
	var calls []call
	flush := func(part int) {
		if len(byPart[part]) > 0 {
			calls = append(calls, call{part: part, script: settleScript, keys: []string{p.tags[part]}, args: append([]any{op}, byPart[part]...)})
			byPart[part] = nil
		}
	}
	for _, r := range rows {
		part := p.partitionOf(r.ID)
		var at int64
		if !r.RetryAt.IsZero() && r.RetryAt.UnixNano() > 0 {
			at = ceilMicros(r.RetryAt.UnixNano())
		}
		byPart[part] = append(byPart[part], r.ID, r.Token, r.Error,
			strconv.FormatInt(ceilMicros(int64(max(r.RetryAfter, 0))), 10), strconv.FormatInt(at, 10))
		if len(byPart[part]) >= storeChunk*5 {
			flush(part)
		}
	}
	for part := range byPart {
		flush(part)
	}
	cmds, runErr := p.runPipelined(ctx, calls) // no WAIT: see runPipelined
	n := 0
	for _, c := range cmds {
		if c == nil {
			continue
		}
		if k, err := c.Int(); err == nil {
			n += k
		}
	}
	if runErr != nil {
		return n, fmt.Errorf("redis: %s: %w", op, runErr)
	}
	return n, nil
}
