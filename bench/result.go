package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Result is one run's figures: one JSON line on standard output.
type Result struct {
	Workload    string `json:"workload"`
	Persistence string `json:"persistence"`
	Transport   string `json:"transport"`
	N           int    `json:"n"`
	Senders     int    `json:"senders,omitempty"`
	Instances   int    `json:"instances,omitempty"`
	// Duration is the measured phase: scheduling (schedule), the SendBatch
	// call (schedule-batch), t0 to the last
	// receipt (burst), first due to last receipt (spread, backlog), first
	// send to last receipt (throughput).
	DurationMS float64 `json:"duration_ms"`
	MsgsPerSec float64 `json:"msgs_per_s"`
	// ScheduleMsgsPerSec is how fast the messages were stored before the
	// measured phase (burst, spread, backlog).
	ScheduleMsgsPerSec float64 `json:"schedule_msgs_per_s,omitempty"`
	// CPUPerMsgUS is the CPU time this process (and its workers) used in
	// the measured phase per message, in microseconds: unlike the rates, it
	// hardly depends on what else the machine is running.
	CPUPerMsgUS float64 `json:"cpu_us_per_msg,omitempty"`
	// ScheduleCPUPerMsgUS is the CPU time this process used per message
	// while it scheduled them, before the measured phase (burst, spread,
	// backlog): the Sends, which CPUPerMsgUS does not count.
	ScheduleCPUPerMsgUS float64      `json:"schedule_cpu_us_per_msg,omitempty"`
	Lateness            *Percentiles `json:"lateness_ms,omitempty"`
	Latency             *Percentiles `json:"latency_ms,omitempty"`
	Early               int          `json:"early"`
	Duplicates          int          `json:"duplicates"`
	Missing             int          `json:"missing"`
	IDMismatches        int          `json:"id_mismatches,omitempty"`
	Unexpected          int          `json:"unexpected,omitempty"`
	BodyBytes           int          `json:"body_bytes"`
	// HeapBytesPerMsg is the heap growth per scheduled message, and
	// HeapBeyondBody the same less the serialized body (memory store only).
	HeapBytesPerMsg float64 `json:"heap_bytes_per_msg,omitempty"`
	HeapBeyondBody  float64 `json:"heap_beyond_body,omitempty"`
	// Backlog workload: rows scheduled an hour ahead, lateness of the same
	// spread without them, and the process's idle CPU (percent of one core)
	// without and with them.
	Backlog             int          `json:"backlog,omitempty"`
	BacklogMsgsPerSec   float64      `json:"backlog_schedule_msgs_per_s,omitempty"`
	BaselineLateness    *Percentiles `json:"baseline_lateness_ms,omitempty"`
	LatenessMoved       *bool        `json:"lateness_moved,omitempty"`
	IdleCPUPercent      *float64     `json:"idle_cpu_percent,omitempty"`
	IdleCPUBaseline     *float64     `json:"idle_cpu_percent_baseline,omitempty"`
	ServerCPUMS         *float64     `json:"server_cpu_ms,omitempty"`
	ServerCPUMSPer1k    *float64     `json:"server_cpu_ms_per_1k,omitempty"`
	ServerIdleCPUPct    *float64     `json:"server_idle_cpu_percent,omitempty"`
	ServerIdleQueriesPS *float64     `json:"server_idle_queries_per_s,omitempty"`
	// Recurring workload: schedules of Every(1s) measured ticking, the row
	// writes and scans of the run's tables and the CPU of the run's
	// database sessions per tick delivered, and hourly schedules declared
	// while the idle cost is measured.
	Schedules           int      `json:"schedules,omitempty"`
	WritesPerTick       *float64 `json:"store_row_writes_per_tick,omitempty"`
	ScansPerTick        *float64 `json:"store_scans_per_tick,omitempty"`
	SessionCPUPerTickUS *float64 `json:"server_session_cpu_us_per_tick,omitempty"`
	IdleSchedules       int      `json:"idle_schedules,omitempty"`
	// Runtime-recurring workload: the schedules' interval and the ticks
	// due a second in the measured window (MsgsPerSec: those whose
	// handling started in it, the divisor of the CPU per tick); how long
	// making the -n ticking schedules took and their rate; the baseline's
	// delayed messages and their sessions' CPU each (their lateness is
	// BaselineLateness); the ratio of the CPU per tick (SessionCPUPerTickUS)
	// to it; the time from their making until a dispatcher had first
	// stepped them all; the idle cost by number of schedules stored; and the latency
	// of a ListRecurrings page.
	TickEvery                  string        `json:"tick_every,omitempty"`
	TicksDuePerSec             float64       `json:"ticks_due_per_s,omitempty"`
	CreateMS                   float64       `json:"create_ms,omitempty"`
	CreatePerSec               float64       `json:"create_per_s,omitempty"`
	FirstStepsMS               float64       `json:"first_steps_ms,omitempty"`
	BaselineMessages           int           `json:"baseline_messages,omitempty"`
	BaselineSessionCPUPerMsgUS *float64      `json:"baseline_session_cpu_us_per_msg,omitempty"`
	TickCPURatio               *float64      `json:"tick_cpu_ratio,omitempty"`
	RuntimeIdle                []RuntimeIdle `json:"idle_by_schedules,omitempty"`
	ListLatency                *Percentiles  `json:"list_latency_ms,omitempty"`
	// StoreScansPer1k is the index and table scans of the run's own tables
	// (PostgreSQL) while the messages fell due, per 1,000 received: the
	// store's work, untouched by other databases' traffic on the server.
	StoreScansPer1k *float64 `json:"store_scans_per_1k,omitempty"`
	// SessionCPUMS is the CPU time of the server processes serving the
	// run's own connections (PostgreSQL backends, found by the run's
	// application_name) while the messages fell due: the store's work for
	// this run alone, without other clients or the server's background
	// processes.
	SessionCPUMS *float64 `json:"server_session_cpu_ms,omitempty"`
	// LogBytesPerMsg is the growth of the server's write-ahead log
	// (PostgreSQL: pg_current_wal_insert_lsn; MySQL/MariaDB: the InnoDB
	// redo log's LSN) from the end of scheduling until just after the last
	// receipt, per message received: what claiming, handing over and
	// deleting the rows wrote. The log is the whole server's, so other
	// clients' writes in the window count too.
	LogBytesPerMsg *float64 `json:"log_bytes_per_msg,omitempty"`
	// RunLogBytesPerMsg is the part of that log written by the run's own
	// tables and transactions (PostgreSQL, read with pg_walinspect): the
	// records that name a relation of the run's schema, and every record
	// of the transactions that wrote them (their commits), per message
	// received. Other clients' writes do not count.
	RunLogBytesPerMsg *float64 `json:"run_log_bytes_per_msg,omitempty"`
	// RunLogFPIBytesPerMsg is the part of RunLogBytesPerMsg that is
	// full-page images. The first change to a page after a checkpoint logs
	// the whole page, so this part moves with when the server's
	// checkpoints fell (every 5 minutes, or sooner when other clients
	// write much); the rest, the records themselves, is what a build's
	// statements write.
	RunLogFPIBytesPerMsg *float64 `json:"run_log_fpi_bytes_per_msg,omitempty"`
	// NodeCPUMSPer1k is the CPU time of each server node (Redis: each
	// redis-server process), in milliseconds per 1,000 messages received,
	// while the batch fell due.
	NodeCPUMSPer1k []float64 `json:"server_node_cpu_ms_per_1k,omitempty"`
	// Throughput on PostgreSQL: whether the handler ran in the outbox, the
	// Ticked events received, the time from the handler's end (its commit)
	// to each event's receipt, and the business rows written.
	Outbox          bool         `json:"outbox,omitempty"`
	Events          int          `json:"events,omitempty"`
	CommitToReceipt *Percentiles `json:"commit_to_receipt_ms,omitempty"`
	BusinessRows    *int         `json:"business_rows,omitempty"`
	// Saga workload: instances completed per second, handler runs repeated
	// on a conflict, instances whose final state missed or doubled a step,
	// and the steps the instance sent 50 at once saw.
	SagaInstancesPerSec float64 `json:"saga_instances_per_s,omitempty"`
	SagaConflicts       *uint64 `json:"saga_conflicts,omitempty"`
	SagaLostUpdates     *int    `json:"saga_lost_updates,omitempty"`
	SagaHotCount        *int    `json:"saga_hot_count,omitempty"`
	GoVersion           string  `json:"go_version"`
	// LoadAvg is the machine's 1-minute load average when the run started:
	// other work on the machine skews every figure.
	LoadAvg float64 `json:"load_avg_1m"`
	Note    string  `json:"note,omitempty"`
}

