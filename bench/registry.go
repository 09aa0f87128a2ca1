package main

import (
	"context"
	"sort"
	"time"

	"github.com/postbus/bus"
)

// persistenceDriver opens one kind of persistence for a run.
type persistenceDriver struct {
	// shared: other processes see the same rows (needed by -instances).
	shared bool
	// storeCost is a generous guess of the time one scheduled message takes
	// to store, to size the lead time of burst and spread.
	storeCost time.Duration
	// serverProcs name the local server processes whose CPU is sampled.
	serverProcs []string
	// open returns the persistence of run, and a cleanup for the owner
	// (the parent process) to call at the end. Workers reopen the same
	// store with owner false.
	open func(ctx context.Context, o *options, run string, owner bool) (bus.Persistence, func(), error)
	// idleQueries, when set, counts the statements the server has run, to
	// report queries/s with nothing due.
	idleQueries func(ctx context.Context, o *options) (int64, error)
	// sessionPIDs, when set, lists the local server processes that serve
	// this run's connections (all of its processes), for the CPU they use.
	sessionPIDs func(ctx context.Context, o *options) ([]int, error)
	// nodes: sessionPIDs lists one server process per node (Redis), whose
	// CPU is also reported node by node.
	nodes bool
	// logPosition, when set, returns the server's write-ahead log position
	// in bytes (PostgreSQL's WAL, InnoDB's redo log): its growth over a
	// phase is the log the server wrote in it, for every client.
	logPosition func(ctx context.Context, o *options) (int64, error)
	// runLogBytes, when set, returns the log between two positions that
	// the run's own tables and transactions wrote.
	runLogBytes func(ctx context.Context, o *options, from, to int64) (runLog, error)
}

// runLog is the log a run's own tables and transactions wrote.
type runLog struct {
	bytes int64
	// fpiBytes is the part of bytes that is full-page images: the first
	// change to a page after a checkpoint logs the whole page, so this
	// part depends on when the server's checkpoints fell.
	fpiBytes int64
}

// transportDriver opens one kind of transport for a run.
type transportDriver struct {
	shared      bool
	serverProcs []string
	open        func(ctx context.Context, o *options, run string, owner bool) (bus.Transport, func(), error)
}

// persistences lists every persistence the bench knows. Drivers register in
// their own files (registry_<driver>.go) through extraPersistences.
func persistences() map[string]persistenceDriver {
	m := map[string]persistenceDriver{
		"memory": {
			storeCost: 10 * time.Microsecond,
			open: func(context.Context, *options, string, bool) (bus.Persistence, func(), error) {
				return bus.NewMemoryPersistence(), func() {}, nil
			},
		},
	}
	for name, d := range extraPersistences() {
		m[name] = d
	}
	return m
}

// transports lists every transport the bench knows.
func transports() map[string]transportDriver {
	m := map[string]transportDriver{
		"memory": {
			open: func(context.Context, *options, string, bool) (bus.Transport, func(), error) {
				return bus.NewMemoryTransport(), func() {}, nil
			},
		},
	}
	for name, d := range extraTransports() {
		m[name] = d
	}
	return m
}

func names[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
