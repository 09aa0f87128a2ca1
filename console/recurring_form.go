package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// recurringForm is the form that makes a schedule at runtime.
type recurringForm struct {
	Name, Schedule, Type, Body, To, Missed string
	Publish                                bool
}

// errBadForm is wrapped by the errors of a form the page refuses before
// calling the bus.
var errBadForm = errors.New("console: invalid form")

// rawMessage is a message the console has no Go type for: the type name
// and the JSON body from the form. The bus's JSON serializer writes the
// body as it is.
type rawMessage struct {
	name string
	body json.RawMessage
}

// MessageName returns the message type from the form.
func (m rawMessage) MessageName() string { return m.name }

// MarshalJSON returns the body from the form.
func (m rawMessage) MarshalJSON() ([]byte, error) { return m.body, nil }

// spec builds the schedule the form describes; SetRecurring checks the
// rest (name, schedule text).
func (f recurringForm) spec() (bus.RecurringSpec, error) {
	bad := func(format string, args ...any) (bus.RecurringSpec, error) {
		return bus.RecurringSpec{}, fmt.Errorf("%w: "+format, append([]any{errBadForm}, args...)...)
	}
	var missed bus.MissedPolicy
	switch f.Missed {
	case "", "once":
		missed = bus.MissedOnce
	case "all":
		missed = bus.MissedAll
	case "skip":
		missed = bus.MissedSkip
	default:
		return bad("missed ticks: %q is not once, all or skip", f.Missed)
	}
	switch {
	case f.Type == "":
		return bad("message type: required, the type the handlers know")
	case !json.Valid([]byte(f.Body)):
		return bad("body: not valid JSON")
	case f.To == "" && !f.Publish:
		return bad("give a destination endpoint, or publish the message as an event")
	case f.To != "" && f.Publish:
		return bad("give a destination endpoint or publish, not both")
	}
	s := bus.RecurringSpec{Name: f.Name, Schedule: f.Schedule, Message: rawMessage{f.Type, json.RawMessage(f.Body)},
		Publish: f.Publish, Missed: missed}
	if f.To != "" {
		s.Options = []bus.Option{bus.To(f.To)}
	}
	return s, nil
}

// recurringCreate makes (or replaces) a schedule at runtime from the form,
// then shows it; a refused form is shown again with the reason.
func (c *console) recurringCreate(w http.ResponseWriter, r *http.Request) {
	if c.opts.Recurring == nil {
		http.Error(w, errNoRecurring.Error(), http.StatusNotFound)
		return
	}
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	f := recurringForm{Name: v("name"), Schedule: v("schedule"), Type: v("type"), Body: v("body"), To: v("to"),
		Missed: v("missed"), Publish: r.PostFormValue("publish") != ""}
	if f.Body == "" {
		f.Body = "{}"
	}
	spec, err := f.spec()
	if err == nil {
		err = c.opts.Recurring.SetRecurring(r.Context(), spec)
	}
	if err != nil {
		status := http.StatusBadRequest
		if !errors.Is(err, errBadForm) && !errors.Is(err, bus.ErrInvalidRecurring) {
			status = http.StatusInternalServerError
			c.log.Error("console: set recurring", "name", f.Name, "error", driver.RedactError(err))
		}
		r.URL.RawQuery = strings.TrimPrefix(backQuery(r.PostFormValue("back")), "?")
		c.renderRecurring(w, r, status, f, err)
		return
	}
	redirect(w, r, "/recurring?prefix="+url.QueryEscape(f.Name), "schedule "+f.Name+" set")
}
