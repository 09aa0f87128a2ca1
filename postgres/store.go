package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus"
)

// StoreOutgoing inserts rows; an ID that is already stored keeps its row
// (ON CONFLICT DO NOTHING), so a retried send cannot schedule twice. Rows of
// concurrent calls are grouped into one INSERT (see Options.MaxBatchRows and
// Options.MaxConcurrentInserts); a lone call is one round trip. Unless
// Options.DisableNotify is set, when the earliest row is due within
// Options.NotifyWithin, the same statement notifies Channel with the
// earliest due time of the new rows. A row with an empty or non-UTF-8 ID, or
// no envelope, is an *InvalidRowError and nothing is stored.
func (p *Persistence) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	for i := range msgs {
		if err := checkRow(&msgs[i]); err != nil {
			return err
		}
	}
	if err := p.batch.store(ctx, msgs); err != nil {
		return fmt.Errorf("postgres: store outgoing: %w", err)
	}
	return nil
}

func checkRow(m *bus.OutgoingMessage) error {
	switch {
	case m.ID == "":
		return &InvalidRowError{Reason: "empty ID"}
	case !utf8.ValidString(m.ID) || strings.IndexByte(m.ID, 0) >= 0:
		return &InvalidRowError{ID: m.ID, Reason: "ID is not valid UTF-8 text without NUL bytes"}
	case m.Envelope == nil:
		return &InvalidRowError{ID: m.ID, Reason: "no envelope"}
	}
	return nil
}

// insert runs one grouped INSERT; the batcher calls it.
func (p *Persistence) insert(ctx context.Context, msgs []bus.OutgoingMessage) error {
	ids := make([]string, len(msgs))
	kinds := make([]int16, len(msgs))
	envs := make([][]byte, len(msgs))
	dues := make([]time.Time, len(msgs))
	earliest := msgs[0].DueAt
	for i := range msgs {
		ids[i], kinds[i], envs[i], dues[i] = msgs[i].ID, int16(msgs[i].Kind), msgs[i].Envelope, msgs[i].DueAt
		if dues[i].Before(earliest) {
			earliest = dues[i]
		}
	}
	// Only rows due before the dispatchers' next polls need a wake-up; the
	// client clock is good enough for that choice, which never affects
	// when a row becomes claimable.
	if p.sql.notify != "" && time.Until(earliest) <= p.opts.NotifyWithin {
		_, err := p.pool.Exec(ctx, p.sql.notify, ids, kinds, envs, dues, p.names.channel)
		return err
	}
	_, err := p.pool.Exec(ctx, p.sql.insert, ids, kinds, envs, dues)
	return err
}

// ClaimDueOutgoing leases up to limit rows that are claimable on the
// database clock, earliest first, in one statement (FOR UPDATE SKIP LOCKED,
// so concurrent claimers never wait for or share a row) that commits at
// once: no transaction is held while the caller sends. The now argument is
// ignored: due and lease times compare with the server's now(), so a skewed
// client clock cannot make a message early.
func (p *Persistence) ClaimDueOutgoing(ctx context.Context, _ time.Time, limit int, lease time.Duration) ([]bus.OutgoingMessage, error) {
	if limit <= 0 {
		return nil, ctx.Err()
	}
	rows, err := p.pool.Query(ctx, p.sql.claim, limit, lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("postgres: claim outgoing: %w", err)
	}
	defer rows.Close()
	type claimed struct {
		msg bus.OutgoingMessage
		was time.Time // available_at before the claim: the claim order
	}
	out := make([]claimed, 0, min(limit, 1024))
	for rows.Next() {
		var c claimed
		var kind int16
		var failures int32
		m := &c.msg
		if err := rows.Scan(&m.ID, &kind, &m.Envelope, &m.DueAt, &m.LeaseUntil, &failures, &m.LastError, &c.was); err != nil {
			return nil, fmt.Errorf("postgres: claim outgoing: %w", err)
		}
		m.Kind, m.Failures = bus.Kind(kind), int(failures)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: claim outgoing: %w", err)
	}
	// RETURNING has no order; restore the claim order.
	slices.SortFunc(out, func(a, b claimed) int {
		return cmp.Or(a.was.Compare(b.was), strings.Compare(a.msg.ID, b.msg.ID))
	})
	msgs := make([]bus.OutgoingMessage, len(out))
	for i := range out {
		msgs[i] = out[i].msg
	}
	return msgs, nil
}

// DeleteOutgoing removes rows in one statement; unknown IDs are ignored.
func (p *Persistence) DeleteOutgoing(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return ctx.Err()
	}
	if _, err := p.pool.Exec(ctx, p.sql.delete, ids); err != nil {
		return fmt.Errorf("postgres: delete outgoing: %w", err)
	}
	return nil
}

// ReleaseOutgoing makes claimed rows claimable again at once, counting no
// failure, in one statement.
func (p *Persistence) ReleaseOutgoing(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return ctx.Err()
	}
	if _, err := p.pool.Exec(ctx, p.sql.release, ids); err != nil {
		return fmt.Errorf("postgres: release outgoing: %w", err)
	}
	return nil
}

// RecordOutgoingFailures counts a failure on each row, keeps its error text
// and makes it claimable again at its RetryAt, in one statement. Unknown IDs
// are ignored. Error text is made valid UTF-8 without NUL bytes, as
// PostgreSQL text requires.
func (p *Persistence) RecordOutgoingFailures(ctx context.Context, failures []bus.OutgoingFailure) error {
	if len(failures) == 0 {
		return ctx.Err()
	}
	ids := make([]string, len(failures))
	errs := make([]string, len(failures))
	retry := make([]time.Time, len(failures))
	for i, f := range failures {
		ids[i], errs[i], retry[i] = f.ID, cleanText(f.Error), f.RetryAt
	}
	if _, err := p.pool.Exec(ctx, p.sql.failures, ids, errs, retry); err != nil {
		return fmt.Errorf("postgres: record outgoing failures: %w", err)
	}
	return nil
}

// CancelOutgoing removes a row and reports whether it was there.
func (p *Persistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	tag, err := p.pool.Exec(ctx, p.sql.cancel, cleanText(id))
	if err != nil {
		return false, fmt.Errorf("postgres: cancel outgoing: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// NextDueOutgoing returns when the earliest row becomes claimable, and
// false when the table is empty. It reads the first entry of the
// (available_at, id) index.
func (p *Persistence) NextDueOutgoing(ctx context.Context) (time.Time, bool, error) {
	var next *time.Time
	if err := p.pool.QueryRow(ctx, p.sql.nextDue).Scan(&next); err != nil {
		return time.Time{}, false, fmt.Errorf("postgres: next due outgoing: %w", err)
	}
	if next == nil {
		return time.Time{}, false, nil
	}
	return *next, true, nil
}

func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "")
}
