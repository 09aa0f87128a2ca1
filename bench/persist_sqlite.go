package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// sqliteDriver stores each run in a new file in a temporary folder (or the
// file -sqlite-path names), removed by the owner at the end.
func sqliteDriver() persistenceDriver {
	return persistenceDriver{
		shared:    true,
		storeCost: 200 * time.Microsecond,
		open: func(_ context.Context, o *options, _ string, owner bool) (bus.Persistence, func(), error) {
			var tmp string
			if o.sqlitePath == "" {
				dir, err := os.MkdirTemp("", "postbus-bench-")
				if err != nil {
					return nil, nil, err
				}
				tmp = dir
				o.sqlitePath = filepath.Join(dir, "bench.db") // workers get this path
			}
			p, err := sqlite.Open(o.sqlitePath, sqlite.Options{Logger: o.logger})
			if err != nil {
				if tmp != "" {
					_ = os.RemoveAll(tmp)
				}
				return nil, nil, err
			}
			cleanup := func() {
				_ = p.Close()
				if owner && tmp != "" {
					_ = os.RemoveAll(tmp)
				}
			}
			return p, cleanup, nil
		},
	}
}
