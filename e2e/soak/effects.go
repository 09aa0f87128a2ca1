package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus/postgres"
)

// Done is the event a Work handler of the -outbox soak publishes; the audit
// endpoint records it.
type Done struct {
	Of string `json:"of"` // the ID of the Work message handled
}

// The kinds of effect row.
const (
	effectWork  = "work"  // a Work handler's business row
	effectEvent = "event" // the audit endpoint's row for the Done event
)

// effectsTable names the business table of the -outbox soak: one row per
// effect, with no unique key, so a second effect of one message is a
// second row the analysis counts.
func effectsTable(n names) string { return pgx.Identifier{n.schema(), "effects"}.Sanitize() }

// createEffects creates the business table.
func createEffects(ctx context.Context, pool *pgxpool.Pool, n names) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+effectsTable(n)+` (
		message_id text NOT NULL,
		kind       text NOT NULL,
		pid        integer NOT NULL,
		at         timestamptz NOT NULL DEFAULT now()
	)`)
	if err != nil {
		return fmt.Errorf("create effects table: %w", err)
	}
	return nil
}

var errNoHandlingTx = errors.New("soak: the handler's ctx carries no transaction (is the outbox on?)")

// recordEffect inserts an effect row for message id in the handling's
// transaction: it commits with the inbox row, or not at all.
func recordEffect(ctx context.Context, n names, id, kind string) error {
	tx, ok := postgres.Tx(ctx)
	if !ok {
		return errNoHandlingTx
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+effectsTable(n)+` (message_id, kind, pid) VALUES ($1, $2, $3)`,
		id, kind, os.Getpid()); err != nil {
		return fmt.Errorf("record %s effect: %w", kind, err)
	}
	return nil
}

// effectCounts is how many rows of each kind a message has.
type effectCounts struct{ work, event int }

// countEffects reads the business table.
func countEffects(ctx context.Context, pool *pgxpool.Pool, n names) (map[string]effectCounts, error) {
	rows, err := pool.Query(ctx, `SELECT message_id, kind, count(*) FROM `+effectsTable(n)+` GROUP BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("count effects: %w", err)
	}
	defer rows.Close()
	counts := map[string]effectCounts{}
	for rows.Next() {
		var id, kind string
		var c int
		if err := rows.Scan(&id, &kind, &c); err != nil {
			return nil, fmt.Errorf("count effects: %w", err)
		}
		ec := counts[id]
		switch kind {
		case effectWork:
			ec.work += c
		case effectEvent:
			ec.event += c
		}
		counts[id] = ec
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count effects: %w", err)
	}
	return counts, nil
}

// effectsReport is the -outbox soak's verdict: every sent message must
// have exactly one business row and exactly one row for its event.
type effectsReport struct {
	messages int // sent messages checked
	// Messages whose business rows (work) or event rows number 0 or more
	// than one.
	workMissing, workTwice   []string
	eventMissing, eventTwice []string
	extraRows                int // rows of more than one
	unknown                  int // rows of IDs the producer never sent
	// committed is the number of business rows of each message: the
	// handlings whose transaction committed.
	committed map[string]int
}

// failed reports whether any message's effects were not exactly once.
func (r *effectsReport) failed() bool {
	return len(r.workMissing)+len(r.workTwice)+len(r.eventMissing)+len(r.eventTwice) > 0 || r.unknown > 0
}

// missing is how many effects have yet to appear.
func (r *effectsReport) missing() int { return len(r.workMissing) + len(r.eventMissing) }

// analyzeEffects compares the sent messages with the effect rows.
func analyzeEffects(msgs []*message, counts map[string]effectCounts) *effectsReport {
	r := &effectsReport{committed: map[string]int{}}
	known := map[string]bool{}
	for _, m := range msgs {
		known[m.id] = true // a Send reported as failed may have been stored
		if !m.sent {
			continue
		}
		r.messages++
		c := counts[m.id]
		r.committed[m.id] = c.work
		switch {
		case c.work == 0:
			r.workMissing = append(r.workMissing, m.id)
		case c.work > 1:
			r.workTwice = append(r.workTwice, m.id)
			r.extraRows += c.work - 1
		}
		switch {
		case c.event == 0:
			r.eventMissing = append(r.eventMissing, m.id)
		case c.event > 1:
			r.eventTwice = append(r.eventTwice, m.id)
			r.extraRows += c.event - 1
		}
	}
	for id := range counts {
		if !known[id] {
			r.unknown++
		}
	}
	return r
}

// printEffects writes the -outbox soak's verdict.
func printEffects(w io.Writer, r *effectsReport) {
	fmt.Fprintf(w, "effects of %d messages (target: one business row and one event row each): "+
		"business rows missing %d, more than one %d; event rows missing %d, more than one %d (%d extra rows); rows of unknown messages %d\n",
		r.messages, len(r.workMissing), len(r.workTwice), len(r.eventMissing), len(r.eventTwice), r.extraRows, r.unknown)
	for _, l := range []struct {
		what string
		ids  []string
	}{{"business rows missing", r.workMissing}, {"business rows twice", r.workTwice},
		{"event rows missing", r.eventMissing}, {"event rows twice", r.eventTwice}} {
		if len(l.ids) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", l.what, strings.Join(l.ids[:min(len(l.ids), maxExamples)], " "))
		}
	}
}
