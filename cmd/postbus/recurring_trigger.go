package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/postbus/bus"
)

// recurringTrigger stores one extra occurrence of a schedule, due now. A
// schedule made at runtime has its message stored, and the bus builds the
// occurrence from it (Bus.TriggerRecurring), paused or not. For one
// declared in code the CLI has none of the application's code, so it
// cannot build the message: it copies the envelope of the earliest
// occurrence stored for the record's ticks, with the trigger's ID, due
// time and tick header. Each call
// stores an occurrence of its own; with --key, every call with that key
// stores the same one (bus.RecurringTriggerKeyID), so a script can retry
// it. A schedule with no stored occurrence (paused, or every tick sent)
// cannot be triggered here; a process that declares it can
// (Bus.TriggerRecurring).
func (a *app) recurringTrigger(ctx context.Context, args []string) error {
	c := a.newCommand("recurring trigger", "recurring trigger [--dry-run] [--key KEY] NAME",
		"  postbus recurring trigger nightly-report\n  postbus recurring trigger --key rerun-2030-01-02 nightly-report\n"+
			"  postbus recurring trigger --dry-run --json nightly-report\n")
	dry := c.fs.Bool("dry-run", false, "say what would be stored, store nothing")
	key := c.fs.String("key", "", "idempotency key: every trigger with this key stores one occurrence (default: a new one each call)")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("recurring trigger takes one schedule name")
	}
	name := pos[0]
	o, err := a.openRecurring(ctx, c)
	if err != nil {
		return err
	}
	defer o.Close()
	rec, err := a.loadRecurring(ctx, o, name)
	if err != nil {
		return err
	}
	k := *key
	if k == "" {
		k = newTriggerKey()
	}
	if rec.Spec != nil {
		return a.triggerRuntime(ctx, o, c.json, *dry, name, k)
	}
	var from bus.OutgoingMessage
	found := false
	for _, t := range rec.Ticks {
		if from, found, err = o.Scheduled.GetScheduled(ctx, bus.RecurringOccurrenceID(name, t)); err != nil {
			return err
		} else if found {
			break
		}
	}
	if !found {
		return fmt.Errorf("recurring trigger %s: no stored occurrence to copy the message from (the schedule is paused, or none is stored ahead); "+
			"trigger it from a process that declares it (Bus.TriggerRecurring)", name)
	}
	env, err := bus.UnmarshalEnvelope(from.Envelope)
	if err != nil {
		return fmt.Errorf("recurring trigger %s: occurrence %s: %w", name, from.ID, err)
	}
	now := a.now().UTC()
	env.ID = bus.RecurringTriggerKeyID(name, k)
	env.SentAt, env.DueAt = now, now
	env.SetHeader(bus.HeaderRecurringTick, now.Format(time.RFC3339Nano))
	msg := bus.OutgoingMessage{ID: env.ID, Kind: from.Kind, Type: from.Type, Envelope: bus.MarshalEnvelope(env),
		DueAt: now, Transport: from.Transport}
	if !*dry {
		if err := o.Recurring.StoreOutgoing(ctx, []bus.OutgoingMessage{msg}); err != nil {
			return fmt.Errorf("recurring trigger %s: %w", name, err)
		}
	}
	if c.json {
		return writeJSON(a.stdout, struct {
			DryRun     bool      `json:"dry_run"`
			Name       string    `json:"name"`
			Occurrence string    `json:"occurrence_id"`
			DueAt      time.Time `json:"due_at"`
			CopiedFrom string    `json:"copied_from"`
		}{*dry, name, msg.ID, now, from.ID})
	}
	verb := "stored"
	if *dry {
		verb = "dry run: would have stored"
	}
	fmt.Fprintf(a.stdout, "%s occurrence %s of %s, due %s (a copy of %s)\n", verb, msg.ID, name, fmtTime(now), from.ID)
	return nil
}

// triggerRuntime triggers the schedule name made at runtime through the
// bus, which builds the occurrence from the stored definition.
func (a *app) triggerRuntime(ctx context.Context, o *recurringOps, asJSON, dry bool, name, key string) error {
	id, now := bus.RecurringTriggerKeyID(name, key), a.now().UTC()
	if !dry {
		if err := o.bus.TriggerRecurring(ctx, name, bus.TriggerKey(key)); err != nil {
			return fmt.Errorf("recurring trigger %s: %w", name, err)
		}
	}
	if asJSON {
		return writeJSON(a.stdout, struct {
			DryRun     bool      `json:"dry_run"`
			Name       string    `json:"name"`
			Occurrence string    `json:"occurrence_id"`
			DueAt      time.Time `json:"due_at"`
		}{dry, name, id, now})
	}
	verb := "stored"
	if dry {
		verb = "dry run: would have stored"
	}
	fmt.Fprintf(a.stdout, "%s occurrence %s of %s, due %s (from its stored definition)\n", verb, id, name, fmtTime(now))
	return nil
}

// newTriggerKey returns a random key, so that each trigger without --key
// is an occurrence of its own.
func newTriggerKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
