package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// walInspectSchema holds the pg_walinspect extension the bench creates
// when the database has none: an extension lives once per database, so
// it is kept across runs rather than made and dropped by each.
const walInspectSchema = "postbus_bench_walinspect"

// postgresWALPosition returns the server's WAL insert position in bytes.
// Unlike pg_stat_wal, which each backend publishes at most once a second
// (and an idle one up to ten seconds late), the position is exact when
// read.
func postgresWALPosition(ctx context.Context, o *options) (int64, error) {
	conn, err := pgx.Connect(ctx, o.postgresURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var pos int64
	err = conn.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&pos)
	return pos, err
}

// runWALQuery sums the WAL records between two positions that name a
// relation of the run's schema (or its TOAST table), and every record of
// the transactions that wrote one (their commits), using
// pg_walinspect's pg_get_wal_records_info in schema %s. Records that
// touch several relations are matched by their first.
const runWALQuery = `
WITH rels AS (
	SELECT c.relfilenode::text AS node FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relfilenode <> 0
	UNION
	SELECT t.relfilenode::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_class t ON t.oid = c.reltoastrelid
	WHERE n.nspname = $1
), recs AS (
	SELECT xid, record_length, fpi_length, substring(block_ref FROM 'rel [0-9]+/[0-9]+/([0-9]+)') AS node
	FROM %s.pg_get_wal_records_info('0/0'::pg_lsn + $2::numeric, LEAST('0/0'::pg_lsn + $3::numeric, pg_current_wal_flush_lsn()))
), txs AS (
	SELECT DISTINCT xid FROM recs WHERE node IN (SELECT node FROM rels) AND NOT xid = '0'::xid
)
SELECT coalesce(sum(record_length), 0)::bigint, coalesce(sum(fpi_length), 0)::bigint FROM recs
WHERE node IN (SELECT node FROM rels) OR xid IN (SELECT xid FROM txs)`

// postgresRunWAL returns the bytes of WAL between from and to that the
// run's own tables and transactions wrote, and how many of them were
// full-page images, creating pg_walinspect (in walInspectSchema) when the
// database has none. It needs a superuser or pg_read_server_files, and
// the WAL still on the server's disk.
func postgresRunWAL(ctx context.Context, o *options, from, to int64) (runLog, error) {
	conn, err := pgx.Connect(ctx, o.postgresURL)
	if err != nil {
		return runLog{}, err
	}
	defer conn.Close(ctx)
	schema, err := walInspect(ctx, conn)
	if err != nil {
		return runLog{}, fmt.Errorf("pg_walinspect: %w", err)
	}
	var l runLog
	err = conn.QueryRow(ctx, fmt.Sprintf(runWALQuery, pgx.Identifier{schema}.Sanitize()), postgresSchema(o.run), from, to).Scan(&l.bytes, &l.fpiBytes)
	if err != nil {
		return runLog{}, fmt.Errorf("pg_walinspect: %w", err)
	}
	return l, nil
}

// walInspect returns the schema of pg_walinspect, creating the extension
// in walInspectSchema when the database has none. Two runs that create it
// at once race (IF NOT EXISTS does not lock): the loser finds the
// winner's.
func walInspect(ctx context.Context, conn *pgx.Conn) (string, error) {
	find := func() (string, error) {
		var schema string
		err := conn.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
			WHERE e.extname = 'pg_walinspect'`).Scan(&schema)
		return schema, err
	}
	schema, err := find()
	if !errors.Is(err, pgx.ErrNoRows) {
		return schema, err
	}
	_, err = conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+walInspectSchema+`; CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA `+walInspectSchema)
	if err == nil {
		return walInspectSchema, nil
	}
	if schema, ferr := find(); ferr == nil {
		return schema, nil
	}
	return "", err
}
