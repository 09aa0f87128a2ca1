package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus/postgres"
)

func TestSetupIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	ctx := ctxTimeout(t, time.Minute)
	const n = 5
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		p, err := postgres.New(pool, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = p.Setup(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Setup %d: %v", i, err)
		}
	}
	p, _ := postgres.New(pool, postgres.Options{Schema: schema})
	for range 2 {
		if err := p.Setup(ctx); err != nil {
			t.Fatalf("repeated Setup: %v", err)
		}
	}
	var tables, indexes int
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'outgoing_messages'),
		(SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'outgoing_messages')`, schema).Scan(&tables, &indexes)
	if err != nil {
		t.Fatal(err)
	}
	// primary key, (transport, available_at, id), (due_at, id), (message_type, due_at, id)
	if tables != 1 || indexes != 4 {
		t.Errorf("after Setup: %d tables, %d indexes; want 1 and 4", tables, indexes)
	}
}

func TestMigrationsMatchSetup(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	ctx := ctxTimeout(t, time.Minute)
	stmts, err := postgres.MigrationsFor(schema, "by_hand")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	p, _ := postgres.New(pool, postgres.Options{Schema: schema, Table: "by_hand"})
	if err := p.Setup(ctx); err != nil {
		t.Fatalf("Setup after migrations: %v", err)
	}
	if _, ok, err := p.NextDueOutgoing(ctx, testTransport); err != nil || ok {
		t.Fatalf("NextDueOutgoing on the migrated table = %v, %v", ok, err)
	}
}

// TestQueriesUseTheIndex is the proof that the claim and next-due queries
// are index scans however large the backlog: 50,000 rows, most of them an
// hour ahead, a fifth of them another transport's and a tenth of them stored
// without a transport, ANALYZEd, then EXPLAIN ANALYZE inside a rolled-back
// transaction. Run with -v to print the plans (docs/guide/postgres.md
// records them).
func TestQueriesUseTheIndex(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	p := newStore(t, pool, postgres.Options{})
	ctx := ctxTimeout(t, 2*time.Minute)
	_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, kind, envelope, due_at, available_at, transport)
		SELECT 'row-' || lpad(g::text, 6, '0'), 1, decode(repeat('ab', 300), 'hex'), d, d,
		       CASE WHEN g %% 10 = 0 THEN '' WHEN g %% 5 = 1 THEN 'other' ELSE $1 END
		FROM generate_series(1, 50000) AS g,
		LATERAL (SELECT now() + CASE WHEN g <= 500 THEN -interval '1 second' ELSE interval '1 hour' END
		                      + g * interval '1 millisecond' AS d) AS due`, p.Table()), testTransport)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+p.Table()); err != nil {
		t.Fatal(err)
	}
	// 500 rows are due: 350 of this transport, 50 without one, 100 of
	// the other transport. A claim of 100 takes the 100 earliest of this
	// transport's 350 (rows without a transport fill what they leave).
	//
	// Prepared statements get custom plans at first and may switch to a
	// generic plan (parameters unknown) later: both must use the indexes.
	// The generic plan of a claim guesses "LIMIT $2" at a tenth of the
	// table; with stale statistics behind a large backlog it then prefers a
	// hash join to a nested loop, which "enable_nestloop = off" reproduces
	// on this small table.
	//
	// The look-ahead claim is the same statement with a window (1 ms here,
	// so it takes the same rows).
	for _, mode := range []string{"force_custom_plan", "force_generic_plan", "force_generic_plan, enable_nestloop = off"} {
		claimPlan := explain(t, pool, mode, postgres.ClaimSQL(p), testTransport, 100, time.Minute.Microseconds())
		aheadPlan := explain(t, pool, mode, postgres.AheadSQL(p), testTransport, 100, time.Minute.Microseconds(), int64(1000))
		nextPlan := explain(t, pool, mode, postgres.NextDueSQL(p), testTransport)
		t.Logf("%s claim plan:\n%s\nlook-ahead claim plan:\n%s\nnext-due plan:\n%s", mode, claimPlan, aheadPlan, nextPlan)
		for name, plan := range map[string]string{"claim": claimPlan, "look-ahead claim": aheadPlan, "next due": nextPlan} {
			if !strings.Contains(plan, "outgoing_messages_claim_idx") || strings.Contains(plan, "Seq Scan") {
				t.Errorf("%s: %s query does not use the (transport, available_at, id) index:\n%s", mode, name, plan)
			}
		}
		for name, plan := range map[string]string{"claim": claimPlan, "look-ahead claim": aheadPlan} {
			if !strings.Contains(plan, "rows=100 ") {
				t.Errorf("%s: %s did not lease 100 rows:\n%s", mode, name, plan)
			}
			checkPrimaryKeyOnce(t, mode, name, plan)
		}
	}
}

