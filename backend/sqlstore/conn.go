package sqlstore

import (
	"context"
	"database/sql"
	"errors"
)

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	// Exec runs a statement and returns the rows it affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a statement that returns rows. The caller closes them.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// QueryRow runs a statement that returns at most one row. Its Scan
	// reports no row as an error wrapping sql.ErrNoRows.
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Rows is the result of Query, read with Next and Scan as in
// database/sql.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Row is the result of QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// Tx is a transaction: a Querier that commits or rolls back.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	// Rollback rolls back; after Commit or Rollback it returns an error
	// wrapping sql.ErrTxDone, which callers may ignore.
	Rollback(ctx context.Context) error
}

// DB is a pool: a Querier that begins transactions.
type DB interface {
	Querier
	Begin(ctx context.Context) (Tx, error)
}

// FromDB adapts a database/sql pool. Its transactions begin with opts
// (nil: the driver's defaults).
func FromDB(db *sql.DB, opts *sql.TxOptions) DB { return sqlDB{db: db, opts: opts} }

// FromTx adapts a database/sql transaction.
func FromTx(tx *sql.Tx) Tx { return sqlTx{tx} }

// SQLExecer is what database/sql's pool, connection and transaction
// share.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type sqlQuerier struct{ e SQLExecer }

func (q sqlQuerier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.e.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q sqlQuerier) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return q.e.QueryContext(ctx, query, args...)
}

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) Row {
	return q.e.QueryRowContext(ctx, query, args...)
}

type sqlDB struct {
	db   *sql.DB
	opts *sql.TxOptions
}

func (d sqlDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlQuerier{d.db}.Exec(ctx, query, args...)
}

func (d sqlDB) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return d.db.QueryContext(ctx, query, args...)
}

func (d sqlDB) QueryRow(ctx context.Context, query string, args ...any) Row {
	return d.db.QueryRowContext(ctx, query, args...)
}

func (d sqlDB) Begin(ctx context.Context) (Tx, error) {
	tx, err := d.db.BeginTx(ctx, d.opts)
	if err != nil {
		return nil, err
	}
	return sqlTx{tx}, nil
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlQuerier{t.tx}.Exec(ctx, query, args...)
}

func (t sqlTx) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

func (t sqlTx) Commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) Rollback(context.Context) error { return t.tx.Rollback() }

// Rollback rolls tx back on a context of its own (ctx may be what ended
// the work), ignoring sql.ErrTxDone.
func Rollback(ctx context.Context, tx Tx) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := tx.Rollback(rctx); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// SQLTx returns the database/sql transaction under tx when it is one (a
// transaction of FromDB's pool, or FromTx's), for code of a store that
// still takes a *sql.Tx.
func SQLTx(tx Tx) (*sql.Tx, bool) {
	t, ok := tx.(sqlTx)
	return t.tx, ok
}

// txAttempts bounds the runs of a transaction the server rolled back.
const txAttempts = 3

// InTx runs fn in a transaction of db and commits it. A transaction the
// server rolled back (d.Retryable: a deadlock victim, a serialization
// failure) runs again from scratch, up to three times in all: fn must
// start over on each call.
func InTx(ctx context.Context, d *Dialect, db DB, fn func(tx Tx) error) error {
	var err error
	for range txAttempts {
		if err = inTxOnce(ctx, db, fn); !d.Retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func inTxOnce(ctx context.Context, db DB, fn func(tx Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = Rollback(ctx, tx) }()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// ExecCount runs one statement on a database/sql pool, connection or
// transaction and returns how many rows it changed.
func ExecCount(ctx context.Context, e SQLExecer, query string, args ...any) (int, error) {
	n, err := sqlQuerier{e}.Exec(ctx, query, args...)
	return int(n), err
}
