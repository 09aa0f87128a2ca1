package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/postbus/bus"
)

const scheduledUsage = `scheduled ls|show|cancel|send-now

  ls        list scheduled messages, earliest due first
  show      show one message with its envelope
  cancel    remove messages that are not being delivered
  send-now  make messages due at once (the dispatcher sends them on its next claim)`

func (a *app) scheduled(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintf(a.stderr, "Usage: postbus %s\n", scheduledUsage)
		return usagef("scheduled: name a subcommand")
	}
	switch args[0] {
	case "ls", "list":
		return a.scheduledLs(ctx, args[1:])
	case "show":
		return a.scheduledShow(ctx, args[1:])
	case "cancel":
		return a.scheduledChange(ctx, "cancel", args[1:])
	case "send-now":
		return a.scheduledChange(ctx, "send-now", args[1:])
	case "-h", "--help", "help":
		fmt.Fprintf(a.stdout, "Usage: postbus %s\n", scheduledUsage)
		return errHelp
	}
	return usagef("scheduled: unknown subcommand %q", args[0])
}

// openScheduled opens the persistence and checks it can be browsed.
func (a *app) openScheduled(ctx context.Context, c *command) (*backends, error) {
	b, err := a.open(ctx, c.conn, need{persistence: true})
	if err != nil {
		return nil, err
	}
	if b.Scheduled == nil {
		b.Close()
		return nil, fmt.Errorf("the %s persistence cannot browse scheduled messages (no bus.ScheduledBrowser)", b.PersistenceName)
	}
	return b, nil
}

