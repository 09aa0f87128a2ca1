package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer, header string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func jsonTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// truncate shortens s to n runes for a table cell.
func truncate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// envelopeJSON is a decoded envelope in JSON output.
type envelopeJSON struct {
	ID            string            `json:"id"`
	Type          string            `json:"type"`
	Kind          string            `json:"kind"`
	ContentType   string            `json:"content_type,omitempty"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	Source        string            `json:"source,omitempty"`
	Destination   string            `json:"destination,omitempty"`
	SentAt        *time.Time        `json:"sent_at,omitempty"`
	DueAt         *time.Time        `json:"due_at,omitempty"`
	ExpiresAt     *time.Time        `json:"expires_at,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Attributes    map[string]string `json:"attributes,omitempty"`
	Body          string            `json:"body"`
}

func decodeEnvelope(data []byte) (*envelopeJSON, error) {
	env, err := bus.UnmarshalEnvelope(data)
	if err != nil {
		return nil, err
	}
	return &envelopeJSON{ID: env.ID, Type: env.Type, Kind: env.Kind.String(), ContentType: env.ContentType,
		CorrelationID: env.CorrelationID, Source: env.Source, Destination: env.Destination,
		SentAt: jsonTime(env.SentAt), DueAt: jsonTime(env.DueAt), ExpiresAt: jsonTime(env.ExpiresAt),
		Headers: env.Headers, Attributes: env.Attributes, Body: string(env.Body)}, nil
}

// printEnvelope writes the envelope section of a show command.
func printEnvelope(w io.Writer, e *envelopeJSON) {
	fmt.Fprintln(w, "\nEnvelope:")
	pairs := [][2]string{{"kind", e.Kind}, {"content type", e.ContentType}, {"correlation id", e.CorrelationID},
		{"source", e.Source}, {"destination", e.Destination}}
	if e.SentAt != nil {
		pairs = append(pairs, [2]string{"sent at", fmtTime(*e.SentAt)})
	}
	if e.DueAt != nil {
		pairs = append(pairs, [2]string{"due at", fmtTime(*e.DueAt)})
	}
	if e.ExpiresAt != nil {
		pairs = append(pairs, [2]string{"expires at", fmtTime(*e.ExpiresAt)})
	}
	for _, p := range pairs {
		if p[1] != "" {
			fmt.Fprintf(w, "  %-15s %s\n", p[0]+":", p[1])
		}
	}
	if len(e.Headers) > 0 {
		fmt.Fprintln(w, "Headers:")
		keys := make([]string, 0, len(e.Headers))
		for k := range e.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s: %s\n", k, e.Headers[k])
		}
	}
	fmt.Fprintf(w, "Body:\n%s\n", e.Body)
}

// change is what a bulk command (cancel, send-now, pause, …) did to one
// item, named by its key: a message ID or a schedule's name.
type change struct {
	Key     string
	Changed bool
	Reason  string // why it was skipped
}

// reportChanges prints what a bulk command did to its items: under --json
// one document whose items name their key keyField ("id", "name"); else
// the items skipped and a count ("cancelled 2 of 3 message(s)"), and then
// errNotFound when no item was changed.
func reportChanges(w io.Writer, asJSON, dry bool, keyField, past, noun string, results []change) error {
	n := 0
	for _, r := range results {
		if r.Changed {
			n++
		}
	}
	if asJSON {
		items := make([]map[string]any, len(results))
		for i, r := range results {
			items[i] = map[string]any{keyField: r.Key, "changed": r.Changed}
			if r.Reason != "" {
				items[i]["reason"] = r.Reason
			}
		}
		return writeJSON(w, struct {
			DryRun  bool             `json:"dry_run"`
			Count   int              `json:"count"`
			Of      int              `json:"of"`
			Results []map[string]any `json:"results"`
		}{dry, n, len(results), items})
	}
	for _, r := range results {
		if !r.Changed {
			fmt.Fprintf(w, "%s: skipped (%s)\n", r.Key, r.Reason)
		}
	}
	if dry {
		fmt.Fprintf(w, "dry run: would have %s %d of %d %s\n", past, n, len(results), noun)
	} else {
		fmt.Fprintf(w, "%s %d of %d %s\n", past, n, len(results), noun)
	}
	if n == 0 {
		return errNotFound
	}
	return nil
}