// Percentiles of a duration distribution, in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// percentiles returns nearest-rank percentiles of ds (sorted in place), or
// nil when ds is empty.
func percentiles(ds []time.Duration) *Percentiles {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ms(ds[max(i, 0)])
	}
	return &Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ms(ds[len(ds)-1])}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// cpuPerMsg is CPU time per message in microseconds.
func cpuPerMsg(cpu time.Duration, n int) float64 {
	if n <= 0 {
		return 0
	}
	return round(float64(cpu)/1e3/float64(n), 2)
}

func ptr[T any](v T) *T { return &v }

// Failed reports whether the run lost, duplicated or advanced a message.
func (r *Result) Failed() bool {
	return r.Early != 0 || r.Duplicates != 0 || r.Missing != 0 || r.IDMismatches != 0 || r.Unexpected != 0 ||
		(r.BusinessRows != nil && *r.BusinessRows != r.N)
}

// applyTally copies a tracker's counts into r.
func (r *Result) applyTally(t tally) {
	r.Early += t.Early
	r.Duplicates += t.Duplicates
	r.Missing += t.Missing
	r.IDMismatches += t.Mismatched
	r.Unexpected += t.Unexpected
}

func (r *Result) writeJSON(w io.Writer) error {
	line, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

const markdownHeader = "| workload | persistence | transport | n | duration | msgs/s | p50 ms | p90 ms | p99 ms | max ms | early | dup | missing | notes |\n" +
	"|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"

func (r *Result) markdownRow() string {
	p := r.Lateness
	if p == nil {
		p = r.Latency
	}
	cell := func(f func(*Percentiles) float64) string {
		if p == nil {
			return "–"
		}
		return fmt.Sprintf("%.2f", f(p))
	}
	store := r.Persistence
	if r.Instances > 0 {
		store += fmt.Sprintf(" ×%d proc", r.Instances)
	}
	return fmt.Sprintf("| %s | %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %d | %d | %d | %s |",
		r.Workload, store, r.Transport, r.N, time.Duration(r.DurationMS*1e6).Round(time.Millisecond), r.MsgsPerSec,
		cell(func(p *Percentiles) float64 { return p.P50 }), cell(func(p *Percentiles) float64 { return p.P90 }),
		cell(func(p *Percentiles) float64 { return p.P99 }), cell(func(p *Percentiles) float64 { return p.Max }),
		r.Early, r.Duplicates, r.Missing, r.notes())
}

func (r *Result) notes() string {
	var n []string
	if r.HeapBytesPerMsg > 0 {
		n = append(n, fmt.Sprintf("heap %.0f B/msg (%.0f beyond %d B body)", r.HeapBytesPerMsg, r.HeapBeyondBody, r.BodyBytes))
	}
	if r.CPUPerMsgUS > 0 {
		n = append(n, fmt.Sprintf("%.1f µs CPU/msg", r.CPUPerMsgUS))
	}
	if r.ScheduleMsgsPerSec > 0 {
		n = append(n, fmt.Sprintf("scheduled at %.0f/s", r.ScheduleMsgsPerSec))
	}
	if r.Latency != nil {
		n = append(n, fmt.Sprintf("latency %d B bodies", r.BodyBytes))
	}
	if r.Backlog > 0 {
		n = append(n, fmt.Sprintf("backlog %d", r.Backlog))
		if b := r.BaselineLateness; b != nil {
			n = append(n, fmt.Sprintf("p99 without backlog %.2f ms", b.P99))
		}
		if r.IdleCPUBaseline != nil && r.IdleCPUPercent != nil {
			n = append(n, fmt.Sprintf("idle CPU %.2f%% → %.2f%% of a core", *r.IdleCPUBaseline, *r.IdleCPUPercent))
		}
	}
	if r.Schedules > 0 {
		n = append(n, fmt.Sprintf("%d schedules of %s", r.Schedules, cmp.Or(r.TickEvery, "1s")))
	}
	if r.TicksDuePerSec > 0 {
		n = append(n, fmt.Sprintf("%.0f ticks due/s", r.TicksDuePerSec))
	}
	if r.CreatePerSec > 0 {
		n = append(n, fmt.Sprintf("made in %s (%.0f/s), all stepped %s later", time.Duration(r.CreateMS*1e6).Round(time.Millisecond),
			r.CreatePerSec, time.Duration(r.FirstStepsMS*1e6).Round(time.Millisecond)))
	}
	if b := r.BaselineLateness; b != nil && r.BaselineMessages > 0 {
		n = append(n, fmt.Sprintf("baseline %d delayed msgs p99 %.2f ms", r.BaselineMessages, b.P99))
		if r.BaselineSessionCPUPerMsgUS != nil {
			n = append(n, fmt.Sprintf("baseline sessions %.0f µs CPU/msg", *r.BaselineSessionCPUPerMsgUS))
		}
	}
	if r.TickCPURatio != nil {
		n = append(n, fmt.Sprintf("CPU/tick ÷ CPU/msg %.2f", *r.TickCPURatio))
	}
	for _, idle := range r.RuntimeIdle {
		n = append(n, idle.note())
	}
	if p := r.ListLatency; p != nil {
		n = append(n, fmt.Sprintf("list page p50 %.2f p99 %.2f ms", p.P50, p.P99))
	}
	if r.WritesPerTick != nil {
		n = append(n, fmt.Sprintf("%.2f row writes and %.2f scans per tick", *r.WritesPerTick, *r.ScansPerTick))
	}
	if r.SessionCPUPerTickUS != nil {
		n = append(n, fmt.Sprintf("run's sessions %.0f µs CPU per tick", *r.SessionCPUPerTickUS))
	}
	if r.IdleSchedules > 0 {
		n = append(n, fmt.Sprintf("idle with %d hourly schedules", r.IdleSchedules))
	}
	if r.ServerCPUMSPer1k != nil {
		n = append(n, fmt.Sprintf("server CPU %.0f ms/1k msgs", *r.ServerCPUMSPer1k))
	}
	if r.SessionCPUMS != nil {
		n = append(n, fmt.Sprintf("run's sessions %.0f ms CPU", *r.SessionCPUMS))
	}
	if r.LogBytesPerMsg != nil {
		n = append(n, fmt.Sprintf("server log %.0f B/msg", *r.LogBytesPerMsg))
	}
	if r.RunLogBytesPerMsg != nil {
		n = append(n, fmt.Sprintf("run's own log %.0f B/msg (%.0f of full pages)", *r.RunLogBytesPerMsg, *r.RunLogFPIBytesPerMsg))
	}
	if len(r.NodeCPUMSPer1k) > 0 {
		n = append(n, fmt.Sprintf("server CPU per node %v ms/1k msgs", r.NodeCPUMSPer1k))
	}
	if r.StoreScansPer1k != nil {
		n = append(n, fmt.Sprintf("%.0f store scans/1k msgs", *r.StoreScansPer1k))
	}
	if r.ServerIdleCPUPct != nil {
		n = append(n, fmt.Sprintf("server idle CPU %.2f%%", *r.ServerIdleCPUPct))
	}
	if r.ServerIdleQueriesPS != nil {
		n = append(n, fmt.Sprintf("%.1f idle queries/s", *r.ServerIdleQueriesPS))
	}
	if r.BusinessRows != nil {
		mode := "autocommit"
		if r.Outbox {
			mode = "outbox"
		}
		n = append(n, fmt.Sprintf("%s: %d rows, %d events", mode, *r.BusinessRows, r.Events))
	}
	if p := r.CommitToReceipt; p != nil {
		n = append(n, fmt.Sprintf("commit→receipt p50 %.2f p99 %.2f max %.2f ms", p.P50, p.P99, p.Max))
	}
	if r.Note != "" {
		n = append(n, r.Note)
	}
	return strings.Join(n, "; ")
}

// note is the idle figure in a Markdown row's notes.
func (i RuntimeIdle) note() string {
	parts := []string{fmt.Sprintf("idle with %d: self %.2f%%", i.Schedules, i.SelfCPUPct)}
	if i.SessionCPUPct != nil {
		parts = append(parts, fmt.Sprintf("sessions %.2f%%", *i.SessionCPUPct))
	}
	if i.ServerCPUPct != nil {
		parts = append(parts, fmt.Sprintf("server %.2f%%", *i.ServerCPUPct))
	}
	if i.QueriesPS != nil {
		parts = append(parts, fmt.Sprintf("%.1f scans/s", *i.QueriesPS))
	}
	return strings.Join(parts, ", ")
}
