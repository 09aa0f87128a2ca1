package sqlstore

import (
	"context"
	"fmt"
	"math"
	"time"
)

// rollbackTimeout bounds a rollback run after its work's context ended.
const rollbackTimeout = 5 * time.Second

// Dialect is what one SQL database makes different for every part of a
// store. The statements of each part live beside it, in the part's own
// statement struct (SagaSQL and the rest); a Dialect holds the rest.
type Dialect struct {
	// Name prefixes every error of the store: "postgres", "mysql".
	Name string
	// TxFrom returns the transaction ctx carries, the outbox handling's
	// or the caller's (the store's WithTx), if any. Nil: none ever.
	TxFrom func(ctx context.Context) (Tx, bool)
	// IsUnique reports a unique-key violation.
	IsUnique func(err error) bool
	// IsRetryable reports an error after which the server rolled the
	// transaction back (a deadlock victim, a serialization failure): the
	// whole transaction may be run again. Nil: none is.
	IsRetryable func(err error) bool
	// Text converts a string parameter: MySQL's binary columns take
	// bytes. Nil: the string as it is.
	Text func(s string) any
	// Times carries times between the client and the columns.
	Times TimeCodec
}

// TimeCodec is how a database's statements take and return times.
type TimeCodec interface {
	// Arg is the parameter for t; the zero time stands for "none" where
	// a column is nullable, and the codec maps it as the column wants.
	Arg(t time.Time) any
	// Scan reads a time column scanned into an any: nil is the zero
	// time.
	Scan(src any) (time.Time, error)
}

// On returns the transaction ctx carries (TxFrom), and otherwise db.
func (d *Dialect) On(ctx context.Context, db Querier) Querier {
	if d.TxFrom != nil {
		if tx, ok := d.TxFrom(ctx); ok {
			return tx
		}
	}
	return db
}

// T converts a string parameter with Text.
func (d *Dialect) T(s string) any {
	if d.Text == nil {
		return s
	}
	return d.Text(s)
}

// Errorf formats an error prefixed with the dialect's name; %w wraps as
// in fmt.Errorf.
func (d *Dialect) Errorf(format string, args ...any) error {
	return fmt.Errorf(d.Name+": "+format, args...)
}

// Unique reports err as a unique-key violation.
func (d *Dialect) Unique(err error) bool { return err != nil && d.IsUnique != nil && d.IsUnique(err) }

// Retryable reports err as one after which the transaction may be run
// again.
func (d *Dialect) Retryable(err error) bool {
	return err != nil && d.IsRetryable != nil && d.IsRetryable(err)
}

// ScanTime reads a time scanned into an any with Times.
func (d *Dialect) ScanTime(src any) (time.Time, error) {
	t, err := d.Times.Scan(src)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: read a time: %w", d.Name, err)
	}
	return t, nil
}

// UnixTimes is a TimeCodec for times stored as integers: Unit after the
// Unix epoch (time.Microsecond for MySQL's statements, time.Nanosecond
// for SQLite's), the zero time as Zero.
type UnixTimes struct {
	Unit time.Duration
	// Min and Max clamp a time to what the column holds, keeping the
	// order; zero values: no bound.
	Min, Max int64
}

// Arg is t in Unit after the epoch, clamped; the zero time is Min.
func (u UnixTimes) Arg(t time.Time) any {
	if t.IsZero() {
		return u.Min
	}
	var n int64
	switch s := t.Unix(); {
	case u.Unit == time.Microsecond:
		n = t.UnixMicro()
	// Beyond what int64 nanoseconds hold (1678 to 2262), UnixNano is
	// undefined: the time is clamped, keeping the order.
	case s >= math.MaxInt64/int64(time.Second):
		n = math.MaxInt64 / int64(u.Unit)
	case s <= math.MinInt64/int64(time.Second):
		n = math.MinInt64 / int64(u.Unit)
	default:
		n = t.UnixNano() / int64(u.Unit)
	}
	if u.Min != 0 && n < u.Min {
		return u.Min
	}
	if u.Max != 0 && n > u.Max {
		return u.Max
	}
	return n
}

// Scan reads an integer column: nil and 0 are the zero time.
func (u UnixTimes) Scan(src any) (time.Time, error) {
	var n int64
	switch v := src.(type) {
	case nil:
		return time.Time{}, nil
	case int64:
		n = v
	case []byte:
		var err error
		if n, err = parseInt(v); err != nil {
			return time.Time{}, err
		}
	default:
		return time.Time{}, fmt.Errorf("a time as %T", src)
	}
	if n == 0 || (u.Min != 0 && n <= u.Min) {
		return time.Time{}, nil
	}
	if u.Unit == time.Microsecond {
		return time.UnixMicro(n).UTC(), nil
	}
	return time.Unix(0, n*int64(u.Unit)).UTC(), nil
}

// NativeTimes is a TimeCodec for a client that takes and returns
// time.Time (pgx on timestamptz): NULL is the zero time.
type NativeTimes struct{}

// Arg is t, or nil (NULL) for the zero time.
func (NativeTimes) Arg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// Scan reads a time.Time or NULL.
func (NativeTimes) Scan(src any) (time.Time, error) {
	switch v := src.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return v.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("a time as %T", src)
}
