package console

import (
	"context"
	"errors"
	"net/http"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Recurring is what the schedules page needs: a *bus.Bus has these
// methods. Listing and pausing go through the bus, so the page shows the
// next tick of the schedules the bus declares, and pausing cancels the
// occurrences stored ahead, as in the service.
type Recurring interface {
	Recurrings(ctx context.Context) ([]bus.RecurringInfo, error)
	PauseRecurring(ctx context.Context, name string) error
	ResumeRecurring(ctx context.Context, name string) error
}

var errNoRecurring = errors.New("no recurring schedules: the console was given none (Options.Recurring)")

type recurringData struct {
	Rows      []bus.RecurringInfo
	Available bool
}

func (c *console) recurringList(w http.ResponseWriter, r *http.Request) {
	d := recurringData{Available: c.opts.Recurring != nil}
	if c.opts.Recurring == nil {
		c.render(w, r, "recurring", "Recurring", http.StatusOK, d, nil)
		return
	}
	rows, err := c.opts.Recurring.Recurrings(r.Context())
	d.Rows = rows
	c.render(w, r, "recurring", "Recurring", http.StatusOK, d, err)
}

func (c *console) recurringPause(w http.ResponseWriter, r *http.Request) {
	c.recurringAction(w, r, "paused", Recurring.PauseRecurring)
}

func (c *console) recurringResume(w http.ResponseWriter, r *http.Request) {
	c.recurringAction(w, r, "resumed", Recurring.ResumeRecurring)
}

func (c *console) recurringAction(w http.ResponseWriter, r *http.Request, done string,
	do func(Recurring, context.Context, string) error) {
	if c.opts.Recurring == nil {
		http.Error(w, errNoRecurring.Error(), http.StatusNotFound)
		return
	}
	name := r.PathValue("name")
	if err := do(c.opts.Recurring, r.Context(), name); err != nil {
		c.log.Error("console: recurring action", "name", name, "error", driver.RedactError(err))
		redirect(w, r, "/recurring", "error: "+err.Error())
		return
	}
	redirect(w, r, "/recurring", "schedule "+name+" "+done)
}
