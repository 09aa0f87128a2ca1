package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// options are the command-line flags.
type options struct {
	workload string
	// sagaMessages is the steps per instance of the saga workload.
	sagaMessages int
	persistence  string
	transport    string
	n            int
	senders      int
	// sendersGiven: -senders was on the command line; throughput then
	// uses it instead of -concurrency for its senders.
	sendersGiven bool
	over         time.Duration
	lead         time.Duration
	backlog      int
	// backlogBatch: store the backlog with SendBatch calls of this many
	// messages instead of one Send each (0).
	backlogBatch int
	// tickFor and idleSchedules shape the recurring workload.
	tickFor       time.Duration
	idleSchedules int
	// tickEvery is the runtime-recurring schedules' interval.
	tickEvery   time.Duration
	idle        time.Duration
	concurrency int
	// rate paces the throughput workload's senders to this many messages
	// a second in all; 0 sends as fast as they can.
	rate      float64
	handlers  int
	inflight  int
	body      int
	instances int
	timeout   time.Duration
	markdown  bool
	mdHeader  bool
	// outbox: throughput runs its PostgreSQL handler in the transactional
	// outbox (Config.Outbox) instead of autocommit.
	outbox     bool
	cpuprofile string
	memprofile string

	postgresURL string
	// postgresNoNotify sets postgres.Options.DisableNotify.
	postgresNoNotify bool
	rabbitmqURL      string
	natsURL          string
	kafkaSeeds       string
	sqlitePath       string
	mongodbURI       string
	// redisMasters is the number of masters of -persistence redis-cluster.
	redisMasters int
	// redisClusterAddrs are the nodes of the run's Redis Cluster, set by
	// the redis-cluster driver when it started them.
	redisClusterAddrs []string

	// logger is the stage's logger, for drivers that take one.
	logger *slog.Logger
	// pgPool is the PostgreSQL store's pool, set by the postgres driver in
	// the owner process: the throughput handler's business INSERTs use it.
	pgPool *pgxpool.Pool

	// Worker mode (set by the parent when it re-executes the binary).
	worker   bool
	run      string
	verbose  bool
	dispatch dispatchTuning
}

// dispatchTuning overrides bus.DispatcherConfig fields; zero keeps the
// bus's defaults, which is what the published figures use.
type dispatchTuning struct {
	batch       int
	concurrency int
	poll        time.Duration
}

// defaultN is the n of a workload when -n is not given, and false for an
// unknown workload.
func defaultN(workload string) (int, bool) {
	switch workload {
	case "schedule":
		return 200_000, true
	case "schedule-batch":
		return 100_000, true
	case "burst":
		return 100_000, true
	case "spread", "backlog":
		return 5_000, true
	case "throughput":
		return 50_000, true
	case "saga":
		return 1_000, true
	case "recurring":
		return 1_000, true
	case "runtime-recurring":
		return 10_000, true
	}
	return 0, false
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.workload, "workload", "burst", "schedule, schedule-batch, burst, spread, backlog, throughput, saga, recurring or runtime-recurring")
	fs.StringVar(&o.persistence, "persistence", "memory", "scheduled-message store: "+fmt.Sprint(names(persistences())))
	fs.StringVar(&o.transport, "transport", "memory", "transport: "+fmt.Sprint(names(transports())))
	fs.IntVar(&o.n, "n", 0, "messages per run (0: 200000 schedule, 100000 schedule-batch and burst, 5000 spread and backlog, 50000 throughput)")
	fs.IntVar(&o.senders, "senders", 64, "concurrent goroutines calling Send while scheduling (throughput: only when given; else -concurrency)")
	fs.DurationVar(&o.over, "over", 10*time.Second, "spread: the window the due times are spread over")
	fs.DurationVar(&o.lead, "lead", 0, "burst/spread: time from the start of scheduling to the first due time (0: sized from n and the store); schedule-batch: the messages' DeliverAfter (0: 2s + 10µs a message)")
	fs.IntVar(&o.backlog, "backlog", 1_000_000, "backlog: rows scheduled an hour ahead")
	fs.IntVar(&o.backlogBatch, "backlog-batch", 0, "backlog: store the backlog with SendBatch calls of this many messages (0: one Send each, from -senders goroutines)")
	fs.DurationVar(&o.idle, "idle", 5*time.Second, "backlog, recurring, runtime-recurring: how long idle CPU is measured")
	fs.DurationVar(&o.tickFor, "tick-for", 10*time.Second, "recurring: how long the -n schedules of Every(1s) are measured ticking; runtime-recurring: of -tick-every, and the baseline's span when under a minute")
	fs.DurationVar(&o.tickEvery, "tick-every", time.Minute, "runtime-recurring: the interval of the -n schedules (each jittered over the whole interval); -tick-for is rounded to whole intervals")
	fs.IntVar(&o.idleSchedules, "idle-schedules", 10_000, "recurring: hourly schedules declared while the idle cost is measured")
	fs.IntVar(&o.concurrency, "concurrency", 8, "throughput: handler concurrency, and concurrent senders unless -senders is given")
	fs.Float64Var(&o.rate, "rate", 0, "throughput: send this many messages a second in all, paced (0: as fast as the senders can)")
	fs.IntVar(&o.handlers, "handlers", 0, "handler concurrency of delayed workloads (0: the bus default, runtime.NumCPU())")
	fs.IntVar(&o.inflight, "inflight", 1024, "throughput: most messages sent but not yet handled")
	fs.IntVar(&o.body, "body", -1, "approximate body size in bytes (-1: 1024 for throughput, minimal otherwise)")
	fs.IntVar(&o.instances, "instances", 0, "burst/spread/backlog: dispatch and handle in this many worker processes (0: in this process)")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up waiting for receipts after this long past the last due time (0: 60s)")
	fs.BoolVar(&o.outbox, "outbox", false, "throughput with -persistence postgres: handle in the transactional outbox (the handler's INSERT and event commit together)")
	fs.IntVar(&o.sagaMessages, "saga-messages", 10, "saga: steps each instance receives (-n is the number of instances)")
	fs.BoolVar(&o.markdown, "markdown", false, "also print a Markdown table row")
	fs.BoolVar(&o.mdHeader, "markdown-header", false, "print the Markdown table header and exit")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.StringVar(&o.memprofile, "memprofile", "", "write a heap profile at the end of the run to this file")
	fs.StringVar(&o.postgresURL, "postgres-url", "postgres://root@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL connection URL")
	fs.BoolVar(&o.postgresNoNotify, "postgres-no-notify", false, "PostgreSQL: set Options.DisableNotify (no pg_notify at store or commit; other processes wake by polling)")
	fs.StringVar(&o.rabbitmqURL, "rabbitmq-url", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	fs.StringVar(&o.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS URL")
	fs.StringVar(&o.kafkaSeeds, "kafka-seeds", "", "Kafka seed brokers, comma-separated (default: an in-process kfake cluster started for the run)")
	fs.StringVar(&o.mongodbURI, "mongodb-uri", "mongodb://127.0.0.1:27017/", "MongoDB (or FerretDB) URI")
	fs.IntVar(&o.redisMasters, "redis-masters", 3, "redis-cluster: masters of the throwaway cluster started for the run (no replicas)")
	fs.StringVar(&o.sqlitePath, "sqlite-path", "", "SQLite file (default: a new file in a temporary folder)")
	fs.BoolVar(&o.verbose, "v", false, "log the bus's warnings and errors to stderr")
	fs.IntVar(&o.dispatch.batch, "dispatch-batch", 0, "override Dispatcher.BatchSize (0: default)")
	fs.IntVar(&o.dispatch.concurrency, "dispatch-concurrency", 0, "override Dispatcher.Concurrency (0: default)")
	fs.DurationVar(&o.dispatch.poll, "dispatch-poll", 0, "override Dispatcher.PollInterval (0: default)")
	fs.BoolVar(&o.worker, "worker", false, "internal: run as a worker process of -instances")
	fs.StringVar(&o.run, "run", "", "internal: the run ID a worker joins")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.sendersGiven = o.sendersGiven || f.Name == "senders" })
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return o, o.check()
}

