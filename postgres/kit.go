package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/postbus/bus/backend/sqlstore"
)

// The store's parts run on the kit of SQL stores (package sqlstore), over
// pgx through these adapters; dialect is what PostgreSQL makes different.

// pgxQuerier is what pgx's pool, connection and transaction share.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// kitQ adapts a pgx querier to sqlstore.Querier.
type kitQ struct{ q pgxQuerier }

func (k kitQ) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := k.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (k kitQ) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := k.q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return kitRows{rows}, nil
}

func (k kitQ) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return kitRow{k.q.QueryRow(ctx, query, args...)}
}

// kitRow reports pgx.ErrNoRows as sql.ErrNoRows too.
type kitRow struct{ r pgx.Row }

func (r kitRow) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return errors.Join(err, sql.ErrNoRows)
	}
	return err
}

type kitRows struct{ pgx.Rows }

func (r kitRows) Close() error { r.Rows.Close(); return r.Rows.Err() }

// kitBeginner is a pgx pool or connection.
type kitBeginner interface {
	pgxQuerier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// kitDB adapts a pgx pool to sqlstore.DB.
type kitDB struct {
	kitQ
	b kitBeginner
}

func newKitDB(b kitBeginner) kitDB { return kitDB{kitQ{b}, b} }

func (d kitDB) Begin(ctx context.Context) (sqlstore.Tx, error) {
	tx, err := d.b.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return kitTx{kitQ{tx}, tx}, nil
}

// kitTx adapts a pgx transaction to sqlstore.Tx.
type kitTx struct {
	kitQ
	tx pgx.Tx
}

func (t kitTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t kitTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return errors.Join(err, sql.ErrTxDone)
	}
	return err
}

// pgCode reports whether err is a server error with one of codes.
func pgCode(err error, codes ...string) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	for _, c := range codes {
		if pe.Code == c {
			return true
		}
	}
	return false
}

// newDialect is PostgreSQL's sqlstore.Dialect: timestamptz as time.Time,
// text as text.
func newDialect() *sqlstore.Dialect {
	return &sqlstore.Dialect{
		Name: "postgres",
		TxFrom: func(ctx context.Context) (sqlstore.Tx, bool) {
			tx, ok := txFrom(ctx)
			if !ok {
				return nil, false
			}
			return kitTx{kitQ{tx}, tx}, true
		},
		IsUnique:    func(err error) bool { return pgCode(err, "23505") },
		IsRetryable: func(err error) bool { return pgCode(err, "40001", "40P01") },
		Times:       sqlstore.NativeTimes{},
	}
}
