package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
)

const failedUsage = `failed ls|groups|show|retry|delete|ingest

  ls      list failed messages, most recent failure first
  groups  list failure groups (type, endpoint, normalised reason), largest first
  show    show one failed message with its headers and body
  retry   send messages back to their queue, then delete them (needs a transport)
  delete  delete messages
  ingest  consume the error queue into the failed-message store until stopped`

func (a *app) failed(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintf(a.stderr, "Usage: postbus %s\n", failedUsage)
		return usagef("failed: name a subcommand")
	}
	switch args[0] {
	case "ls", "list":
		return a.failedLs(ctx, args[1:])
	case "groups":
		return a.failedGroups(ctx, args[1:])
	case "show":
		return a.failedShow(ctx, args[1:])
	case "retry":
		return a.failedChange(ctx, "retry", args[1:])
	case "delete":
		return a.failedChange(ctx, "delete", args[1:])
	case "ingest":
		return a.failedIngest(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintf(a.stdout, "Usage: postbus %s\n", failedUsage)
		return errHelp
	}
	return usagef("failed: unknown subcommand %q", args[0])
}

func (a *app) openFailed(ctx context.Context, c *command, transport bool) (*backends, error) {
	b, err := a.open(ctx, c.conn, need{persistence: true, transport: transport})
	if err != nil {
		return nil, err
	}
	if b.Failed == nil {
		b.Close()
		return nil, fmt.Errorf("the %s persistence has no failed-message store (no bus.FailedStore)", b.PersistenceName)
	}
	return b, nil
}

// filterFlags are the selection flags of ls, retry and delete.
type filterFlags struct{ group, typ, endpoint *string }

func addFilter(c *command) filterFlags {
	return filterFlags{
		group:    c.fs.String("group", "", "only this failure group"),
		typ:      c.fs.String("type", "", "only this message type"),
		endpoint: c.fs.String("endpoint", "", "only failures at this endpoint"),
	}
}

func (f filterFlags) query() bus.FailedQuery {
	return bus.FailedQuery{Group: *f.group, Type: *f.typ, Endpoint: *f.endpoint}
}

type failedJSON struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	Endpoint    string     `json:"endpoint"`
	Queue       string     `json:"queue,omitempty"`
	Kind        string     `json:"kind,omitempty"`
	Reason      string     `json:"reason"`
	Group       string     `json:"group"`
	Attempts    int        `json:"attempts"`
	Failures    int        `json:"failures"`
	FirstFailed *time.Time `json:"first_failed"`
	LastFailed  *time.Time `json:"last_failed"`
}

func toFailedJSON(m bus.FailedMessage) failedJSON {
	return failedJSON{ID: m.ID, Type: m.Type, Endpoint: m.Endpoint, Queue: m.Queue, Kind: m.Kind, Reason: m.Reason,
		Group: m.Group, Attempts: m.Attempts, Failures: m.Failures, FirstFailed: jsonTime(m.FirstFailed), LastFailed: jsonTime(m.LastFailed)}
}

func (a *app) failedLs(ctx context.Context, args []string) error {
	c := a.newCommand("failed ls", "failed ls [--group G] [--type T] [--endpoint E] [--id ID] [--limit N]",
		"  postbus failed ls --group 3f2a9c0d1e4b5a67\n  postbus failed ls --type orders.ChargeCard --json\n")
	f := addFilter(c)
	id := c.fs.String("id", "", "only the message with this ID")
	limit := c.fs.Int("limit", 100, "at most this many rows (1 to 10000)")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("failed ls takes no arguments")
	}
	if *limit < 1 || *limit > 10000 {
		return usagef("--limit: %d is not between 1 and 10000", *limit)
	}
	b, err := a.openFailed(ctx, c, false)
	if err != nil {
		return err
	}
	defer b.Close()
	q := f.query()
	q.Search, q.Limit = *id, *limit
	total, err := b.Failed.CountFailed(ctx, q)
	if err != nil {
		return err
	}
	rows, err := b.Failed.ListFailed(ctx, q)
	if err != nil {
		return err
	}
	if c.json {
		out := struct {
			Count   int          `json:"count"`
			Matches int64        `json:"matches"`
			Rows    []failedJSON `json:"rows"`
		}{len(rows), total, []failedJSON{}}
		for _, m := range rows {
			out.Rows = append(out.Rows, toFailedJSON(m))
		}
		return writeJSON(a.stdout, out)
	}
	var cells [][]string
	for _, m := range rows {
		cells = append(cells, []string{m.ID, m.Type, m.Endpoint, truncate(m.Reason, 48), strconv.Itoa(m.Failures), fmtTime(m.LastFailed), m.Group})
	}
	table(a.stdout, "ID\tTYPE\tENDPOINT\tREASON\tFAILURES\tLAST FAILED\tGROUP", cells)
	fmt.Fprintf(a.stdout, "%d of %d matching message(s) shown\n", len(rows), total)
	return nil
}

