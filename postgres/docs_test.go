package postgres

import (
	"flag"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/postbus/bus/internal/docblock"
)

var update = flag.Bool("update", false, "rewrite the SQL blocks of the docs from the code")

// The pages whose SQL and column tables these tests keep true. Each block
// is marked in the page by <!-- code: name --> on the line before it.
var (
	storeDoc     = filepath.Join("..", "docs", "guide", "postgres.md")
	transportDoc = filepath.Join("..", "docs", "transports", "postgres.md")
)

// joinSQL writes statements as a migration file holds them.
func joinSQL(stmts []string) string { return strings.Join(stmts, ";\n") + ";" }

// statementsMatching returns the statements that contain any of subs.
func statementsMatching(stmts []string, subs ...string) []string {
	var out []string
	for _, s := range stmts {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func statementCreating(t *testing.T, stmts []string, table string) string {
	t.Helper()
	m := statementsMatching(stmts, "CREATE TABLE IF NOT EXISTS "+table+" (")
	if len(m) != 1 {
		t.Fatalf("%d statements create %s", len(m), table)
	}
	return m[0]
}

var addColumnRE = regexp.MustCompile(`ADD COLUMN IF NOT EXISTS (\w+)`)

// columnsOf returns the columns a table has after the statements ran: those
// of its CREATE TABLE and those that ALTER TABLE adds.
func columnsOf(t *testing.T, stmts []string, table string) []string {
	t.Helper()
	cols := docblock.Columns(statementCreating(t, stmts, table))
	for _, s := range statementsMatching(stmts, "ALTER TABLE "+table+"\n", "ALTER TABLE "+table+" ") {
		for _, m := range addColumnRE.FindAllStringSubmatch(s, -1) {
			if !slices.Contains(cols, m[1]) {
				cols = append(cols, m[1])
			}
		}
	}
	return cols
}

// TestStoreDocShowsTheSQLTheStoreRuns keeps docs/guide/postgres.md true:
// its migration block is Migrations(), its upgrade block the statements of
// Migrations() that change an existing scheduled-message table, the saga
// table and the claim and delete statements are the ones the store runs,
// and its column table names every column of the table. Run it with
// -update to rewrite the blocks after a schema change.
func TestStoreDocShowsTheSQLTheStoreRuns(t *testing.T) {
	t.Parallel()
	stmts := Migrations()
	n := newNames(Options{}.withDefaults())
	sql := newStatements(n, false)
	upgrade := statementsMatching(stmts, "ALTER TABLE "+n.table, "DROP INDEX", " ON "+n.table+" (")
	docblock.Check(t, storeDoc, map[string]string{
		"migrations": joinSQL(stmts),
		"upgrade":    joinSQL(upgrade),
		"saga-table": statementCreating(t, stmts, n.sagas) + ";",
		"claim":      sql.claim,
		"delete":     sql.delete,
	}, *update)
	if diff := docblock.SameNames(docblock.Table(t, storeDoc, "columns"), columnsOf(t, stmts, n.table)); diff != "" {
		t.Errorf("%s: the column table of %s: %s", storeDoc, n.table, diff)
	}
}

// TestTransportDocShowsTheTransportSchema keeps docs/transports/postgres.md
// true: its DDL block is TransportMigrations of the defaults, and its
// column table names every column of the messages table.
func TestTransportDocShowsTheTransportSchema(t *testing.T) {
	t.Parallel()
	stmts, err := TransportMigrations(TransportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := newTNames(TransportOptions{}.withDefaults())
	docblock.Check(t, transportDoc, map[string]string{"transport-migrations": joinSQL(stmts)}, *update)
	if diff := docblock.SameNames(docblock.Table(t, transportDoc, "messages-columns"), columnsOf(t, stmts, n.messages)); diff != "" {
		t.Errorf("%s: the column table of %s: %s", transportDoc, n.messages, diff)
	}
}