type scheduledJSON struct {
	ID         string     `json:"id"`
	Type       string     `json:"type"`
	Kind       string     `json:"kind"`
	DueAt      *time.Time `json:"due_at"`
	Transport  string     `json:"transport,omitempty"`
	Failures   int        `json:"failures"`
	LastError  string     `json:"last_error,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	State      string     `json:"state"`
}

func scheduledState(m bus.OutgoingMessage, now time.Time) string {
	switch {
	case m.LeaseUntil.After(now):
		return "delivering"
	case m.DueAt.Before(now):
		return "overdue"
	}
	return "waiting"
}

func toScheduledJSON(m bus.OutgoingMessage, now time.Time) scheduledJSON {
	j := scheduledJSON{ID: m.ID, Type: m.Type, Kind: m.Kind.String(), DueAt: jsonTime(m.DueAt), Transport: m.Transport,
		Failures: m.Failures, LastError: m.LastError, State: scheduledState(m, now)}
	if m.LeaseUntil.After(now) {
		j.LeaseUntil = jsonTime(m.LeaseUntil) // a lapsed lease is no lease
	}
	return j
}

func (a *app) scheduledLs(ctx context.Context, args []string) error {
	c := a.newCommand("scheduled ls", "scheduled ls [--type T] [--due-after WHEN] [--due-before WHEN] [--limit N] [--after-id ID --after-due TIME]",
		"  postbus scheduled ls --type orders.PaymentOverdue\n  postbus scheduled ls --due-before 1h --json\n")
	typ := c.fs.String("type", "", "only this message type")
	after := c.fs.String("due-after", "", "only messages due at or after WHEN (RFC 3339, or a duration from now: -1h, 30m)")
	before := c.fs.String("due-before", "", "only messages due before WHEN")
	limit := c.fs.Int("limit", 100, "at most this many rows (1 to 10000)")
	afterID := c.fs.String("after-id", "", "continue after this row (with --after-due: the last row of the previous page)")
	afterDue := c.fs.String("after-due", "", "due time of the --after-id row (RFC 3339)")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("scheduled ls takes no arguments")
	}
	if *limit < 1 || *limit > 10000 {
		return usagef("--limit: %d is not between 1 and 10000", *limit)
	}
	now := a.now()
	q := bus.ScheduledQuery{Type: *typ, Limit: *limit, AfterID: *afterID}
	if q.DueAfter, err = parseWhen(*after, now); err != nil {
		return err
	}
	if q.DueBefore, err = parseWhen(*before, now); err != nil {
		return err
	}
	if q.AfterDue, err = parseWhen(*afterDue, now); err != nil {
		return err
	}
	b, err := a.openScheduled(ctx, c)
	if err != nil {
		return err
	}
	defer b.Close()
	rows, err := b.Scheduled.ListScheduled(ctx, q)
	if err != nil {
		return err
	}
	stats, err := b.Scheduled.StatsScheduled(ctx, now)
	if err != nil {
		return err
	}
	if c.json {
		out := struct {
			Count         int             `json:"count"`
			Backlog       int64           `json:"backlog"`
			Estimated     bool            `json:"backlog_estimated,omitempty"`
			Overdue       int64           `json:"overdue"`
			OldestOverdue *time.Time      `json:"oldest_overdue,omitempty"`
			Rows          []scheduledJSON `json:"rows"`
		}{Count: len(rows), Backlog: stats.Count, Estimated: stats.Estimated, Overdue: stats.Overdue,
			OldestOverdue: jsonTime(stats.OldestOverdue), Rows: []scheduledJSON{}}
		for _, m := range rows {
			out.Rows = append(out.Rows, toScheduledJSON(m, now))
		}
		return writeJSON(a.stdout, out)
	}
	var cells [][]string
	for _, m := range rows {
		cells = append(cells, []string{m.ID, m.Type, fmtTime(m.DueAt), strconv.Itoa(m.Failures), scheduledState(m, now)})
	}
	table(a.stdout, "ID\tTYPE\tDUE\tFAILURES\tSTATE", cells)
	est := ""
	if stats.Estimated {
		est = " (estimate)"
	}
	fmt.Fprintf(a.stdout, "%d row(s) shown; backlog %d%s, overdue %d", len(rows), stats.Count, est, stats.Overdue)
	if !stats.OldestOverdue.IsZero() {
		fmt.Fprintf(a.stdout, ", oldest overdue due %s", fmtTime(stats.OldestOverdue))
	}
	fmt.Fprintln(a.stdout)
	if len(rows) == q.Limit {
		last := rows[len(rows)-1]
		fmt.Fprintf(a.stdout, "next page: --after-id %s --after-due %s\n", last.ID, last.DueAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

func (a *app) scheduledShow(ctx context.Context, args []string) error {
	c := a.newCommand("scheduled show", "scheduled show ID", "  postbus scheduled show 0190f5d6-8c4e-7b7a-9d0e-5b1f4c2d3e4f --json\n")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("scheduled show takes one message ID")
	}
	b, err := a.openScheduled(ctx, c)
	if err != nil {
		return err
	}
	defer b.Close()
	m, ok, err := b.Scheduled.GetScheduled(ctx, pos[0])
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintf(a.stderr, "postbus: no scheduled message %s\n", pos[0])
		return errNotFound
	}
	now := a.now()
	env, envErr := decodeEnvelope(m.Envelope)
	if c.json {
		out := struct {
			scheduledJSON
			Envelope *envelopeJSON `json:"envelope"`
			Error    string        `json:"envelope_error,omitempty"`
		}{scheduledJSON: toScheduledJSON(m, now), Envelope: env}
		if envErr != nil {
			out.Error = envErr.Error()
		}
		return writeJSON(a.stdout, out)
	}
	w := a.stdout
	fmt.Fprintf(w, "ID:         %s\nType:       %s\nKind:       %s\nDue:        %s\nState:      %s\nFailures:   %d\n",
		m.ID, m.Type, m.Kind, fmtTime(m.DueAt), scheduledState(m, now), m.Failures)
	if m.Transport != "" {
		fmt.Fprintf(w, "Transport:  %s\n", m.Transport)
	}
	if m.LastError != "" {
		fmt.Fprintf(w, "Last error: %s\n", m.LastError)
	}
	if envErr != nil {
		fmt.Fprintf(w, "Envelope: cannot decode: %v\n", envErr)
		return nil
	}
	printEnvelope(w, env)
	return nil
}

func (a *app) scheduledChange(ctx context.Context, verb string, args []string) error {
	c := a.newCommand("scheduled "+verb, "scheduled "+verb+" [--dry-run] ID...",
		"  postbus scheduled "+verb+" 0190f5d6-8c4e-7b7a-9d0e-5b1f4c2d3e4f\n  postbus scheduled "+verb+" --dry-run ID1 ID2\n")
	dry := c.fs.Bool("dry-run", false, "say what would change, change nothing")
	ids, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return usagef("scheduled %s: name at least one message ID", verb)
	}
	b, err := a.openScheduled(ctx, c)
	if err != nil {
		return err
	}
	defer b.Close()
	now := a.now()
	var results []change
	n := 0
	for _, id := range ids {
		var ok bool
		reason := ""
		if *dry {
			m, found, err := b.Scheduled.GetScheduled(ctx, id)
			if err != nil {
				return err
			}
			ok = found && !m.LeaseUntil.After(now)
		} else {
			var err error
			if verb == "cancel" {
				ok, err = b.Scheduled.CancelOutgoing(ctx, id)
			} else {
				ok, err = b.Scheduled.SendNow(ctx, id)
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w (changed %d before it)", verb, id, err, n)
			}
		}
		if ok {
			n++
		} else {
			reason = "not scheduled, or being delivered"
		}
		results = append(results, change{id, ok, reason})
	}
	past := map[string]string{"cancel": "cancelled", "send-now": "made due now"}[verb]
	return reportChanges(a.stdout, c.json, *dry, "id", past, "message(s)", results)
}
