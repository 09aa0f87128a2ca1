package sqlite

import (
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postbus/bus/internal/docblock"
)

var update = flag.Bool("update", false, "rewrite the SQL blocks of the docs from the code")

// sqliteDoc is the page whose SQL and column tables these tests keep true.
// Each block is marked in the page by <!-- code: name --> on the line
// before it.
var sqliteDoc = filepath.Join("..", "docs", "persistence", "sqlite.md")

// schemaAfterSetup returns the CREATE statements of every table and index
// that Setup makes in a new database, in the order it made them, as SQLite
// keeps them in sqlite_schema (without IF NOT EXISTS), keyed by name.
func schemaAfterSetup(t *testing.T) (stmts []string, byName map[string]string) {
	t.Helper()
	ctx := context.Background()
	p, err := Open(filepath.Join(t.TempDir(), "docs.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	if err := p.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := p.DB().QueryContext(ctx, `SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	byName = map[string]string{}
	for rows.Next() {
		var name, stmt string
		if err := rows.Scan(&name, &stmt); err != nil {
			t.Fatal(err)
		}
		stmts = append(stmts, stmt)
		byName[name] = stmt
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return stmts, byName
}

// TestSQLiteDocShowsTheSchemaSetupCreates keeps docs/persistence/sqlite.md
// true: its schema block is what Setup creates in a new file, its saga
// block the saga table, its upgrade blocks the columns Setup adds to a
// scheduled-message or recurring table of an earlier version, and its
// column tables name every column of the scheduled-message, saga and
// recurring tables. Run it with -update to rewrite the blocks after
// a schema change.
func TestSQLiteDocShowsTheSchemaSetupCreates(t *testing.T) {
	t.Parallel()
	stmts, byName := schemaAfterSetup(t)
	q := newQueries(DefaultTable)
	var upgrade []string
	for _, c := range q.addColumns {
		upgrade = append(upgrade, c.ddl)
	}
	saga, ok := byName[q.sagas.sql.Table]
	if !ok {
		t.Fatalf("Setup made no table %s", q.sagas.sql.Table)
	}
	var recurringUpgrade []string
	for _, c := range recurringAddColumns(DefaultTable) {
		recurringUpgrade = append(recurringUpgrade, c.ddl)
	}
	docblock.Check(t, sqliteDoc, map[string]string{
		"schema":            strings.Join(stmts, ";\n") + ";",
		"saga-table":        saga + ";",
		"upgrade":           strings.Join(upgrade, ";\n") + ";",
		"recurring-upgrade": strings.Join(recurringUpgrade, ";\n") + ";",
	}, *update)
	if diff := docblock.SameNames(docblock.Table(t, sqliteDoc, "columns"), docblock.Columns(byName[DefaultTable])); diff != "" {
		t.Errorf("%s: the column table of %s: %s", sqliteDoc, DefaultTable, diff)
	}
	if diff := docblock.SameNames(docblock.Table(t, sqliteDoc, "saga-columns"), docblock.Columns(saga)); diff != "" {
		t.Errorf("%s: the column table of %s: %s", sqliteDoc, q.sagas.sql.Table, diff)
	}
	recurring := DefaultTable + "_recurring"
	if diff := docblock.SameNames(docblock.Table(t, sqliteDoc, "recurring-columns"), docblock.Columns(byName[recurring])); diff != "" {
		t.Errorf("%s: the column table of %s: %s", sqliteDoc, recurring, diff)
	}
}
