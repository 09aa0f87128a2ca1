package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbIdentity names one database of one server: its name and OID, and the
// server's start time, which tells two servers apart even when their
// databases have the same name and OID.
type dbIdentity struct {
	Name    string
	OID     uint32
	Started time.Time
}

func (d dbIdentity) String() string {
	return fmt.Sprintf("%q (oid %d, server started %s)", d.Name, d.OID, d.Started.UTC().Format(time.RFC3339Nano))
}

const identitySQL = `SELECT current_database(), (SELECT oid FROM pg_database WHERE datname = current_database()), pg_postmaster_start_time()`

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func queryIdentity(ctx context.Context, q queryRower) (dbIdentity, error) {
	var d dbIdentity
	err := q.QueryRow(ctx, identitySQL).Scan(&d.Name, &d.OID, &d.Started)
	return d, err
}

// checkSameDatabase refuses a caller's transaction on another database than
// the store's pool: rows stored there would never be dispatched. The same
// host, port and database in both connection configurations is enough;
// otherwise (another spelling of the host, a proxy) both are asked who
// they are.
func (p *Persistence) checkSameDatabase(ctx context.Context, tx pgx.Tx) error {
	conn := tx.Conn()
	if conn == nil {
		return &OtherDatabaseError{Reason: "the transaction has no connection"}
	}
	tc, pc := conn.Config(), p.pool.Config().ConnConfig
	if tc.Host == pc.Host && tc.Port == pc.Port && tc.Database == pc.Database {
		return nil
	}
	theirs, err := queryIdentity(ctx, tx)
	if err != nil {
		return fmt.Errorf("postgres: identify the caller's transaction's database: %w", err)
	}
	ours, err := queryIdentity(ctx, p.pool)
	if err != nil {
		return fmt.Errorf("postgres: identify the store's database: %w", err)
	}
	if theirs != ours {
		return &OtherDatabaseError{Store: ours.String(), Tx: theirs.String(),
			Reason: "messages stored there would never be dispatched"}
	}
	return nil
}
