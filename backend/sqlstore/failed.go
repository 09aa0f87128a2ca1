package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/postbus/bus/backend"
)

// Failed is the failed-message store of an SQL store: backend.FailedStore
// but for the Persistence it extends. Its table has an index on
// (last_failed, id), for the most-recent-first listing, and one on
// (failure_group, last_failed, id) with first_failed, which serves the
// groups, and the listing and counting of a group, from the index; each
// query holds only the conditions its FailedQuery sets, so that its plan
// is a range of one of them (or a primary-key probe for Search).
type Failed struct {
	d  *Dialect
	db DB
	s  FailedSQL
}

// NewFailed returns a Failed running s on db.
func NewFailed(d *Dialect, db DB, s FailedSQL) *Failed { return &Failed{d: d, db: db, s: s} }

// FailedSQL is what a database says to keep failed messages. Templates
// hold parameters as {name}, filled with the dialect's placeholders.
type FailedSQL struct {
	// Placeholder is the mark of the n-th parameter, from 1: "$1", "?".
	Placeholder func(n int) string
	// Clean makes a text parameter of a query storable (PostgreSQL's text
	// holds no NUL byte). Nil: text as it is.
	Clean func(s string) string
	// Storable reports whether an ID can key a row; lookups of another
	// match nothing without asking. Nil: every ID can.
	Storable func(id string) bool
	// CheckID returns the error StoreFailed refuses a message ID with, or
	// nil. Nil: the empty ID is refused, wrapping Invalid.
	CheckID func(id string) error
	// Invalid is the sentinel the refusal of an empty ID wraps.
	Invalid error
	// Table is the table's name, as statements write it.
	Table string
	// Select reads messages: "SELECT <columns> FROM <table>", the columns
	// being id, message_type, endpoint, queue, kind, reason,
	// failure_group, attempts, failures, first_failed, last_failed and
	// envelope, in this order (times as Times reads them).
	Select string
	// Before is the condition of a page: the messages before ({at}, {id})
	// in (last_failed, id) order.
	Before string
	// Store stores messages: the upsert backend.FailedStore describes,
	// its parameters written in Placeholder's style (not a template).
	// They are those of one message, in Select's column order (text
	// through Text, times through Times; first_failed no later than
	// last_failed, failures at least 1, the envelope not nil), or
	// StoreArgs of a batch.
	Store string
	// StoreArgs, when set, makes the parameters of Store for a batch of
	// messages with distinct IDs (an upsert touches a row once).
	StoreArgs func(batch []backend.FailedMessage) []any
	// Reason makes the parameter of a stored reason. Nil: Text.
	Reason func(s string) any
	// Groups returns the {limit} largest groups: failure_group, the count,
	// the earliest first_failed, the latest last_failed, and message_type,
	// endpoint and reason of the group's latest message; largest first,
	// then latest failure first, then by group.
	Groups string
	// Delete deletes the messages whose ID is in {ids}.
	Delete string
	// IDs makes the one parameter {ids} of Delete (an array, a JSON list).
	// Nil: {ids} stands for a list of parameters, one per ID, Chunk at a
	// time.
	IDs func(ids []string) any
	// Chunk bounds the IDs of one Delete when IDs is nil (0: no bound).
	Chunk int
}

