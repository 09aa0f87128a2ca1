package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mysql"
	"github.com/postbus/bus/nats"
	"github.com/postbus/bus/postgres"
	"github.com/postbus/bus/rabbitmq"
	"github.com/postbus/bus/sqlite"
)

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*m = append(*m, s)
		}
	}
	return nil
}

func (a *app) provision(ctx context.Context, args []string) error {
	c := a.newCommand("provision", "provision --endpoint NAME [--event TYPE]... [--error-queue Q] [--deadletter-queue Q] [--send-only] [--dry-run]",
		"  postbus provision --endpoint billing --event orders.OrderPlaced --event orders.OrderCancelled --dry-run\n"+
			"  POSTBUS_RABBITMQ_URL=amqp://mq/ POSTBUS_POSTGRES_URL=postgres://db/app postbus provision --endpoint billing\n")
	endpoint := c.fs.String("endpoint", "", "the endpoint (its input queue)")
	var events multiFlag
	c.fs.Var(&events, "event", "an event type the endpoint subscribes to (repeat, or comma-separated)")
	errQ := c.fs.String("error-queue", "error", "the error queue (Config.ErrorQueue)")
	dlQ := c.fs.String("deadletter-queue", "deadletter", "the dead-letter queue (Config.DeadLetterQueue)")
	sendOnly := c.fs.Bool("send-only", false, "a send-only endpoint: no input queue, no subscriptions")
	dry := c.fs.Bool("dry-run", false, "print what would be created, create nothing (connects to nothing)")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("provision takes no arguments")
	}
	if *endpoint == "" && !*sendOnly {
		return usagef("provision: --endpoint is required (or --send-only)")
	}
	if *sendOnly && len(events) > 0 {
		return usagef("provision: a send-only endpoint subscribes to no events")
	}
	if err := checkQueueNames(*endpoint, *errQ, *dlQ, *sendOnly); err != nil {
		return err
	}
	top := bus.Topology{Queues: []string{*errQ, *dlQ}}
	if !*sendOnly {
		top.Queue, top.Events = *endpoint, events
	}
	s := c.conn
	hasP, hasT := len(s.persistences()) > 0, len(s.transports()) > 0
	if !hasP && !hasT {
		return usagef("provision: give a transport, a persistence, or both (see 'postbus help')")
	}
	plan := planLines(s, top)
	if *dry {
		if c.json {
			return writeJSON(a.stdout, struct {
				DryRun   bool         `json:"dry_run"`
				Topology bus.Topology `json:"topology"`
				Creates  []string     `json:"creates"`
			}{true, top, plan})
		}
		fmt.Fprintln(a.stdout, "dry run: nothing was created. Provision would create, if missing:")
		for _, l := range plan {
			fmt.Fprintf(a.stdout, "  %s\n", l)
		}
		fmt.Fprintf(a.stdout, "%d object(s)\n", len(plan))
		return nil
	}
	b, err := a.open(ctx, s, need{persistence: hasP, transport: hasT})
	if err != nil {
		return err
	}
	defer b.Close()
	if b.Transport != nil {
		if err := b.Transport.Provision(ctx, top); err != nil {
			return fmt.Errorf("provision %s: %w", b.TransportName, err)
		}
	}
	if su, ok := b.Persistence.(interface{ Setup(context.Context) error }); ok {
		if err := su.Setup(ctx); err != nil {
			return fmt.Errorf("setup %s: %w", b.PersistenceName, err)
		}
	}
	printPlan(a.stdout, c.json, plan)
	return nil
}

