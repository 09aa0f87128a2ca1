package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/postbus/bus"
)

// chart is a due-time histogram drawn as an SVG bar chart.
type chart struct {
	Title  string
	Total  int64
	Max    int64
	Width  int
	Height int
	Bars   []bar
}

type bar struct {
	X, Y, W, H int
	Count      int64
	Label      string // the bucket start, shown under some bars
	Tip        string
}

const (
	chartWidth  = 600
	chartHeight = 140
	chartPad    = 18 // room for labels under the bars
)

func makeChart(title string, from time.Time, width time.Duration, counts []int64, labelEvery int, layout string) chart {
	ch := chart{Title: title, Width: chartWidth, Height: chartHeight + chartPad}
	for _, n := range counts {
		ch.Total += n
		ch.Max = max(ch.Max, n)
	}
	bw := chartWidth / max(len(counts), 1)
	for i, n := range counts {
		h := 0
		if ch.Max > 0 {
			h = int(float64(chartHeight-4) * float64(n) / float64(ch.Max))
			if n > 0 && h < 2 {
				h = 2
			}
		}
		start := from.Add(time.Duration(i) * width)
		b := bar{X: i*bw + 1, Y: chartHeight - h, W: bw - 2, H: h, Count: n,
			Tip: fmt.Sprintf("%s–%s: %d", start.UTC().Format(layout), start.Add(width).UTC().Format(layout), n)}
		if i%labelEvery == 0 {
			b.Label = start.UTC().Format(layout)
		}
		ch.Bars = append(ch.Bars, b)
	}
	return ch
}

type overviewData struct {
	HasScheduled bool
	HasFailed    bool
	Stats        bus.ScheduledStats
	Hour, Day    chart
	FailedTotal  int64
	Groups       []bus.FailedGroup
	Metrics      *bus.Metrics
	Health       *healthView
}

// healthView is the overview's health section: /readyz's verdict on the
// bus's report, and the lags.
type healthView struct {
	Ready        bool
	Checks       []bus.HealthCheck
	DispatchLag  time.Duration
	RecurringLag time.Duration
	LastClaim    time.Time
}

// health reads the bus's report within the options' timeout and judges it.
func (c *console) health(ctx context.Context) *healthView {
	timeout := c.opts.HealthOptions.Timeout
	if timeout <= 0 {
		timeout = bus.DefaultHealthTimeout
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := c.opts.Health(hctx)
	v := &healthView{Ready: true, Checks: c.opts.HealthOptions.Readiness(r),
		DispatchLag: r.DispatchLag.Round(time.Millisecond), RecurringLag: r.RecurringLag.Round(time.Millisecond), LastClaim: r.LastClaim}
	for _, ch := range v.Checks {
		v.Ready = v.Ready && ch.OK
	}
	return v
}

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	now := c.opts.Now().UTC()
	d := overviewData{HasScheduled: c.opts.Scheduled != nil, HasFailed: c.opts.Failed != nil}
	var errs []error
	if s := c.opts.Scheduled; s != nil {
		st, err := s.StatsScheduled(ctx, now)
		errs = append(errs, err)
		d.Stats = st
		// Buckets start at the minute, so a refresh keeps the bars still.
		from := now.Truncate(time.Minute)
		hour, err := s.DueHistogram(ctx, from, 5*time.Minute, 12)
		errs = append(errs, err)
		d.Hour = makeChart("Due in the next hour (5-minute buckets)", from, 5*time.Minute, hour, 2, "15:04")
		dayFrom := now.Truncate(time.Hour)
		day, err := s.DueHistogram(ctx, dayFrom, time.Hour, 24)
		errs = append(errs, err)
		d.Day = makeChart("Due in the next day (hourly buckets)", dayFrom, time.Hour, day, 3, "15:04")
	}
	if f := c.opts.Failed; f != nil {
		n, err := f.CountFailed(ctx, bus.FailedQuery{})
		errs = append(errs, err)
		d.FailedTotal = n
		g, err := f.FailedGroups(ctx, 10)
		errs = append(errs, err)
		d.Groups = g
	}
	if c.opts.Metrics != nil {
		m := c.opts.Metrics()
		d.Metrics = &m
	}
	if c.opts.Health != nil {
		d.Health = c.health(ctx)
	}
	c.render(w, r, "overview", "Overview", http.StatusOK, d, errors.Join(errs...))
}
