package mysql

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postbus/bus/internal/docblock"
)

var update = flag.Bool("update", false, "rewrite the SQL blocks of the docs from the code")

// mysqlDoc is the page whose SQL these tests keep true.
var mysqlDoc = filepath.Join("..", "docs", "persistence", "mysql.md")

// TestMySQLDocShowsTheSchemaSetupCreates keeps docs/persistence/mysql.md
// true: its schema block is Migrations(). Run it with -update to rewrite
// the block after a schema change.
func TestMySQLDocShowsTheSchemaSetupCreates(t *testing.T) {
	t.Parallel()
	docblock.Check(t, mysqlDoc, map[string]string{"schema": strings.Join(Migrations(), ";\n\n") + ";"}, *update)
}