// checkQueueNames refuses, as a usage error, the queue names bus.New would
// refuse for the same endpoint, before anything is planned or created.
func checkQueueNames(endpoint, errQ, dlQ string, sendOnly bool) error {
	for _, q := range []struct{ flag, name string }{{"--endpoint", endpoint}, {"--error-queue", errQ}, {"--deadletter-queue", dlQ}} {
		if q.flag == "--endpoint" && sendOnly && q.name == "" {
			continue // a send-only endpoint has no input queue
		}
		var ce *bus.ConfigError
		if err := bus.CheckQueueName(q.flag, q.name); errors.As(err, &ce) {
			return usagef("provision: %s %q: %s", q.flag, q.name, ce.Reason)
		}
	}
	if endpoint == errQ && !sendOnly {
		return usagef("provision: --error-queue %q is also the endpoint's input queue: a message that fails there would go back to it for ever", errQ)
	}
	return nil
}

func printPlan(w io.Writer, asJSON bool, plan []string) {
	if asJSON {
		_ = writeJSON(w, struct {
			DryRun bool     `json:"dry_run"`
			Exists []string `json:"exists"`
		}{false, plan})
		return
	}
	fmt.Fprintln(w, "provisioned (each exists now):")
	for _, l := range plan {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintf(w, "%d object(s)\n", len(plan))
}

// planLines describes, without connecting, what Provision and Setup create
// for the settings, from the drivers' documented layouts.
func planLines(s settings, top bus.Topology) []string {
	var out []string
	queues := top.Queues
	if top.Queue != "" {
		queues = append([]string{top.Queue}, queues...)
	}
	switch {
	case s.RabbitMQURL != "":
		ex := cmp.Or(s.RabbitMQExchange, rabbitmq.DefaultEventsExchange)
		out = append(out, fmt.Sprintf("rabbitmq exchange %s (topic, durable)", ex))
		for _, q := range queues {
			out = append(out, fmt.Sprintf("rabbitmq queue %s (durable, quorum where the server has them)", q))
		}
		for _, e := range top.Events {
			out = append(out, fmt.Sprintf("rabbitmq binding %s -> %s (routing key %s)", ex, top.Queue, e))
		}
	case s.NATSURL != "":
		stream := cmp.Or(s.NATSStream, nats.DefaultStream)
		prefix := cmp.Or(s.NATSPrefix, nats.DefaultSubjectPrefix)
		out = append(out, fmt.Sprintf("nats stream %s (subjects under %s.)", stream, prefix))
		for _, q := range queues {
			out = append(out, fmt.Sprintf("nats durable consumer for queue %s", q))
		}
		for _, e := range top.Events {
			out = append(out, fmt.Sprintf("nats durable consumer for event %s, delivering to %s", e, top.Queue))
		}
	default:
		out = append(out, planMore(s, top, queues)...)
	}
	switch {
	case s.PostgresURL != "":
		schema := cmp.Or(s.PostgresSchema, postgres.DefaultSchema)
		table := cmp.Or(s.PostgresTable, postgres.DefaultTable)
		out = append(out,
			fmt.Sprintf("postgres schema %s", schema),
			fmt.Sprintf("postgres table %s.%s (scheduled messages) and its indexes", schema, table),
			fmt.Sprintf("postgres table %s.%s_inbox (outbox inbox) and its index", schema, table),
			fmt.Sprintf("postgres table %s.%s_sagas (saga instances)", schema, table),
			fmt.Sprintf("postgres table %s.%s_failed (failed messages) and its indexes", schema, table),
			fmt.Sprintf("postgres table %s.%s_recurring (recurring schedules)", schema, table))
	case s.SQLitePath != "":
		table := cmp.Or(s.SQLiteTable, sqlite.DefaultTable)
		out = append(out, fmt.Sprintf("sqlite file %s: table %s (scheduled messages) and its index, with the inbox, saga, failed-message and recurring-schedule tables named after it", s.SQLitePath, table))
	case s.MySQLURL != "":
		table := cmp.Or(s.MySQLTable, mysql.DefaultTable)
		out = append(out, fmt.Sprintf("mysql table %s (scheduled messages) and its indexes, with the tables %s_inbox, %s_sagas, %s_failed and %s_recurring", table, table, table, table, table))
	}
	return out
}
