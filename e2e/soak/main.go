// Command soak runs Postbus under load and faults and counts what went
// wrong: messages lost, handled before their due time, or handled more
// than once without a killed process to explain it.
//
// # What it does
//
// Three worker processes (this program again, with -worker) receive one
// endpoint and dispatch its scheduled messages, on one PostgreSQL store
// and one transport: RabbitMQ, NATS JetStream, Redis Streams, the
// PostgreSQL transport (on the store's database, so a database cut is a
// broker cut), Kafka on kfake (started in this process; only the database
// can be cut) or SQS/SNS on goaws (a child process). A producer in this
// process sends -n messages evenly over -duration: half at once, half with
// DeliverAfter up to -max-delay (10 s); a tenth fail their first attempt (an immediate
// retry handles them) and 3% ask for a delayed retry on their first
// delivery. Each worker appends a line to a journal file of its own for
// every message it handles, before the handler returns, and for every
// message its dispatcher hands to the transport.
//
// Meanwhile the soak injects faults at random times: SIGKILL of a worker
// (started again a second later), SIGSTOP of a worker for 2–5 s, every
// worker connection to PostgreSQL terminated with pg_terminate_backend
// (selected by an application_name unique to the run), and the workers'
// broker and/or database connections cut for 3 s by TCP proxies the soak
// owns between the workers and the services. The producer goes through the
// same proxies (unless -cut-producer=false): a cut fails its sends, and it
// retries each failed Send with the same message ID, as an application
// would. Backend terminations reach the workers only. No other client of
// the services is touched.
//
// After the last due time and fault, it waits -grace (and up to -wait more
// while messages are missing), stops the workers and prints lost, early and
// duplicates, each duplicate explained by the fault that caused it, from
// what the soak recorded: a worker that could have held the message was
// killed or stopped in between; with -outbox, the message has fewer
// business rows than handlings (a handling rolled back); the producer's
// Send of the message failed and was retried; or a cut or backend
// termination on the message's path began while it was in flight (sent,
// handed over or handled within the run's p99 Send-to-handling latency
// before it). The exit status is 1 when anything is lost or early, or a
// duplicate has none of these explanations.
//
// # Exactly-once effects
//
// With -outbox the workers' buses run the transactional outbox: each Work
// handler inserts a business row keyed by the message ID in the handling's
// transaction (postgres.Tx) and publishes a Done event, which an audit
// endpoint (a second bus in each worker, also with the outbox) records the
// same way. The report counts the rows of each message: the target is
// exactly one business row and one event row per message sent. A handling
// whose commit failed runs again: a duplicate handling with no second
// business row is explained as rolled back.
//
// # The long soak
//
// -sample samples each worker's resident memory, open files, goroutines
// and heap, the workers' PostgreSQL connections and the rows of the run's
// tables (scheduled messages, inbox, the PostgreSQL transport's messages),
// and prints each series with its slope; a series whose last half still
// rises by more than a tenth of its mean (and more than a floor) fails the
// run. -fault-every replaces the fault counts by one fault per interval,
// the kinds in turn; kills then spare worker 0, so one process lives the
// whole run. -retention shortens the inbox retention so the inbox levels
// off within the run.
//
// # The recurring workload
//
// With -workload recurring, each worker declares -schedules schedules of
// Every(-every) (1,000 of a second) on the store and journals every
// occurrence it handles; for -duration one worker in turn is SIGKILLed
// every -kill-every (10 s) and started again at once, with no other fault
// and no producer. The soak then prints the ticks expected (every tick in
// the run's window; the ticks of a span with no worker running count once,
// as MissedOnce catches them up), delivered, lost, duplicated (explained
// when the first handler was killed before the second handling) and early,
// and the p50/p99 lateness (first handling minus tick).
//
// # Running
//
//	go run ./soak -transport rabbitmq                     // 22,000 messages over 60 s
//	go run ./soak -transport nats -n 3000 -duration 15s   // a quick run
//	go run ./soak -transport postgres -outbox             // exactly-once effects
//	go run ./soak -transport rabbitmq -outbox -duration 30m -n 90000 -fault-every 1m -sample 10s -retention 5m
//	go run ./soak -workload recurring                     // 1,000 schedules of 1 s, 60 s
//
// Services come from POSTBUS_TEST_POSTGRES_URL, POSTBUS_TEST_RABBITMQ_URL,
// POSTBUS_TEST_NATS_URL and POSTBUS_TEST_REDIS_ADDR (loopback defaults). Each run uses a schema,
// queues, a stream and an application_name of its own, and removes them at
// the end. The journals and worker logs stay in a temporary directory when
// the run fails (or with -keep).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// The workloads.
const (
	workloadMessages  = "messages"
	workloadRecurring = "recurring"
)

