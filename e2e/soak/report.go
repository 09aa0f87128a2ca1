package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// lateReported is the lateness from which the report counts a delayed
// message as held up: a failover within seconds stays well below it; a
// dead process's rows waiting out a 30 s lease do not.
const lateReported = 15 * time.Second

// maxExamples bounds the unexplained duplicates and early messages listed.
const maxExamples = 10

// printer writes the report, with times relative to the start of the run.
type printer struct {
	start time.Time
	load  string // load average when the run started
	// maxDelay is the longest DeliverAfter of the run.
	maxDelay time.Duration
}

func (p *printer) rel(t time.Time) string {
	return "+" + t.Sub(p.start).Round(10*time.Millisecond).String()
}

func (p *printer) print(w io.Writer, r *report, msgs []*message, faults []fault, lag time.Duration,
	torn int, storeRows string, unexpected []string) {
	var delayed, once, later, retried int
	for _, m := range msgs {
		if m.retries() > 0 {
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
		r.sent, delayed, p.maxDelay, once, later, r.unsent, retried, lag.Round(time.Millisecond))
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
	fmt.Fprintf(w, "delayed messages' lateness (first handling minus due time): p50 %s, p99 %s, max %s; %d of %d late by %s or more\n",
		r.lateQuantile(0.5).Round(time.Millisecond), r.lateQuantile(0.99).Round(time.Millisecond),
		r.lateQuantile(1).Round(time.Millisecond), r.lateAtLeast(lateReported), len(r.late), lateReported)
	for _, e := range r.early[:min(len(r.early), maxExamples)] {
		fmt.Fprintf(w, "  %s handled %s before its due time by pid %d\n", e.id, e.by.Round(time.Millisecond), e.pid)
	}
	unexplained := r.unexplained()
	fmt.Fprintf(w, "duplicates %d (explained by %s; %d unexplained)", len(r.duplicates), r.explanations(), len(unexplained))
	if len(r.duplicates) > 0 {
		ids := map[string]bool{}
		for _, d := range r.duplicates {
			ids[d.id] = true
		}
		fmt.Fprintf(w, " in %d messages", len(ids))
	}
	fmt.Fprintf(w, "; in-flight margin before a cut or termination %s (p99 Send to handling)\n", r.margin.Round(time.Millisecond))
	printSendFailures(w, msgs)
	p.printUnexplained(w, unexplained)
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

// explanations lists the explained duplicates by cause, every cause
// named: "3 kill/stop, 0 rolled-back handling, …".
func (r *report) explanations() string {
	parts := make([]string, len(causes))
	for i, c := range causes {
		parts[i] = fmt.Sprintf("%d %s", r.explainedBy[c], c)
	}
	return strings.Join(parts, ", ")
}

// printSendFailures counts the producer's failed (and retried) Sends by
// error, with message IDs and port numbers left out, the most frequent
// first, up to maxExamples errors.
func printSendFailures(w io.Writer, msgs []*message) {
	count := map[string]int{}
	total := 0
	for _, m := range msgs {
		for _, f := range m.failures {
			e := portNumber.ReplaceAllString(strings.ReplaceAll(f.err.Error(), m.id, "<id>"), ":<port>")
			count[e]++
			total++
		}
	}
	if total == 0 {
		return
	}
	errs := slices.Collect(maps.Keys(count))
	slices.SortFunc(errs, func(a, b string) int { return cmp.Or(cmp.Compare(count[b], count[a]), cmp.Compare(a, b)) })
	fmt.Fprintf(w, "failed Sends retried %d:\n", total)
	for _, e := range errs[:min(len(errs), maxExamples)] {
		fmt.Fprintf(w, "  %d× %s\n", count[e], e)
	}
}

// portNumber matches the port of an address in an error.
var portNumber = regexp.MustCompile(`:[0-9]+\b`)

// printUnexplained lists the unexplained duplicates of up to maxExamples
// messages: every handling of each, and the faults around them.
func (p *printer) printUnexplained(w io.Writer, dups []duplicate) {
	var order []string
	byID := map[string][]duplicate{}
	for _, d := range dups {
		if _, ok := byID[d.id]; !ok {
			order = append(order, d.id)
		}
		byID[d.id] = append(byID[d.id], d)
	}
	if len(order) > maxExamples {
		fmt.Fprintf(w, "  %d messages; the first %d:\n", len(order), maxExamples)
		order = order[:maxExamples]
	}
	for _, id := range order {
		ds := byID[id]
		handlings := []string{fmt.Sprintf("pid %d at %s", ds[0].first.pid, p.rel(ds[0].first.at))}
		near := map[string]bool{}
		var nearList []string
		for _, d := range ds {
			handlings = append(handlings, fmt.Sprintf("pid %d at %s", d.second.pid, p.rel(d.second.at)))
			for _, f := range d.near {
				if s := f.String() + " at " + p.rel(f.start); !near[s] {
					near[s] = true
					nearList = append(nearList, s)
				}
			}
		}
		fmt.Fprintf(w, "  %s handled %d times: %s", id, len(handlings), strings.Join(compact(handlings), ", "))
		if n := ds[0].sendRetries; n > 0 {
			fmt.Fprintf(w, "; Send retried %d times", n)
		}
		if len(nearList) > 0 {
			fmt.Fprintf(w, "; in between: %s", strings.Join(nearList, ", "))
		}
		fmt.Fprintln(w)
	}
}

// compact folds runs of equal strings into "s ×n".
func compact(ss []string) []string {
	var out []string
	for i := 0; i < len(ss); {
		j := i
		for j < len(ss) && ss[j] == ss[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s ×%d", ss[i], j-i))
		} else {
			out = append(out, ss[i])
		}
		i = j
	}
	return out
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
