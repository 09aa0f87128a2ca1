package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// Recurring is what the schedules page needs: a *bus.Bus has these
// methods. Everything goes through the bus, so the page shows the next
// tick of the schedules the bus declares, pausing cancels the occurrences
// stored ahead, and a schedule made here runs on every dispatcher on the
// persistence, as in the service.
type Recurring interface {
	// ListRecurrings returns a page of the stored schedules in name
	// order (the page lists 100 at a time, by prefix).
	ListRecurrings(ctx context.Context, f bus.RecurringFilter) ([]bus.RecurringInfo, error)
	// SetRecurring creates or replaces a schedule made at runtime (the
	// page's form).
	SetRecurring(ctx context.Context, spec bus.RecurringSpec) error
	// PauseRecurring pauses a schedule for every process.
	PauseRecurring(ctx context.Context, name string) error
	// ResumeRecurring resumes a schedule from its next tick.
	ResumeRecurring(ctx context.Context, name string) error
	// DeleteRecurring removes a schedule made at runtime, or one no
	// process declares any more, with its stored occurrences.
	DeleteRecurring(ctx context.Context, name string) error
}

// recurringPageSize is how many schedules the page lists at a time.
const recurringPageSize = 100

// listLimit is the largest page ListRecurrings returns.
const listLimit = 1000

var errNoRecurring = errors.New("no recurring schedules: the console was given none (Options.Recurring)")

type recurringData struct {
	Available bool
	Prefix    string
	Rows      []bus.RecurringInfo
	// Next is the after= of the next page, Prev the before= of the
	// previous one; empty when there is none.
	Next, Prev string
	// Paged is true on any page but the first.
	Paged bool
	// Back is the query of this page, for the forms to come back to.
	Back string
	Form recurringForm
}

func (c *console) recurringList(w http.ResponseWriter, r *http.Request) {
	c.renderRecurring(w, r, http.StatusOK, recurringForm{Missed: "once", Body: "{}"}, nil)
}

// renderRecurring renders the page the request's query names, with the
// create form holding form, and err shown above it.
func (c *console) renderRecurring(w http.ResponseWriter, r *http.Request, status int, form recurringForm, err error) {
	q := r.URL.Query()
	d := recurringData{Available: c.opts.Recurring != nil, Prefix: strings.TrimSpace(q.Get("prefix")), Form: form}
	if c.opts.Recurring == nil {
		c.render(w, r, "recurring", "Recurring", http.StatusOK, d, nil)
		return
	}
	after, before := q.Get("after"), q.Get("before")
	d.Back = pageQuery(d.Prefix, after, before)
	var lerr error
	if before != "" {
		d.Rows, d.Next, d.Prev, lerr = pageBefore(r.Context(), c.opts.Recurring, d.Prefix, before)
	} else {
		d.Rows, d.Next, d.Prev, lerr = pageAfter(r.Context(), c.opts.Recurring, d.Prefix, after)
	}
	d.Paged = after != "" || before != ""
	c.render(w, r, "recurring", "Recurring", status, d, errors.Join(err, lerr))
}

// pageQuery is the query string of a page of the list.
func pageQuery(prefix, after, before string) string {
	v := url.Values{}
	for k, s := range map[string]string{"prefix": prefix, "after": after, "before": before} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// pageAfter returns the page of names after after, and the links to the
// next and previous pages.
func pageAfter(ctx context.Context, rec Recurring, prefix, after string) (rows []bus.RecurringInfo, next, prev string, err error) {
	rows, err = rec.ListRecurrings(ctx, bus.RecurringFilter{Prefix: prefix, After: after, Limit: recurringPageSize + 1})
	if len(rows) > recurringPageSize {
		rows = rows[:recurringPageSize]
		next = rows[len(rows)-1].Name
	}
	if after != "" && len(rows) > 0 {
		prev = rows[0].Name
	}
	return rows, next, prev, err
}

// pageBefore returns the page of names just before before, and the links
// to the next and previous pages. The store pages forward only, so it
// walks the names from the first, a thousand at a time: for very many
// schedules, a prefix keeps it short.
func pageBefore(ctx context.Context, rec Recurring, prefix, before string) (rows []bus.RecurringInfo, next, prev string, err error) {
	cursor, earlier := "", false
	for {
		page, err := rec.ListRecurrings(ctx, bus.RecurringFilter{Prefix: prefix, After: cursor, Limit: listLimit})
		if err != nil {
			return nil, "", "", err
		}
		done := len(page) < listLimit
		for i, info := range page {
			if info.Name >= before {
				page, done = page[:i], true
				break
			}
		}
		rows = append(rows, page...)
		if len(rows) > recurringPageSize {
			earlier = true
			rows = append([]bus.RecurringInfo(nil), rows[len(rows)-recurringPageSize:]...)
		}
		if done || len(page) == 0 {
			break
		}
		cursor = page[len(page)-1].Name
	}
	if len(rows) > 0 {
		next = rows[len(rows)-1].Name
		if earlier {
			prev = rows[0].Name
		}
	}
	return rows, next, prev, nil
}

func (c *console) recurringPause(w http.ResponseWriter, r *http.Request) {
	c.recurringAction(w, r, "paused", Recurring.PauseRecurring)
}

func (c *console) recurringResume(w http.ResponseWriter, r *http.Request) {
	c.recurringAction(w, r, "resumed", Recurring.ResumeRecurring)
}

func (c *console) recurringDelete(w http.ResponseWriter, r *http.Request) {
	c.recurringAction(w, r, "deleted", Recurring.DeleteRecurring)
}

// recurringAction runs do on the schedule the path names and goes back to
// the page the form was on (its back field).
func (c *console) recurringAction(w http.ResponseWriter, r *http.Request, done string,
	do func(Recurring, context.Context, string) error) {
	if c.opts.Recurring == nil {
		http.Error(w, errNoRecurring.Error(), http.StatusNotFound)
		return
	}
	name := r.PathValue("name")
	to := "/recurring" + backQuery(r.PostFormValue("back"))
	if err := do(c.opts.Recurring, r.Context(), name); err != nil {
		c.log.Error("console: recurring action", "name", name, "error", driver.RedactError(err))
		redirect(w, r, to, "error: "+err.Error())
		return
	}
	redirect(w, r, to, "schedule "+name+" "+done)
}

// backQuery returns the page query a form carried back, keeping only the
// list's own parameters.
func backQuery(back string) string {
	v, err := url.ParseQuery(strings.TrimPrefix(back, "?"))
	if err != nil {
		return ""
	}
	return pageQuery(v.Get("prefix"), v.Get("after"), v.Get("before"))
}