func (a *app) failedGroups(ctx context.Context, args []string) error {
	c := a.newCommand("failed groups", "failed groups [--limit N]", "  postbus failed groups --limit 20\n")
	limit := c.fs.Int("limit", 50, "at most this many groups")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("failed groups takes no arguments")
	}
	b, err := a.openFailed(ctx, c, false)
	if err != nil {
		return err
	}
	defer b.Close()
	groups, err := b.Failed.FailedGroups(ctx, *limit)
	if err != nil {
		return err
	}
	if c.json {
		type g struct {
			Group       string     `json:"group"`
			Type        string     `json:"type"`
			Endpoint    string     `json:"endpoint"`
			Reason      string     `json:"reason"`
			Count       int64      `json:"count"`
			FirstFailed *time.Time `json:"first_failed"`
			LastFailed  *time.Time `json:"last_failed"`
		}
		out := struct {
			Count  int `json:"count"`
			Groups []g `json:"groups"`
		}{len(groups), []g{}}
		for _, x := range groups {
			out.Groups = append(out.Groups, g{x.Group, x.Type, x.Endpoint, x.Reason, x.Count, jsonTime(x.FirstFailed), jsonTime(x.LastFailed)})
		}
		return writeJSON(a.stdout, out)
	}
	var cells [][]string
	var sum int64
	for _, x := range groups {
		sum += x.Count
		cells = append(cells, []string{x.Group, x.Type, x.Endpoint, truncate(x.Reason, 48), strconv.FormatInt(x.Count, 10), fmtTime(x.LastFailed)})
	}
	table(a.stdout, "GROUP\tTYPE\tENDPOINT\tREASON\tCOUNT\tLAST FAILED", cells)
	fmt.Fprintf(a.stdout, "%d group(s), %d message(s)\n", len(groups), sum)
	return nil
}

func (a *app) failedShow(ctx context.Context, args []string) error {
	c := a.newCommand("failed show", "failed show ID", "  postbus failed show 0190f5d6-8c4e-7b7a-9d0e-5b1f4c2d3e4f\n")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("failed show takes one message ID")
	}
	b, err := a.openFailed(ctx, c, false)
	if err != nil {
		return err
	}
	defer b.Close()
	m, ok, err := b.Failed.GetFailed(ctx, pos[0])
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintf(a.stderr, "postbus: no failed message %s\n", pos[0])
		return errNotFound
	}
	env, envErr := decodeEnvelope(m.Envelope)
	if c.json {
		out := struct {
			failedJSON
			Envelope *envelopeJSON `json:"envelope"`
			Error    string        `json:"envelope_error,omitempty"`
		}{failedJSON: toFailedJSON(m), Envelope: env}
		if envErr != nil {
			out.Error = envErr.Error()
		}
		return writeJSON(a.stdout, out)
	}
	w := a.stdout
	fmt.Fprintf(w, "ID:           %s\nType:         %s\nEndpoint:     %s\nQueue:        %s\nKind:         %s\nReason:       %s\nGroup:        %s\nAttempts:     %d\nFailures:     %d\nFirst failed: %s\nLast failed:  %s\n",
		m.ID, m.Type, m.Endpoint, m.Queue, m.Kind, m.Reason, m.Group, m.Attempts, m.Failures, fmtTime(m.FirstFailed), fmtTime(m.LastFailed))
	if envErr != nil {
		fmt.Fprintf(w, "Envelope: cannot decode: %v\n", envErr)
		return nil
	}
	printEnvelope(w, env)
	return nil
}

