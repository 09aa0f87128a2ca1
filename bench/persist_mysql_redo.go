package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// redoStatus names the SHOW GLOBAL STATUS variables that give the InnoDB
// redo log's position in bytes, the best first: MariaDB's current LSN,
// MySQL 8.0.30's, then the bytes written to the log files, which every
// version has.
var redoStatus = []string{"Innodb_lsn_current", "Innodb_redo_log_current_lsn", "Innodb_os_log_written"}

// errNoRedoStatus reports a server that shows none of redoStatus.
var errNoRedoStatus = errors.New("no InnoDB redo log position in SHOW GLOBAL STATUS")

// mysqlRedoPosition returns the InnoDB redo log position of the server at
// the bench's DSN, in bytes.
func mysqlRedoPosition(ctx context.Context, _ *options) (int64, error) {
	db, err := sql.Open("mysql", mysqlDSN())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('"+strings.Join(redoStatus, "','")+"')")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	status := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return 0, err
		}
		status[name] = value
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return redoPosition(status)
}

// redoPosition picks the redo log position out of status variables
// (names matched case-insensitively, as servers spell them differently).
func redoPosition(status map[string]string) (int64, error) {
	for _, name := range redoStatus {
		for k, v := range status {
			if !strings.EqualFold(k, name) {
				continue
			}
			pos, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s = %q: %w", k, v, err)
			}
			return pos, nil
		}
	}
	return 0, errNoRedoStatus
}
