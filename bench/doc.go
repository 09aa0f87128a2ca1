// Command bench measures Postbus's delayed delivery and send→handler
// throughput on a chosen persistence and transport, and checks on every run
// that no message was lost, duplicated or delivered early.
//
//	go run ./bench -workload burst -persistence memory -transport memory -n 100000
//
// Each run prints one JSON line on standard output; with -markdown it also
// prints a Markdown table row (-markdown-header prints the table's header).
// The process exits 1 when any message was missing, duplicated or early, and
// 2 when the run could not be made at all (bad flags, unreachable server).
//
// # Workloads
//
//   - schedule: -senders goroutines (default 64) call Send with
//     DeliverAfter(1h) n times in all. Reports messages/s and, for the memory
//     store, the heap bytes each scheduled message costs beyond its body
//     (runtime.ReadMemStats after a GC, before and after, divided by n).
//   - schedule-batch: one Bus.SendBatch call of n messages (default
//     100,000), each with DeliverAfter(-lead; default 2s + 10µs a
//     message). Reports messages (rows) per second of the call, this
//     process's CPU per message and the server's CPU during the call; then
//     waits for every message to be delivered once, none early.
//   - burst: n messages all due at one instant t0, scheduled first with
//     DeliverAt(t0) and a lead time long enough to store them all. Reports
//     the drain time from t0 until the last one was handled, messages/s, and
//     lateness percentiles.
//   - spread: n messages due uniformly over -over (default 10s). Reports
//     lateness p50/p90/p99/max and the early count.
//   - backlog: spread without a backlog, then -backlog rows scheduled an hour
//     ahead, then spread again; reports both lateness figures and the
//     process's CPU use over -idle seconds with nothing due, before and after
//     the backlog was stored. -backlog-batch N stores the backlog with
//     SendBatch calls of N messages, for backlogs of millions of rows.
//   - throughput: immediate Send→handler round trips with -body byte bodies
//     (default 1 KiB) from -concurrency senders (default 8; -senders, when
//     given, sets them apart from the handlers' -concurrency), with at most
//     -inflight messages sent but not yet handled. Reports messages/s and
//     latency (handled time − SentAt) percentiles. On -persistence postgres
//     each handling also INSERTs one row into a table of the run's schema
//     and publishes one Ticked event to a second endpoint on the same
//     transport; the run waits for every event and reports the time from
//     the handler's end to the event's receipt (commit→receipt), and checks
//     one business row per message. -outbox runs that handling in the
//     transactional outbox (Config.Outbox, postgres.Tx); without it the
//     INSERT autocommits on the pool and the event is published at once.
//   - runtime-recurring: schedules made at runtime (Bus.SetRecurring), in
//     four phases. A baseline of delayed messages at the rate the
//     schedules will tick (n per -tick-every, default 1m), each
//     DeliverAfter(3s), for a minute or -tick-for when shorter: the run's
//     database sessions' CPU per message and lateness. The idle cost with
//     about 1% of n (at most 1,000) and then n schedules of "@every 1h"
//     that start two days later, so no tick falls in the run: this
//     process's, the run's sessions' and the server's CPU and the scans of
//     the run's tables per second over -idle. 50 ListRecurrings calls for
//     a page of 100 in the middle of those n. Then n schedules of
//     "@every <-tick-every>" with a Jitter of the whole interval, made with
//     SetRecurring from -senders goroutines (default 8) on a send-only bus
//     (how long that took), measured over -tick-for rounded to whole
//     intervals from a multiple of -tick-every: every tick of the window
//     received once (keyed by the HeaderRecurringName and
//     HeaderRecurringTick of each occurrence), none early, lateness, the
//     sessions' CPU per tick and its ratio to the baseline's per message.
//
// # Measurements
//
// Lateness is the handler's time.Now() minus the DueAt of the envelope it
// received (bus.IncomingMessage), so it covers the store, the dispatcher, the
// transport and the handler queue. A negative lateness is counted as early.
// Every message carries its sequence number; receipts are counted per
// sequence number and the message ID seen first is kept, so a later receipt
// with the same ID counts as a duplicate, a receipt with another ID as an ID
// mismatch, and a sequence number never received as missing.
//
// Server CPU (server_cpu_ms) is the user+system time of the local server
// processes of the chosen backends (postgres, beam.smp, nats-server) read
// from /proc before and after the measured phase: this is only meaningful
// because the servers run on the same machine. On Redis
// (server_node_cpu_ms_per_1k) it is each redis-server process's, found by
// INFO server's process_id: -persistence redis-cluster starts a throwaway
// cluster of -redis-masters masters for the run and stops it at the end.
//
// Server log (log_bytes_per_msg, burst, spread and backlog on PostgreSQL and
// MySQL/MariaDB) is the growth of the server's write-ahead log over the
// measured phase, read once more after the duplicate grace so that the
// last deletes count, per message received: PostgreSQL's WAL insert
// position (pg_current_wal_insert_lsn, exact when read, where pg_stat_wal
// lags by up to ten seconds), InnoDB's redo log sequence number
// (Innodb_lsn_current; Innodb_os_log_written where the server has no LSN
// status). Both are the whole server's: other clients' writes count too.
// On PostgreSQL run_log_bytes_per_msg is the run's own part, read with
// pg_walinspect (created in a schema of its own, postbus_bench_walinspect,
// when the database has none): the records that name a relation of the
// run's schema and every record of the transactions that wrote one, and
// run_log_fpi_bytes_per_msg the full-page images among them, which depend
// on when the server's checkpoints fell.
//
// # Comparing two builds
//
// pairs.sh runs one workload alternately with two builds, A and B, in one
// sitting and prints a Markdown table of every run and the medians of each
// build (drain rate, p99 lateness, bus, server and session CPU and log
// bytes per message, the load at each run's start):
//
//	bench/pairs.sh /src/before /src/after -workload burst -persistence postgres -n 100000 -lead 30s
//
// A source tree is built with this folder's bench against the tree's own
// modules, so the two builds differ in the library only.
//
// # Backends
//
// -persistence and -transport pick entries of a small registry (see
// registry.go): memory for both, and the drivers' packages where they exist.
// Each run that uses a server isolates itself: a fresh PostgreSQL schema, a
// fresh SQLite file, a Redis key prefix, or an endpoint name with a random
// suffix.
//
// # Several processes
//
// -instances K (burst, spread and backlog) re-executes this binary K times as worker
// processes: each is a full bus with its own dispatcher on the shared store
// and a handler that writes one JSON line per receipt to its standard output,
// with the lateness it measured itself (one machine, one clock). The parent
// only schedules (a send-only bus) and gathers the lines. With the memory
// transport each worker hands what it claimed to its own in-process queue,
// so the figures measure the store and dispatchers across processes, not a
// shared broker.
package main
