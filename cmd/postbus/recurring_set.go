package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/postbus/bus"
)

// rawMessage is a message the CLI has no Go type for: the type name and
// the JSON body an operator gave. The bus's JSON serializer writes the
// body as it is.
type rawMessage struct {
	name string
	body json.RawMessage
}

// MessageName returns the message type given with --type.
func (m rawMessage) MessageName() string { return m.name }

// MarshalJSON returns the body given with --body.
func (m rawMessage) MarshalJSON() ([]byte, error) { return m.body, nil }

// parseMissed reads a --missed value.
func parseMissed(s string) (bus.MissedPolicy, error) {
	for _, p := range []bus.MissedPolicy{bus.MissedOnce, bus.MissedAll, bus.MissedSkip} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, usagef("--missed %q: want once, all or skip", s)
}

// setFlags are the flags of recurring set.
type setFlags struct {
	schedule, typ, body, to, missed, start, end string
	publish, dry                                bool
	jitter, catchUp                             time.Duration
	maxRuns                                     int
}

// spec builds the schedule name's spec from the flags, or a usage error.
func (f *setFlags) spec(name string, now time.Time) (bus.RecurringSpec, error) {
	var s bus.RecurringSpec
	switch {
	case strings.TrimSpace(f.schedule) == "":
		return s, usagef("recurring set: give --schedule, such as \"@every 5m\"")
	case strings.TrimSpace(f.typ) == "":
		return s, usagef("recurring set: give --type, the message type its handlers know")
	case f.to == "" && !f.publish:
		return s, usagef("recurring set: give --to ENDPOINT (send a command) or --publish (publish an event)")
	case f.to != "" && f.publish:
		return s, usagef("recurring set: give --to or --publish, not both")
	case !json.Valid([]byte(f.body)):
		return s, usagef("recurring set: --body is not valid JSON")
	}
	missed, err := parseMissed(f.missed)
	if err != nil {
		return s, err
	}
	start, err := parseWhen(f.start, now)
	if err != nil {
		return s, err
	}
	end, err := parseWhen(f.end, now)
	if err != nil {
		return s, err
	}
	s = bus.RecurringSpec{Name: name, Schedule: f.schedule, Message: rawMessage{f.typ, json.RawMessage(f.body)},
		Publish: f.publish, Missed: missed, Policy: bus.RecurringPolicy{CatchUp: f.catchUp, Jitter: f.jitter,
			Start: start, End: end, MaxRuns: f.maxRuns}}
	if f.to != "" {
		s.Options = []bus.Option{bus.To(f.to)}
	}
	return s, nil
}

