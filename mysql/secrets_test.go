package mysql_test

import (
	"database/sql"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/mysql"
)

// A bus on a store whose DSN holds a password the server refuses (access
// denied), or on a closed port, shows the password nowhere: not in its
// log at Debug, not in the errors of its calls, not in Metrics.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	testDB(t) // skips when the server is absent
	base, err := mysqldriver.ParseDSN(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"access denied": base.Addr, "closed port": bustest.DeadAddr(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := base.Clone()
			cfg.Passwd, cfg.Addr, cfg.Timeout = drivertest.Password, addr, 3*time.Second
			dsn := cfg.FormatDSN()
			e := drivertest.NewExposure()
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			e.AddErr("Ping", db.PingContext(t.Context()))
			p, err := mysql.New(db, mysql.Options{Table: freshTable(), Logger: e.Log})
			if err != nil {
				t.Fatal(err)
			}
			e.AddErr("Setup", p.Setup(t.Context()))
			e.RunBus(t, bus.Config{Endpoint: "secrets-" + bustest.Namespace(), Persistence: p}, 10*time.Second)
			if e.Errors() < 3 {
				t.Errorf("only %d errors: the DSN was accepted, so the test proves nothing", e.Errors())
			}
			e.NoPassword(t)
		})
	}
}