func (a *app) failedChange(ctx context.Context, verb string, args []string) error {
	c := a.newCommand("failed "+verb, "failed "+verb+" [--dry-run] (ID... | --group G | --all [--type T] [--endpoint E])",
		"  postbus failed "+verb+" 0190f5d6-8c4e-7b7a-9d0e-5b1f4c2d3e4f\n  postbus failed "+verb+" --group 3f2a9c0d1e4b5a67 --dry-run\n  postbus failed "+verb+" --all --type orders.ChargeCard --endpoint billing\n")
	f := addFilter(c)
	all := c.fs.Bool("all", false, "every message matching --type and --endpoint (all messages without them)")
	dry := c.fs.Bool("dry-run", false, "count and list what would change, change nothing")
	ids, err := a.parse(c, args)
	if err != nil {
		return err
	}
	q := f.query()
	byFilter := q.Group != "" || q.Type != "" || q.Endpoint != ""
	switch {
	case len(ids) > 0 && (byFilter || *all):
		return usagef("failed %s: give IDs, or --group, or --all with a filter, not both", verb)
	case len(ids) == 0 && q.Group == "" && !*all:
		return usagef("failed %s: name messages: IDs, --group G, or --all (with --type/--endpoint to narrow it)", verb)
	}
	b, err := a.openFailed(ctx, c, verb == "retry" && !*dry)
	if err != nil {
		return err
	}
	defer b.Close()
	asked := len(ids)
	if len(ids) == 0 {
		if ids, err = console.FailedIDs(ctx, b.Failed, q); err != nil {
			return err
		}
		asked = len(ids)
	} else if *dry {
		var found []string
		for _, id := range ids {
			_, ok, err := b.Failed.GetFailed(ctx, id)
			if err != nil {
				return err
			}
			if ok {
				found = append(found, id)
			}
		}
		ids = found
	}
	past := map[string]string{"retry": "retried", "delete": "deleted"}[verb]
	var n int
	var opErr error
	switch {
	case *dry:
		n = len(ids)
	case verb == "retry":
		n, opErr = bus.RetryFailed(ctx, b.Transport, b.Failed, ids)
	default:
		n, opErr = deleteChunked(ctx, b.Failed, ids)
	}
	if c.json {
		out := struct {
			DryRun bool     `json:"dry_run"`
			Count  int      `json:"count"`
			Of     int      `json:"of"`
			IDs    []string `json:"ids,omitempty"`
			Error  string   `json:"error,omitempty"`
		}{DryRun: *dry, Count: n, Of: asked}
		if *dry {
			out.IDs = ids
		}
		if opErr != nil {
			out.Error = opErr.Error()
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else if *dry {
		for _, id := range ids {
			fmt.Fprintln(a.stdout, id)
		}
		fmt.Fprintf(a.stdout, "dry run: would have %s %d of %d message(s)\n", past, n, asked)
	} else {
		fmt.Fprintf(a.stdout, "%s %d of %d message(s)\n", past, n, asked)
	}
	if opErr != nil {
		return opErr
	}
	if n == 0 && asked > 0 {
		return errNotFound
	}
	return nil
}

// deleteChunked deletes in chunks, so a large group is not one huge
// statement.
func deleteChunked(ctx context.Context, s bus.FailedStore, ids []string) (int, error) {
	const chunk = 500
	n := 0
	for len(ids) > 0 {
		k := min(chunk, len(ids))
		d, err := s.DeleteFailed(ctx, ids[:k])
		n += d
		if err != nil {
			return n, err
		}
		ids = ids[k:]
	}
	return n, nil
}

func (a *app) failedIngest(ctx context.Context, args []string) error {
	c := a.newCommand("failed ingest", "failed ingest [--queue error] [--concurrency N]",
		"  postbus failed ingest --queue error   # until Ctrl-C\n")
	queue := c.fs.String("queue", "error", "the error queue to consume")
	conc := c.fs.Int("concurrency", 4, "messages stored at once")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("failed ingest takes no arguments")
	}
	b, err := a.openFailed(ctx, c, true)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(a.stderr, "ingesting %s into the %s failed-message store; stop with Ctrl-C\n", *queue, b.PersistenceName)
	err = bus.IngestFailed(ctx, b.Transport, *queue, b.Failed, bus.IngestOptions{Concurrency: *conc})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