// checkPrimaryKeyOnce fails when a claim reaches the rows it leases
// through the primary key more than once: a nested loop that repeats the
// "id = ANY(...)" probe for every row costs the square of the batch.
func checkPrimaryKeyOnce(t *testing.T, mode, name, plan string) {
	t.Helper()
	for line := range strings.Lines(plan) {
		if strings.Contains(line, "outgoing_messages_pkey") && !strings.Contains(line, "loops=1)") {
			t.Errorf("%s: %s probes the primary key once per row:\n%s", mode, name, plan)
		}
	}
}

func explain(t *testing.T, pool interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, planMode, sql string, args ...any) string {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, setting := range strings.Split(planMode, ", ") {
		if !strings.Contains(setting, "=") {
			setting = "plan_cache_mode = " + setting
		}
		if _, err := tx.Exec(ctx, "SET LOCAL "+setting); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+sql, args...)
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	return strings.Join(lines, "\n")
}

// TestSetupWithoutCreateOnDatabase runs Setup as a role that may create
// tables in an existing schema but not schemas in the database, as
// application roles often are.
func TestSetupWithoutCreateOnDatabase(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	ctx := ctxTimeout(t, time.Minute)
	role := schema + "_app"
	q := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q(`CREATE ROLE ` + role + ` LOGIN`)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role+` CASCADE`)
		_, _ = pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	q(`CREATE SCHEMA ` + schema)
	q(`GRANT USAGE, CREATE ON SCHEMA ` + schema + ` TO ` + role)
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = role
	cfg.MaxConns = 2
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	p, err := postgres.New(app, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setup(ctx); err != nil {
		t.Fatalf("Setup as a role without CREATE on the database: %v", err)
	}
	store(t, p, ctx, "x", time.Now())
	mustClear(t, p, "x")
}

// TestSetupMigratesTablesOfEarlierVersions makes the table as versions
// without lease tokens and transports did, with a row in it, then runs
// Setup from several instances at once: the columns and the claim index are
// added, the old index is dropped, and the old row (no transport) is
// claimed by a dispatcher of any transport, under a token.
func TestSetupMigratesTablesOfEarlierVersions(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	schema := freshSchema(t, pool)
	ctx := ctxTimeout(t, time.Minute)
	table := pgx.Identifier{schema, "outgoing_messages"}.Sanitize()
	for _, stmt := range []string{
		`CREATE SCHEMA ` + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE ` + table + ` (
	id           text        COLLATE "C" PRIMARY KEY,
	kind         smallint    NOT NULL,
	envelope     bytea       NOT NULL,
	due_at       timestamptz NOT NULL,
	available_at timestamptz NOT NULL,
	lease_until  timestamptz,
	failures     integer     NOT NULL DEFAULT 0,
	last_error   text        NOT NULL DEFAULT '',
	created_at   timestamptz NOT NULL DEFAULT now()
)`,
		`CREATE INDEX outgoing_messages_available_at_idx ON ` + table + ` (available_at, id)`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	old := outgoing("stored-before-upgrade", time.Now().Add(-time.Second))
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, kind, envelope, due_at, available_at) VALUES ($1, $2, $3, $4, $4)`,
		old.ID, int16(old.Kind), old.Envelope, old.DueAt); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		p, err := postgres.New(pool, postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = p.Setup(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Setup %d on the old table: %v", i, err)
		}
	}
	rows, _ := pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname`, schema) // CollectRows reports its error
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"outgoing_messages_claim_idx", "outgoing_messages_due_idx", "outgoing_messages_failed_grp_idx",
		"outgoing_messages_failed_last_idx", "outgoing_messages_failed_pkey", "outgoing_messages_inbox_pkey",
		"outgoing_messages_inbox_purge_idx", "outgoing_messages_pkey", "outgoing_messages_recur_due_idx", "outgoing_messages_recurring_pkey", "outgoing_messages_runs_pkey", "outgoing_messages_sagas_pkey",
		"outgoing_messages_type_due_idx"}; strings.Join(indexes, " ") != strings.Join(want, " ") {
		t.Errorf("indexes after the migration = %v, want %v", indexes, want)
	}
	p, _ := postgres.New(pool, postgres.Options{Schema: schema})
	got, err := p.ClaimDueOutgoing(ctx, "any-transport", time.Now(), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != old.ID || got[0].Token == "" || got[0].Transport != "" {
		t.Fatalf("claim after the migration = %+v, %v; want the old row, with a token and no transport", got, err)
	}
	if n, err := p.DeleteOutgoing(ctx, claims(got)); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing after the migration = %d, %v; want 1", n, err)
	}
	// Once migrated, Setup only reads the catalog: no DDL, no lock that
	// would stall running dispatchers.
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	ddl := &statementLog{}
	cfg.ConnConfig.Tracer = ddl
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer traced.Close()
	again, _ := postgres.New(traced, postgres.Options{Schema: schema})
	if err := again.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ddl.sql) != 1 || !strings.HasPrefix(ddl.sql[0], "SELECT") {
		t.Errorf("Setup of a migrated table ran %q; want one catalog query", ddl.sql)
	}
}

// statementLog is a pgx tracer recording the SQL of every statement.
type statementLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sql = append(l.sql, d.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
