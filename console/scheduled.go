package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// pageSize is how many rows a list page shows.
const pageSize = 50

var errNoScheduled = errors.New("this persistence has no browsable scheduled store")

type scheduledRow struct {
	bus.OutgoingMessage
	Leased bool
}

type scheduledData struct {
	Type      string
	Search    string
	Rows      []scheduledRow
	NextDue   string // keyset of the next page, empty on the last
	NextID    string
	NotFound  bool
	Available bool
}

func (c *console) scheduledList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := scheduledData{Type: strings.TrimSpace(q.Get("type")), Search: strings.TrimSpace(q.Get("id")), Available: c.opts.Scheduled != nil}
	if c.opts.Scheduled == nil {
		c.render(w, r, "scheduled", "Scheduled", http.StatusOK, d, nil)
		return
	}
	ctx := r.Context()
	now := c.opts.Now()
	if d.Search != "" {
		m, ok, err := c.opts.Scheduled.GetScheduled(ctx, d.Search)
		if err != nil {
			c.render(w, r, "scheduled", "Scheduled", http.StatusOK, d, err)
			return
		}
		if ok {
			d.Rows = []scheduledRow{{m, m.LeaseUntil.After(now)}}
		} else {
			d.NotFound = true
		}
		c.render(w, r, "scheduled", "Scheduled", http.StatusOK, d, nil)
		return
	}
	sq := bus.ScheduledQuery{Type: d.Type, Limit: pageSize + 1, AfterID: q.Get("after_id")}
	if v := q.Get("after_due"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			c.render(w, r, "scheduled", "Scheduled", http.StatusBadRequest, d, errors.New("after_due: not an RFC 3339 time"))
			return
		}
		sq.AfterDue = t
	}
	rows, err := c.opts.Scheduled.ListScheduled(ctx, sq)
	if len(rows) > pageSize {
		rows = rows[:pageSize]
		last := rows[len(rows)-1]
		d.NextDue, d.NextID = last.DueAt.UTC().Format(time.RFC3339Nano), last.ID
	}
	for _, m := range rows {
		d.Rows = append(d.Rows, scheduledRow{m, m.LeaseUntil.After(now)})
	}
	c.render(w, r, "scheduled", "Scheduled", http.StatusOK, d, err)
}

type messageData struct {
	Scheduled *scheduledRow
	Failed    *bus.FailedMessage
	Envelope  envelopeView
}

func (c *console) scheduledShow(w http.ResponseWriter, r *http.Request) {
	if c.opts.Scheduled == nil {
		c.render(w, r, "message", "Message", http.StatusNotFound, messageData{}, errNoScheduled)
		return
	}
	id := r.PathValue("id")
	m, ok, err := c.opts.Scheduled.GetScheduled(r.Context(), id)
	if err != nil || !ok {
		if err == nil {
			err = errors.New("no scheduled message " + id + " (it was sent or cancelled)")
		}
		c.render(w, r, "message", "Message", http.StatusNotFound, messageData{}, err)
		return
	}
	row := scheduledRow{m, m.LeaseUntil.After(c.opts.Now())}
	c.render(w, r, "message", "Scheduled message "+id, http.StatusOK, messageData{Scheduled: &row, Envelope: viewEnvelope(m.Envelope)}, nil)
}

func (c *console) scheduledCancel(w http.ResponseWriter, r *http.Request) {
	c.scheduledAction(w, r, "cancelled", "was not cancelled: it is being delivered or is gone",
		func(ctx context.Context, s bus.ScheduledBrowser, id string) (bool, error) {
			return s.CancelOutgoing(ctx, id)
		})
}

func (c *console) scheduledSendNow(w http.ResponseWriter, r *http.Request) {
	c.scheduledAction(w, r, "is due now", "was not changed: it is being delivered or is gone",
		func(ctx context.Context, s bus.ScheduledBrowser, id string) (bool, error) { return s.SendNow(ctx, id) })
}

func (c *console) scheduledAction(w http.ResponseWriter, r *http.Request, done, notDone string,
	do func(context.Context, bus.ScheduledBrowser, string) (bool, error)) {
	if c.opts.Scheduled == nil {
		http.Error(w, errNoScheduled.Error(), http.StatusNotFound)
		return
	}
	id := r.PathValue("id")
	ok, err := do(r.Context(), c.opts.Scheduled, id)
	if err != nil {
		c.log.Error("console: scheduled action", "id", id, "error", driver.RedactError(err))
		redirect(w, r, "/scheduled", "error: "+err.Error())
		return
	}
	if ok {
		redirect(w, r, "/scheduled", "message "+id+" "+done)
		return
	}
	redirect(w, r, "/scheduled", "message "+id+" "+notDone)
}