// StoreFailed inserts or updates the messages (see backend.FailedStore) in
// one transaction: a statement per batch of distinct IDs (StoreArgs), in
// order, or a statement per message. A transaction the server rolled back
// (a deadlock victim) runs again, up to three times in all (InTx).
func (f *Failed) StoreFailed(ctx context.Context, msgs []backend.FailedMessage) error {
	if len(msgs) == 0 {
		return ctx.Err()
	}
	norm := make([]backend.FailedMessage, len(msgs))
	for i, m := range msgs {
		if err := f.checkID(m.ID); err != nil {
			return err
		}
		if m.FirstFailed.IsZero() || m.FirstFailed.After(m.LastFailed) {
			m.FirstFailed = m.LastFailed
		}
		if m.Envelope == nil {
			m.Envelope = []byte{}
		}
		m.Failures = max(m.Failures, 1)
		norm[i] = m
	}
	var batches [][]any
	if f.s.StoreArgs != nil {
		for _, r := range distinctRounds(norm) {
			batches = append(batches, f.s.StoreArgs(r))
		}
	} else {
		for _, m := range norm {
			batches = append(batches, f.rowArgs(m))
		}
	}
	err := InTx(ctx, f.d, f.db, func(tx Tx) error {
		for _, args := range batches {
			if _, err := tx.Exec(ctx, f.s.Store, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return f.d.Errorf("store failed messages: %w", err)
	}
	return nil
}

func (f *Failed) checkID(id string) error {
	if f.s.CheckID != nil {
		return f.s.CheckID(id)
	}
	if id == "" {
		return f.d.Errorf("store failed messages: %w: empty ID", f.s.Invalid)
	}
	return nil
}

func (f *Failed) rowArgs(m backend.FailedMessage) []any {
	reason := f.d.T(m.Reason)
	if f.s.Reason != nil {
		reason = f.s.Reason(m.Reason)
	}
	t := f.d.Times.Arg
	return []any{f.d.T(m.ID), f.d.T(m.Type), f.d.T(m.Endpoint), f.d.T(m.Queue), f.d.T(m.Kind), reason, f.d.T(m.Group),
		m.Attempts, m.Failures, t(m.FirstFailed), t(m.LastFailed), m.Envelope}
}

// distinctRounds splits msgs, in order, into batches without a repeated
// ID.
func distinctRounds(msgs []backend.FailedMessage) [][]backend.FailedMessage {
	var rounds [][]backend.FailedMessage
	var seen []map[string]bool
	for _, m := range msgs {
		i := 0
		// The round after the last one holding this ID, so order is kept.
		for j := len(rounds) - 1; j >= 0; j-- {
			if seen[j][m.ID] {
				i = j + 1
				break
			}
		}
		if i == len(rounds) {
			rounds, seen = append(rounds, nil), append(seen, map[string]bool{})
		}
		rounds[i], seen[i][m.ID] = append(rounds[i], m), true
	}
	return rounds
}

// ListFailed returns the messages q selects, most recent failure first,
// then by ID (descending), reading an index backwards from the page's
// start.
func (f *Failed) ListFailed(ctx context.Context, q backend.FailedQuery) ([]backend.FailedMessage, error) {
	query, args := ListFailedSQL(f, q)
	rows, err := f.db.Query(ctx, query, args...)
	out, err := scanRows(rows, err, f.scan)
	if err != nil {
		return nil, f.d.Errorf("list failed: %w", err)
	}
	return out, nil
}

// ListFailedSQL returns the statement ListFailed runs for q, and its
// parameters: for a test of its plan.
func ListFailedSQL(f *Failed, q backend.FailedQuery) (string, []any) {
	p, where := f.where(q, true)
	return f.s.Select + where + " ORDER BY last_failed DESC, id DESC LIMIT " +
		p.fill("{limit}", map[string]any{"limit": cmpLimit(q.Limit)}), p.args
}

// CountFailedSQL returns the statement CountFailed runs for q, and its
// parameters: for a test of its plan.
func CountFailedSQL(f *Failed, q backend.FailedQuery) (string, []any) {
	p, where := f.where(q, false)
	return "SELECT count(*) FROM " + f.s.Table + where, p.args
}

// where builds the conditions of q, paging included when page is set.
func (f *Failed) where(q backend.FailedQuery, page bool) (*binder, string) {
	p := newBinder(f.s.Placeholder)
	var where []string
	for _, c := range []struct{ col, v string }{{"failure_group", q.Group}, {"message_type", q.Type}, {"endpoint", q.Endpoint}, {"id", q.Search}} {
		if c.v != "" {
			where = append(where, c.col+" = "+p.add(f.text(c.v)))
		}
	}
	if page && !q.BeforeFailed.IsZero() {
		where = append(where, p.fill(f.s.Before, map[string]any{"at": f.d.Times.Arg(q.BeforeFailed), "id": f.text(q.BeforeID)}))
	}
	if len(where) == 0 {
		return p, ""
	}
	return p, " WHERE " + strings.Join(where, " AND ")
}

// CountFailed counts the messages q selects. A count by group reads the
// group index only.
func (f *Failed) CountFailed(ctx context.Context, q backend.FailedQuery) (int64, error) {
	query, args := CountFailedSQL(f, q)
	var n int64
	if err := f.db.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return 0, f.d.Errorf("count failed: %w", err)
	}
	return n, nil
}

// GetFailed returns the message with the ID, by primary key, and false
// when there is none.
func (f *Failed) GetFailed(ctx context.Context, id string) (backend.FailedMessage, bool, error) {
	if f.s.Storable != nil && !f.s.Storable(id) {
		return backend.FailedMessage{}, false, nil // no stored message has it
	}
	p := newBinder(f.s.Placeholder)
	query := f.s.Select + " WHERE " + p.fill("id = {id}", map[string]any{"id": f.text(id)})
	m, err := f.scan(f.db.QueryRow(ctx, query, p.args...))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.FailedMessage{}, false, nil
	case err != nil:
		return backend.FailedMessage{}, false, f.d.Errorf("get failed %s: %w", id, err)
	}
	return m, true, nil
}

// FailedGroups returns up to limit groups (0: 100), largest first; the
// reason of a group is the normalised reason of its latest failure.
func (f *Failed) FailedGroups(ctx context.Context, limit int) ([]backend.FailedGroup, error) {
	query, args := FailedGroupsSQL(f, limit)
	rows, err := f.db.Query(ctx, query, args...)
	out, err := scanRows(rows, err, func(r Row) (backend.FailedGroup, error) {
		var g backend.FailedGroup
		var first, last any
		if err := r.Scan(&g.Group, &g.Count, &first, &last, &g.Type, &g.Endpoint, &g.Reason); err != nil {
			return g, err
		}
		g.Reason = backend.NormalizeReason(g.Reason)
		return g, f.times(first, last, &g.FirstFailed, &g.LastFailed)
	})
	if err != nil {
		return nil, f.d.Errorf("failed groups: %w", err)
	}
	return out, nil
}

// FailedGroupsSQL returns the statement FailedGroups runs for limit, and
// its parameters: for a test of its plan.
func FailedGroupsSQL(f *Failed, limit int) (string, []any) {
	p := newBinder(f.s.Placeholder)
	return p.fill(f.s.Groups, map[string]any{"limit": cmpLimit(limit)}), p.args
}

// DeleteFailed deletes the messages with the IDs and returns how many it
// deleted: in one statement, or one per Chunk IDs.
func (f *Failed) DeleteFailed(ctx context.Context, ids []string) (int, error) {
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		if f.s.Storable == nil || f.s.Storable(id) { // any other matches no message
			keys = append(keys, id)
		}
	}
	if len(keys) == 0 {
		return 0, ctx.Err()
	}
	size := len(keys)
	if f.s.IDs == nil && f.s.Chunk > 0 {
		size = min(size, f.s.Chunk)
	}
	total := 0
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), size)]
		keys = keys[len(chunk):]
		p := newBinder(f.s.Placeholder)
		var list string
		if f.s.IDs != nil {
			list = p.fill("{ids}", map[string]any{"ids": f.s.IDs(chunk)})
		} else {
			marks := make([]string, len(chunk))
			for i, id := range chunk {
				marks[i] = p.add(f.d.T(id))
			}
			list = strings.Join(marks, ", ")
		}
		n, err := f.db.Exec(ctx, strings.Replace(f.s.Delete, "{ids}", list, 1), p.args...)
		if err != nil {
			return total, f.d.Errorf("delete failed: %w", err)
		}
		total += int(n)
	}
	return total, nil
}

func (f *Failed) text(s string) any {
	if f.s.Clean != nil {
		s = f.s.Clean(s)
	}
	return f.d.T(s)
}

func (f *Failed) scan(r Row) (backend.FailedMessage, error) {
	var m backend.FailedMessage
	var first, last any
	if err := r.Scan(&m.ID, &m.Type, &m.Endpoint, &m.Queue, &m.Kind, &m.Reason, &m.Group, &m.Attempts, &m.Failures,
		&first, &last, &m.Envelope); err != nil {
		return m, err
	}
	return m, f.times(first, last, &m.FirstFailed, &m.LastFailed)
}

// times reads the first and last failure times.
func (f *Failed) times(first, last any, firstAt, lastAt *time.Time) error {
	var err error
	if *firstAt, err = f.d.ScanTime(first); err != nil {
		return err
	}
	*lastAt, err = f.d.ScanTime(last)
	return err
}
