// Package console serves the Postbus operations console: a small web
// application, rendered on the server with html/template, for the scheduled
// backlog and the failed messages of a service.
//
// # Mounting
//
// Handler returns an http.Handler a service mounts on its own server, or
// that `postbus console` serves:
//
//	h, err := console.Handler(console.Options{
//		Scheduled: store,  // a bus.ScheduledBrowser (the service's persistence)
//		Failed:    store,  // a bus.FailedStore
//		Transport: tr,     // for retries; nil hides them
//		Metrics:   b.Metrics,
//		Health:    b.Health, // the health section of the overview
//	})
//	mux.Handle("/ops/", http.StripPrefix("/ops", h))
//
// # Pages
//
// The overview shows the backlog size, a due-time histogram for the next
// hour and the next day, the oldest overdue message, the bus's counters and
// the largest failure groups; with Options.Health, it opens with the
// bus's health as /readyz judges it (bus.HealthHandler, with
// Options.HealthOptions): each check, the dispatch and recurring lags and
// the dispatcher's last claim. The scheduled page lists rows by due time with
// a type filter and a search by message ID, and cancels a row or sends it
// now. The failed page lists failure groups and messages, with retry and
// delete of one message, a group, or every message matching a filter. A
// message page shows an envelope: fields, headers and body (always escaped).
// The recurring page (with Options.Recurring, usually the service's
// *bus.Bus) lists the stored schedules a hundred at a time, by name, with a
// prefix filter: for each its schedule text, whether it was made at runtime
// or declared in code, its generation, next and last ticks, skipped ticks
// and whether it is paused or superseded. It pauses, resumes or deletes
// one for every process, and makes a schedule at runtime from a form
// (name, schedule text, message type, JSON body, destination or publish;
// the bus must serialize messages as JSON). Pages work without JavaScript.
//
// # Security
//
// Without Options.Authorize, the console answers only requests from a
// loopback address whose Host header names a loopback host (a page served
// to a browser through a rebinding DNS name is refused). With Authorize,
// that function decides for every request; put the console behind your
// authentication. Actions are POST forms that carry a CSRF token bound to
// a cookie; Options.ReadOnly hides every action and refuses every POST.
package console
