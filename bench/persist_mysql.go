package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
	"github.com/postbus/bus/mysql"
)

// mysqlDSNEnv names the go-sql-driver DSN of -persistence mysql; default
// defaultMySQLDSN, the loopback MariaDB.
const (
	mysqlDSNEnv     = "POSTBUS_BENCH_MYSQL_DSN"
	defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test?interpolateParams=true"
)

func mysqlDSN() string {
	if d := os.Getenv(mysqlDSNEnv); d != "" {
		return d
	}
	return defaultMySQLDSN
}

// mysqlDriver stores each run in tables of its own, bench_<run> and the
// tables named after it, dropped by the owner at the end. The server's CPU
// is the whole mariadbd (or mysqld) process's, read from /proc: MariaDB
// has no per-session CPU figure.
func mysqlDriver() persistenceDriver {
	return persistenceDriver{
		shared:      true,
		storeCost:   300 * time.Microsecond,
		serverProcs: []string{"mariadbd", "mysqld"},
		logPosition: mysqlRedoPosition,
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Persistence, func(), error) {
			db, err := sql.Open("mysql", mysqlDSN())
			if err != nil {
				return nil, nil, fmt.Errorf("connect %s: %w", driver.Redact(mysqlDSN()), err)
			}
			// Handlers of the throughput workload each hold a connection
			// for their handling, with room for the dispatcher and sends.
			db.SetMaxOpenConns(max(16, o.concurrency+4))
			db.SetMaxIdleConns(max(16, o.concurrency+4))
			if err := db.PingContext(ctx); err != nil {
				_ = db.Close()
				return nil, nil, fmt.Errorf("connect %s: %w", driver.Redact(mysqlDSN()), err)
			}
			table := "bench_" + run
			p, err := mysql.New(db, mysql.Options{Table: table, Logger: o.logger})
			if err != nil {
				_ = db.Close()
				return nil, nil, err
			}
			cleanup := func() {
				if owner {
					cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					for _, s := range []string{"", "_inbox", "_sagas", "_failed", "_recurring", "_runs"} {
						if _, err := db.ExecContext(cctx, "DROP TABLE IF EXISTS `"+table+s+"`"); err != nil {
							o.logger.Error("cannot drop the run's table", "table", table+s, "error", err)
						}
					}
				}
				_ = db.Close()
			}
			return p, cleanup, nil
		},
	}
}