// config holds the command line.
type config struct {
	transport    string
	n            int
	duration     time.Duration
	maxDelay     time.Duration
	workers      int
	grace        time.Duration
	wait         time.Duration
	kills        int
	stops        int
	terminations int
	cuts         int
	seed         uint64
	keep         bool
	cutProducer  bool
	workload     string
	schedules    int
	runtime      int
	every        time.Duration
	killEvery    time.Duration
	lease        time.Duration
	outbox       bool
	retention    time.Duration
	sample       time.Duration
	faultEvery   time.Duration

	worker bool
	wf     workerFlags
}

func main() {
	var c config
	flag.StringVar(&c.transport, "transport", "rabbitmq", "transport: rabbitmq, nats, redis, postgres, kafka (kfake, in the soak) or sqs (goaws)")
	flag.IntVar(&c.n, "n", 22000, "messages to send")
	flag.DurationVar(&c.duration, "duration", 60*time.Second, "time over which the messages are sent")
	flag.DurationVar(&c.maxDelay, "max-delay", 10*time.Second, "the longest DeliverAfter of the delayed half of the messages")
	flag.IntVar(&c.workers, "workers", 3, "worker processes")
	flag.DurationVar(&c.grace, "grace", 45*time.Second,
		"wait after the last due time and fault (longer than the 30 s lease and NATS AckWait)")
	flag.DurationVar(&c.wait, "wait", 60*time.Second, "after the grace, how long to wait for missing messages since their count last fell (at most 10m in all)")
	flag.IntVar(&c.kills, "kills", 2, "workers to SIGKILL (each started again)")
	flag.IntVar(&c.stops, "stops", 2, "workers to SIGSTOP for 2-5 s")
	flag.IntVar(&c.terminations, "terminations", 2, "times to terminate the workers' PostgreSQL backends")
	flag.IntVar(&c.cuts, "cuts", 2, "3 s cuts of the workers' broker and/or database connections")
	flag.Uint64Var(&c.seed, "seed", 0, "random seed of the message mix and the faults (default: random)")
	flag.BoolVar(&c.cutProducer, "cut-producer", true,
		"the producer reaches the services through the workers' proxies, so cuts fail its sends too")
	flag.BoolVar(&c.keep, "keep", false, "keep the journals and worker logs even when the run passes")
	flag.StringVar(&c.workload, "workload", workloadMessages,
		"messages: sends and delayed sends under every fault; recurring: schedules declared by every worker, one worker killed every -kill-every")
	flag.IntVar(&c.schedules, "schedules", 1000, "recurring: schedules each worker declares")
	flag.IntVar(&c.runtime, "runtime", 30, "recurring: schedules the soak makes at runtime (SetRecurring), replaces and deletes while the workers run")
	flag.DurationVar(&c.every, "every", time.Second, "recurring: the schedules' interval (bus.Every)")
	flag.DurationVar(&c.killEvery, "kill-every", 10*time.Second, "recurring: SIGKILL one worker (in turn) this often, then start it again")
	flag.DurationVar(&c.lease, "lease", 0, "the workers' Dispatcher.Lease, and the Redis and PostgreSQL transports' Lease (0: the defaults, 30 s); -grace must outlast it")
	flag.BoolVar(&c.outbox, "outbox", false,
		"the transactional outbox: each handler inserts a business row and publishes an event that an audit endpoint records; exactly one of each per message")
	flag.DurationVar(&c.retention, "retention", 0, "-outbox: the inbox retention (OutboxConfig.Retention; 0: the default, 7 days)")
	flag.DurationVar(&c.sample, "sample", 0,
		"sample each worker's memory, goroutines and open files, the database connections and table rows this often, and fail on growth that does not level off (0: off)")
	flag.DurationVar(&c.faultEvery, "fault-every", 0,
		"one fault this often, kill, stop, terminate and cut in turn, instead of -kills/-stops/-terminations/-cuts; kills spare worker 0 (0: off)")
	flag.BoolVar(&c.worker, "worker", false, "run as a worker process (the soak starts these itself)")
	c.wf.register(flag.CommandLine)
	flag.Parse()
	c.wf.transport, c.wf.workload, c.wf.schedules, c.wf.every, c.wf.lease = c.transport, c.workload, c.schedules, c.every, c.lease
	c.wf.outbox, c.wf.retention = c.outbox, c.retention

	if c.worker {
		work := runWorker
		if c.workload == workloadRecurring {
			work = runRecurringWorker
		}
		if err := work(c.wf); err != nil {
			fmt.Fprintln(os.Stderr, "soak worker:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	soak := run
	if c.workload == workloadRecurring {
		soak = runRecurring
	}
	failed, err := soak(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}
