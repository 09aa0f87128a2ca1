package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

var errNoFailed = errors.New("this persistence has no failed-message store")

type failedData struct {
	Available bool
	Query     bus.FailedQuery
	Count     int64
	Groups    []bus.FailedGroup
	Rows      []bus.FailedMessage
	NextTime  string
	NextID    string
	Filtered  bool
	Filter    string // the filter as form fields, for "all matching"
}

func failedQueryFrom(v url.Values) bus.FailedQuery {
	return bus.FailedQuery{
		Group: strings.TrimSpace(v.Get("group")), Type: strings.TrimSpace(v.Get("type")),
		Endpoint: strings.TrimSpace(v.Get("endpoint")), Search: strings.TrimSpace(v.Get("id")),
	}
}

func (c *console) failedList(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	d := failedData{Available: c.opts.Failed != nil, Query: failedQueryFrom(v)}
	if c.opts.Failed == nil {
		c.render(w, r, "failed", "Failed", http.StatusOK, d, nil)
		return
	}
	ctx := r.Context()
	q := d.Query
	d.Filtered = q.Group != "" || q.Type != "" || q.Endpoint != "" || q.Search != ""
	var errs []error
	var err error
	d.Groups, err = c.opts.Failed.FailedGroups(ctx, 50)
	errs = append(errs, err)
	d.Count, err = c.opts.Failed.CountFailed(ctx, q)
	errs = append(errs, err)
	q.Limit = pageSize + 1
	q.BeforeID = v.Get("before_id")
	if s := v.Get("before_failed"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			c.render(w, r, "failed", "Failed", http.StatusBadRequest, d, errors.New("before_failed: not an RFC 3339 time"))
			return
		}
		q.BeforeFailed = t
	}
	rows, err := c.opts.Failed.ListFailed(ctx, q)
	errs = append(errs, err)
	if len(rows) > pageSize {
		rows = rows[:pageSize]
		last := rows[len(rows)-1]
		d.NextTime, d.NextID = last.LastFailed.UTC().Format(time.RFC3339Nano), last.ID
	}
	d.Rows = rows
	c.render(w, r, "failed", "Failed", http.StatusOK, d, errors.Join(errs...))
}

func (c *console) failedShow(w http.ResponseWriter, r *http.Request) {
	if c.opts.Failed == nil {
		c.render(w, r, "message", "Message", http.StatusNotFound, messageData{}, errNoFailed)
		return
	}
	id := r.PathValue("id")
	m, ok, err := c.opts.Failed.GetFailed(r.Context(), id)
	if err != nil || !ok {
		if err == nil {
			err = errors.New("no failed message " + id + " (it was retried or deleted)")
		}
		c.render(w, r, "message", "Message", http.StatusNotFound, messageData{}, err)
		return
	}
	c.render(w, r, "message", "Failed message "+id, http.StatusOK, messageData{Failed: &m, Envelope: viewEnvelope(m.Envelope)}, nil)
}

type failedActionKind int

const (
	actionRetry failedActionKind = iota
	actionDelete
)

// failedAction retries or deletes the messages a form names: "id" values,
// a "group", or "all" with the filter fields (group, type, endpoint).
func (c *console) failedAction(kind failedActionKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.opts.Failed == nil {
			http.Error(w, errNoFailed.Error(), http.StatusNotFound)
			return
		}
		if kind == actionRetry && c.opts.Transport == nil {
			http.Error(w, "retry needs a transport (Options.Transport)", http.StatusConflict)
			return
		}
		ctx := r.Context()
		ids := r.PostForm["id"]
		q := failedQueryFrom(r.PostForm)
		q.Search = ""
		back := "/failed"
		switch {
		case len(ids) > 0:
		case q.Group != "" || r.PostFormValue("all") == "1":
			var err error
			if ids, err = FailedIDs(ctx, c.opts.Failed, q); err != nil {
				redirect(w, r, back, "error: "+err.Error())
				return
			}
		default:
			http.Error(w, "name messages: id, group, or all=1 with a filter", http.StatusBadRequest)
			return
		}
		var n int
		var err error
		verb := "retried"
		if kind == actionRetry {
			n, err = bus.RetryFailed(ctx, c.opts.Transport, c.opts.Failed, ids)
		} else {
			verb = "deleted"
			n, err = c.opts.Failed.DeleteFailed(ctx, ids)
		}
		msg := fmt.Sprintf("%s %d of %d message(s)", verb, n, len(ids))
		if err != nil {
			c.log.Error("console: failed action", "action", verb, "done", n, "error", driver.RedactError(err))
			msg += "; error: " + err.Error()
		}
		redirect(w, r, back, msg)
	}
}

// FailedIDs returns the IDs of every stored failure q selects (ignoring
// q.Limit and its paging fields), paging through the store by keyset.
func FailedIDs(ctx context.Context, s bus.FailedStore, q bus.FailedQuery) ([]string, error) {
	q.BeforeFailed, q.BeforeID, q.Limit = time.Time{}, "", 1000
	var ids []string
	for {
		rows, err := s.ListFailed(ctx, q)
		if err != nil {
			return ids, err
		}
		for _, m := range rows {
			ids = append(ids, m.ID)
		}
		if len(rows) < q.Limit {
			return ids, nil
		}
		last := rows[len(rows)-1]
		q.BeforeFailed, q.BeforeID = last.LastFailed, last.ID
	}
}
