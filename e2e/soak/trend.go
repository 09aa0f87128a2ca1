package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// point is one sample of a series.
type point struct {
	at time.Time
	v  float64
}

// series is one measured quantity over a run: a worker process's resident
// memory, goroutines, heap or open files, or a fleet-wide figure (database
// connections, rows of a table).
type series struct {
	name  string
	unit  string
	floor float64 // growth below this is noise whatever the trend says
	pts   []point
}

// Thresholds of the growth verdict.
const (
	// minTrendPoints and minTrendSpan: a shorter series (a worker killed
	// soon after it started) gets no verdict.
	minTrendPoints = 8
	minTrendSpan   = 2 * time.Minute
	// levelShare: a series still grows when its fitted rise over the last
	// half of the run exceeds this share of its mean over that half.
	levelShare = 0.10
)

// trend is the verdict on one series.
type trend struct {
	name, unit        string
	n                 int
	span              time.Duration
	first, last, peak float64
	slope, lateSlope  float64 // least-squares slope per hour: whole series, last half
	lateRise          float64 // lateSlope times the last half's span
	judged            bool    // long enough for a verdict
	grows             bool    // growth that does not level off
}

// analyzeTrend fits a line to the whole series and to its last half. The
// series grows without levelling off when the last half's fitted rise is
// more than levelShare of that half's mean and more than the series'
// floor: a leak keeps rising to the end, while a table bounded by its
// retention or a pool that filled up is flat in the last half.
func analyzeTrend(s series) trend {
	t := trend{name: s.name, unit: s.unit, n: len(s.pts)}
	if len(s.pts) == 0 {
		return t
	}
	pts := slices.Clone(s.pts)
	slices.SortFunc(pts, func(a, b point) int { return a.at.Compare(b.at) })
	t.span = pts[len(pts)-1].at.Sub(pts[0].at)
	t.first, t.last = pts[0].v, pts[len(pts)-1].v
	for _, p := range pts {
		t.peak = max(t.peak, p.v)
	}
	t.slope = slopePerHour(pts)
	late := pts[len(pts)/2:]
	t.lateSlope = slopePerHour(late)
	lateSpan := late[len(late)-1].at.Sub(late[0].at)
	t.lateRise = t.lateSlope * lateSpan.Hours()
	t.judged = len(pts) >= minTrendPoints && t.span >= minTrendSpan
	if t.judged {
		var mean float64
		for _, p := range late {
			mean += p.v
		}
		mean /= float64(len(late))
		t.grows = t.lateRise > s.floor && t.lateRise > levelShare*mean
	}
	return t
}

// slopePerHour is the least-squares slope of pts, per hour.
func slopePerHour(pts []point) float64 {
	if len(pts) < 2 {
		return 0
	}
	t0 := pts[0].at
	var sx, sy, sxx, sxy float64
	for _, p := range pts {
		x := p.at.Sub(t0).Hours()
		sx += x
		sy += p.v
		sxx += x * x
		sxy += x * p.v
	}
	n := float64(len(pts))
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

// printTrends writes one line per series and reports whether any grows.
func printTrends(w io.Writer, ss []series) (grows bool) {
	fmt.Fprintf(w, "resources (sampled; slope per hour over the whole series / its last half; GROWS: the last half rose > %.0f%% of its mean and > its floor):\n", levelShare*100)
	for _, s := range ss {
		t := analyzeTrend(s)
		verdict := "too short to judge"
		switch {
		case t.grows:
			verdict, grows = "GROWS", true
		case t.judged:
			verdict = "levels off"
		}
		fmt.Fprintf(w, "  %-34s %3d samples over %-8s first %8.1f last %8.1f peak %8.1f %s; slope %+.1f / %+.1f per hour: %s\n",
			t.name, t.n, t.span.Round(time.Second), t.first, t.last, t.peak, t.unit, t.slope, t.lateSlope, verdict)
	}
	return grows
}