func (o *options) check() error {
	if o.mdHeader {
		return nil
	}
	dn, ok := defaultN(o.workload)
	if !ok && !o.worker {
		return fmt.Errorf("-workload %q: want schedule, schedule-batch, burst, spread, backlog, throughput, saga, recurring or runtime-recurring", o.workload)
	}
	pd, ok := persistences()[o.persistence]
	if !ok {
		return fmt.Errorf("-persistence %q: want one of %v", o.persistence, names(persistences()))
	}
	if _, ok := transports()[o.transport]; !ok {
		return fmt.Errorf("-transport %q: want one of %v", o.transport, names(transports()))
	}
	if o.n == 0 {
		o.n = dn
	}
	if o.body < 0 {
		o.body = 0
		if o.workload == "throughput" {
			o.body = 1024
		}
	}
	if o.timeout == 0 {
		o.timeout = time.Minute
	}
	switch {
	case o.rate < 0:
		return fmt.Errorf("-rate must not be negative")
	case o.n < 0 || o.senders < 1 || o.concurrency < 1 || o.inflight < 1 || o.backlog < 0 || o.backlogBatch < 0 || o.instances < 0:
		return fmt.Errorf("-n, -backlog, -backlog-batch and -instances must not be negative; -senders, -concurrency and -inflight must be positive")
	case o.over <= 0 || o.idle <= 0 || o.lead < 0 || o.timeout < 0:
		return fmt.Errorf("-over and -idle must be positive; -lead and -timeout must not be negative")
	case o.instances > 0 && (o.workload == "schedule" || o.workload == "throughput"):
		return fmt.Errorf("-instances works with the burst, spread, backlog and saga workloads only")
	case o.outbox && o.persistence != "postgres":
		return fmt.Errorf("-outbox needs -persistence postgres (the store the business INSERT and the outbox share); got %s", o.persistence)
	case o.outbox && o.workload != "throughput" && o.workload != "saga":
		return fmt.Errorf("-outbox works with the throughput and saga workloads only")
	case o.workload == "runtime-recurring" && (o.n < 1 || o.n >= runtimeMaxSchedules || o.tickEvery < time.Millisecond || o.tickFor <= 0):
		return fmt.Errorf("runtime-recurring: -n must be in [1, %d), -tick-every at least 1ms and -tick-for positive", runtimeMaxSchedules)
	case o.redisMasters < 1:
		return fmt.Errorf("-redis-masters must be positive")
	case o.sagaMessages < 1:
		return fmt.Errorf("-saga-messages must be positive")
	case o.instances > 0 && !pd.shared:
		return fmt.Errorf("-instances needs a persistence shared across processes; %s is not", o.persistence)
	}
	return nil
}
