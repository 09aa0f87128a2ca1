package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// maxExamples bounds the unexplained duplicates and early messages listed.
const maxExamples = 10

// printer writes the report, with times relative to the start of the run.
type printer struct {
	start time.Time
	load  string // load average when the run started
}

func (p *printer) rel(t time.Time) string {
	return "+" + t.Sub(p.start).Round(10*time.Millisecond).String()
}

func (p *printer) print(w io.Writer, r *report, msgs []*message, faults []fault, lag time.Duration,
	torn int, storeRows string, unexpected []string) {
	var delayed, once, later, retried int
	for _, m := range msgs {
		if m.retries > 0 {
			retried++
		}
		if m.delay > 0 {
			delayed++
		}
		switch m.fail {
		case failOnce:
			once++
		case failLater:
			later++
		}
	}
	fmt.Fprintf(w, "load average: %s at the start, %s at the end\n", p.load, loadAverage())
	fmt.Fprintf(w, "sent %d (%d delayed up to %s, %d fail once, %d retried later), %d not sent, %d sent again after a failed Send; last send %s behind schedule\n",
		r.sent, delayed, maxDelay, once, later, r.unsent, retried, lag.Round(time.Millisecond))
	fmt.Fprintf(w, "faults %d:\n", len(faults))
	for _, f := range faults {
		line := fmt.Sprintf("  %-9s %s", p.rel(f.start), f)
		if f.failed != nil {
			line += " (failed: " + f.failed.Error() + ")"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "handlings %d, hand-overs %d (%d messages handed over more often than needed), store rows left %s\n",
		r.handlings, r.handOvers, r.handedAgain, storeRows)
	fmt.Fprintf(w, "lost %d", len(r.lost))
	if r.lostParked > 0 {
		fmt.Fprintf(w, " (%d in the error or dead-letter queue)", r.lostParked)
	}
	if len(r.lost) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(r.lost[:min(len(r.lost), maxExamples)], " "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "early %d\n", len(r.early))
	for _, e := range r.early[:min(len(r.early), maxExamples)] {
		fmt.Fprintf(w, "  %s handled %s before its due time by pid %d\n", e.id, e.by.Round(time.Millisecond), e.pid)
	}
	unexplained := r.unexplained()
	fmt.Fprintf(w, "duplicates %d (%d explained by kills/stops, %d unexplained", len(r.duplicates), r.explained, len(unexplained))
	if len(unexplained) > 0 {
		fmt.Fprintf(w, ": %d with a connection cut or backend termination in between, %d without",
			r.nearOutage, len(unexplained)-r.nearOutage)
	}
	fmt.Fprintln(w, ")")
	for _, d := range unexplained[:min(len(unexplained), maxExamples)] {
		fmt.Fprintf(w, "  %s: pid %d at %s, pid %d at %s", d.id, d.first.pid, p.rel(d.first.at), d.second.pid, p.rel(d.second.at))
		if len(d.near) > 0 {
			var near []string
			for _, f := range d.near {
				near = append(near, f.String()+" at "+p.rel(f.start))
			}
			fmt.Fprintf(w, "; in between: %s", strings.Join(near, ", "))
		}
		fmt.Fprintln(w)
	}
	if r.unknown > 0 {
		fmt.Fprintf(w, "handled messages the producer never sent: %d\n", r.unknown)
	}
	if torn > 0 {
		fmt.Fprintf(w, "torn journal lines: %d\n", torn)
	}
	for _, u := range unexpected {
		fmt.Fprintf(w, "worker exited unexpectedly: %s\n", u)
	}
}

// loadAverage returns the 1, 5 and 15 minute load averages, as uptime
// prints them, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
