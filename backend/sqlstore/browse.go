package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/postbus/bus/backend"
)

// Browser lists and gets the rows of a scheduled store: the ListScheduled
// and GetScheduled of backend.ScheduledBrowser. The rest of that interface
// (statistics, histogram, send-now) differs too much between databases to
// share, and stays with each store.
type Browser struct {
	d  *Dialect
	db Querier
	s  BrowseSQL
}

// NewBrowser returns a Browser running s on db.
func NewBrowser(d *Dialect, db Querier, s BrowseSQL) *Browser {
	return &Browser{d: d, db: db, s: s}
}

// BrowseSQL is what a database says to list scheduled rows. Templates
// hold parameters as {name} (see binder), filled from the query: {type},
// {from} (DueAfter), {until} (DueBefore), {due} and {id} (AfterDue,
// AfterID), times through the dialect's Times and text through its Text.
type BrowseSQL struct {
	// Placeholder is the mark of the n-th parameter, from 1: "$1", "?".
	Placeholder func(n int) string
	// Clean makes a text parameter storable (PostgreSQL's text holds no
	// NUL byte). Nil: text as it is.
	Clean func(s string) string
	// Storable reports whether an ID can key a row; GetScheduled finds no
	// row for another one without asking. Nil: every ID can.
	Storable func(id string) bool
	// Select reads rows: "SELECT <columns> FROM <table>", the columns
	// being id, kind, message_type, envelope, due_at, lease_until,
	// lease_token, failures, last_error and transport, in this order
	// (times as Times reads them; lease_token NULL when no lease).
	Select string
	// All ranges over every row; ByType over the rows of the type
	// {type}, for a query that names one.
	All, ByType BrowseRange
}

// BrowseRange is a listing's conditions, each a template, and its order.
// ListScheduled puts in Where, From or NoFrom, Until or NoUntil, and After
// when the query continues a page; "" leaves a condition out.
type BrowseRange struct {
	Where   string // always
	From    string // rows due at or after {from}
	NoFrom  string // when the query has no lower bound
	Until   string // rows due before {until}
	NoUntil string // when the query has no upper bound
	After   string // rows after ({due}, {id}) in Order
	Order   string // the ORDER BY list: due_at, id or an equivalent
}

// ListScheduled returns the rows q selects, in the range's order (the
// earliest due first, then by ID), at most q.Limit (0: 100) of them.
func (b *Browser) ListScheduled(ctx context.Context, q backend.ScheduledQuery) ([]backend.OutgoingMessage, error) {
	query, args := ListScheduledSQL(b, q)
	rows, err := b.db.Query(ctx, query, args...)
	out, err := scanRows(rows, err, b.scan)
	if err != nil {
		return nil, b.d.Errorf("list scheduled: %w", err)
	}
	return out, nil
}

// ListScheduledSQL returns the statement ListScheduled runs for q, and
// its parameters: for a test of its plan.
func ListScheduledSQL(b *Browser, q backend.ScheduledQuery) (string, []any) {
	r, p := b.s.All, newBinder(b.s.Placeholder)
	vals := map[string]any{
		"type": b.text(q.Type), "from": b.d.Times.Arg(q.DueAfter), "until": b.d.Times.Arg(q.DueBefore),
		"due": b.d.Times.Arg(q.AfterDue), "id": b.text(q.AfterID), "limit": cmpLimit(q.Limit),
	}
	if q.Type != "" {
		r = b.s.ByType
	}
	pick := func(set bool, yes, not string) string {
		if set {
			return yes
		}
		return not
	}
	var where []string
	for _, t := range []string{
		r.Where, pick(!q.DueAfter.IsZero(), r.From, r.NoFrom),
		pick(!q.DueBefore.IsZero(), r.Until, r.NoUntil), pick(!q.AfterDue.IsZero(), r.After, ""),
	} {
		if t != "" {
			where = append(where, p.fill(t, vals))
		}
	}
	query := b.s.Select
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY " + r.Order + " LIMIT " + p.fill("{limit}", vals)
	return query, p.args
}