// recurringSet creates or replaces a schedule made at runtime
// (Bus.SetRecurring) from the command line. A schedule declared in code
// is refused: the process that declares it would take it back.
func (a *app) recurringSet(ctx context.Context, args []string) error {
	c := a.newCommand("recurring set", "recurring set NAME --schedule TEXT --type TYPE [--body JSON] (--to ENDPOINT | --publish) [flags]",
		"  postbus recurring set invoices-acme --schedule \"@every 24h\" --type billing.SendInvoices \\\n"+
			"      --body '{\"tenant\":\"acme\"}' --to billing --jitter 10m\n"+
			"  postbus recurring set tick --schedule \"@every 5m\" --type ops.Tick --publish --dry-run --json\n")
	var f setFlags
	c.fs.StringVar(&f.schedule, "schedule", "", "the schedule's text: \"@every <duration>\", or a cron spec with its zone, \"CRON_TZ=Europe/Berlin 0 9 * * 1-5\"")
	c.fs.StringVar(&f.typ, "type", "", "the message type (Envelope.Type) its handlers know")
	c.fs.StringVar(&f.body, "body", "{}", "the message body, JSON")
	c.fs.StringVar(&f.to, "to", "", "send the message as a command to this endpoint")
	c.fs.BoolVar(&f.publish, "publish", false, "publish the message as an event")
	c.fs.StringVar(&f.missed, "missed", "once", "ticks missed while no process ran: once, all or skip")
	c.fs.DurationVar(&f.jitter, "jitter", 0, "shift every tick by one offset in [0, D) derived from the name")
	c.fs.DurationVar(&f.catchUp, "catch-up", 0, "skip missed ticks older than D (0: no bound)")
	c.fs.StringVar(&f.start, "start", "", "no tick before this RFC 3339 time (or a duration from now)")
	c.fs.StringVar(&f.end, "end", "", "no tick after this RFC 3339 time (or a duration from now)")
	c.fs.IntVar(&f.maxRuns, "max-runs", 0, "stop after N occurrences (0: no bound)")
	c.fs.BoolVar(&f.dry, "dry-run", false, "check the schedule and say what would change, store nothing")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("recurring set takes one schedule name")
	}
	name := pos[0]
	spec, err := f.spec(name, a.now())
	if err != nil {
		return err
	}
	o, err := a.openRecurring(ctx, c)
	if err != nil {
		return err
	}
	defer o.Close()
	if _, ok := o.Persistence.(bus.RecurringRuntimeStore); !ok {
		// Said before a dry run too, which runs on a store that has it.
		return fmt.Errorf("recurring set %s: the %s persistence: %w: it must implement bus.RecurringRuntimeStore",
			name, o.PersistenceName, bus.ErrRecurringNotSupported)
	}
	before, existed, err := o.Recurring.LoadRecurring(ctx, name)
	if err != nil {
		return err
	}
	if existed && before.Spec == nil {
		return fmt.Errorf("recurring set %s: the schedule is declared in code (AddRecurring): change it in the service that declares it, "+
			"or delete it first when no process declares it any more", name)
	}
	target, store := o.bus, o.Recurring
	if f.dry {
		// The same call on a throwaway store checks everything SetRecurring
		// checks and plans the next tick, and stores nothing here.
		mem := bus.NewMemoryPersistence()
		if target, err = a.recurringBus(&backends{Persistence: mem}); err != nil {
			return err
		}
		defer func() { _ = target.Stop(context.Background()) }()
		store = mem
	}
	if err := target.SetRecurring(ctx, spec); err != nil {
		return fmt.Errorf("recurring set %s: %w", name, err)
	}
	info, err := infoOf(ctx, target, name)
	if err != nil {
		return err
	}
	after, _, err := store.LoadRecurring(ctx, name)
	if err != nil {
		return err
	}
	action := "created"
	switch {
	case existed && after.Fingerprint == before.Fingerprint:
		action, info.Generation = "unchanged", before.Generation
	case existed:
		action, info.Generation = "replaced", before.Generation+1
	}
	return a.reportSet(c.json, f.dry, action, info)
}

// infoOf returns the schedule name as b lists it.
func infoOf(ctx context.Context, b *bus.Bus, name string) (bus.RecurringInfo, error) {
	infos, err := b.ListRecurrings(ctx, bus.RecurringFilter{Prefix: name, Limit: 1})
	if err != nil {
		return bus.RecurringInfo{}, err
	}
	if len(infos) == 0 || infos[0].Name != name {
		return bus.RecurringInfo{}, fmt.Errorf("recurring %s: not stored: %w", name, bus.ErrUnknownRecurring)
	}
	return infos[0], nil
}

func (a *app) reportSet(asJSON, dry bool, action string, i bus.RecurringInfo) error {
	if asJSON {
		return writeJSON(a.stdout, struct {
			DryRun     bool       `json:"dry_run"`
			Name       string     `json:"name"`
			Action     string     `json:"action"`
			Schedule   string     `json:"schedule"`
			Generation int64      `json:"generation"`
			Next       *time.Time `json:"next,omitempty"`
		}{dry, i.Name, action, i.Schedule, i.Generation, jsonTime(i.Next)})
	}
	if dry {
		fmt.Fprintf(a.stdout, "dry run: would have %s schedule %s (%s), generation %d, next tick %s\n",
			action, i.Name, i.Schedule, i.Generation, fmtTime(i.Next))
		return nil
	}
	fmt.Fprintf(a.stdout, "%s schedule %s (%s), generation %d, next tick %s\n", action, i.Name, i.Schedule, i.Generation, fmtTime(i.Next))
	return nil
}
