package main

import (
	"errors"
	"testing"
)

func TestRedoPosition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status map[string]string
		want   int64
		err    bool
	}{
		{"MariaDB: the current LSN before the bytes written", map[string]string{"Innodb_lsn_current": "44760", "Innodb_os_log_written": "356"}, 44760, false},
		{"MySQL 8.0.30", map[string]string{"Innodb_redo_log_current_lsn": "1234", "Innodb_os_log_written": "99"}, 1234, false},
		{"older MySQL: bytes written", map[string]string{"Innodb_os_log_written": "99"}, 99, false},
		{"spelled in lower case", map[string]string{"innodb_lsn_current": " 7 "}, 7, false},
		{"not a number", map[string]string{"Innodb_lsn_current": "lots"}, 0, true},
		{"none", map[string]string{"Uptime": "5"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := redoPosition(tc.status)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("redoPosition(%v) = %d, %v; want %d, error %v", tc.status, got, err, tc.want, tc.err)
			}
			if tc.name == "none" && !errors.Is(err, errNoRedoStatus) {
				t.Errorf("error %v, want errNoRedoStatus", err)
			}
		})
	}
}
