package mysql

import (
	mysqldriver "github.com/go-sql-driver/mysql"
)

// RedactDSN returns dsn, a go-sql-driver/mysql DSN
// ("user:password@tcp(host:port)/database?param=value"), with its password
// replaced by "xxxxx", for logs and error messages. A DSN that does not
// parse is returned as "(unparsable DSN)", since it may hold a password
// anywhere.
func RedactDSN(dsn string) string {
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
	}
	return cfg.FormatDSN()
}