// GetScheduled returns the row with the ID, by primary key, and false
// when there is none.
func (b *Browser) GetScheduled(ctx context.Context, id string) (backend.OutgoingMessage, bool, error) {
	if b.s.Storable != nil && !b.s.Storable(id) {
		return backend.OutgoingMessage{}, false, nil // no stored row has it
	}
	p := newBinder(b.s.Placeholder)
	query := b.s.Select + " WHERE " + p.fill("id = {id}", map[string]any{"id": b.text(id)})
	m, err := b.scan(b.db.QueryRow(ctx, query, p.args...))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return backend.OutgoingMessage{}, false, nil
	case err != nil:
		return backend.OutgoingMessage{}, false, b.d.Errorf("get scheduled %s: %w", id, err)
	}
	return m, true, nil
}

func (b *Browser) text(s string) any {
	if b.s.Clean != nil {
		s = b.s.Clean(s)
	}
	return b.d.T(s)
}

func (b *Browser) scan(r Row) (backend.OutgoingMessage, error) {
	var m backend.OutgoingMessage
	var kind int64
	var due, lease any
	var token sql.NullString
	if err := r.Scan(&m.ID, &kind, &m.Type, &m.Envelope, &due, &lease, &token, &m.Failures, &m.LastError, &m.Transport); err != nil {
		return m, err
	}
	m.Kind = backend.Kind(kind)
	var err error
	if m.DueAt, err = b.d.ScanTime(due); err != nil {
		return m, err
	}
	if token.Valid {
		m.Token = token.String
		if m.LeaseUntil, err = b.d.ScanTime(lease); err != nil {
			return m, err
		}
	}
	return m, nil
}

// cmpLimit is a listing's limit: 100 unless set.
func cmpLimit(limit int) int {
	if limit <= 0 {
		return 100
	}
	return limit
}

// scanRows reads every row of rows (the result of a Query that returned
// err) with scan, and closes them.
func scanRows[T any](rows Rows, err error, scan func(Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// binder numbers the parameters of one statement in a dialect's style and
// collects their values.
type binder struct {
	ph    func(n int) string
	args  []any
	named map[string]string // for numbered styles: each name's mark
}

// newBinder returns a binder writing marks with ph ("$1", "?").
func newBinder(ph func(n int) string) *binder {
	b := &binder{ph: ph}
	if ph(1) != ph(2) {
		b.named = map[string]string{}
	}
	return b
}

// fill returns tmpl with each {name} replaced by a parameter holding
// vals[name]. With numbered marks ($1) a name is one parameter however
// often it appears in the statement; with "?" each appearance is one.
func (b *binder) fill(tmpl string, vals map[string]any) string {
	var out strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		j := strings.IndexByte(tmpl[i+1:], '}')
		if i < 0 || j < 0 {
			out.WriteString(tmpl)
			return out.String()
		}
		name := tmpl[i+1 : i+1+j]
		out.WriteString(tmpl[:i])
		tmpl = tmpl[i+j+2:]
		if mark, ok := b.named[name]; ok {
			out.WriteString(mark)
			continue
		}
		mark := b.add(vals[name])
		if b.named != nil {
			b.named[name] = mark
		}
		out.WriteString(mark)
	}
}

// add adds a parameter holding v and returns its mark.
func (b *binder) add(v any) string {
	b.args = append(b.args, v)
	return b.ph(len(b.args))
}

// CountBuckets runs query on q, whose rows are a bucket's index and the
// rows due in it, and returns the counts of buckets 0 to n-1 (rows of
// other buckets are left out): DueHistogram's reading of its statement.
func CountBuckets(ctx context.Context, q Querier, n int, query string, args ...any) ([]int64, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := make([]int64, n)
	for rows.Next() {
		var b, c int64
		if err := rows.Scan(&b, &c); err != nil {
			return nil, err
		}
		if b >= 0 && b < int64(n) {
			out[b] += c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
