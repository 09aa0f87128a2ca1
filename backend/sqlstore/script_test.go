package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// scriptDB is a DB without a database, scripted: Exec returns the rows or the error
// its next result says, QueryRow scans its next row, and every call is
// recorded.
type scriptDB struct {
	results []scriptResult
	calls   []scriptCall
	ended   []string // "commit", "rollback"
}

type scriptResult struct {
	n   int64
	err error
	row []any // QueryRow's columns; nil: no row
}

type scriptCall struct {
	query string
	args  []any
}

func (f *scriptDB) next(query string, args []any) scriptResult {
	f.calls = append(f.calls, scriptCall{query, args})
	if len(f.results) == 0 {
		return scriptResult{n: 1}
	}
	r := f.results[0]
	f.results = f.results[1:]
	return r
}

func (f *scriptDB) Exec(_ context.Context, query string, args ...any) (int64, error) {
	r := f.next(query, args)
	return r.n, r.err
}

func (f *scriptDB) Query(context.Context, string, ...any) (Rows, error) {
	return nil, errors.New("fake: no Query")
}

func (f *scriptDB) QueryRow(_ context.Context, query string, args ...any) Row {
	return scriptRow(f.next(query, args))
}

func (f *scriptDB) Begin(context.Context) (Tx, error) { return scriptTx{f}, nil }

type scriptTx struct{ *scriptDB }

func (t scriptTx) Commit(context.Context) error {
	t.ended = append(t.ended, "commit")
	return nil
}

func (t scriptTx) Rollback(context.Context) error {
	t.ended = append(t.ended, "rollback")
	return nil
}

type scriptRow scriptResult

func (r scriptRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if r.row == nil {
		return sql.ErrNoRows
	}
	for i, v := range r.row {
		switch d := dest[i].(type) {
		case *string:
			*d = v.(string)
		case *[]byte:
			*d = v.([]byte)
		case *int64:
			*d = v.(int64)
		case *[]string:
			*d = v.([]string)
		default:
			return fmt.Errorf("fake: scan %T", dest[i])
		}
	}
	return nil
}

// errScriptUnique is the fake dialect's unique-key violation.
var errScriptUnique = errors.New("fake: duplicate key")

func scriptDialect() *Dialect {
	return &Dialect{
		Name:     "fake",
		IsUnique: func(err error) bool { return errors.Is(err, errScriptUnique) },
		Times:    NativeTimes{},
	}
}
