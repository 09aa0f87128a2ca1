package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Defaults of HealthOptions.
const (
	// DefaultMaxDispatchLag is the default of HealthOptions.MaxDispatchLag.
	DefaultMaxDispatchLag = time.Minute
	// DefaultMaxRecurringLag is the default of HealthOptions.MaxRecurringLag.
	DefaultMaxRecurringLag = time.Minute
)

// HealthOptions configure HealthHandler. Zero values mean the defaults.
type HealthOptions struct {
	// MaxDispatchLag is the largest HealthReport.DispatchLag at which a
	// bus that dispatches is ready. Default DefaultMaxDispatchLag (1
	// minute); negative: the lag is reported, not checked. The lag is
	// the store's, so every dispatching process on it turns unready
	// together: a fleet whose web traffic must not follow the backlog
	// disables the check and alerts on the lag instead.
	MaxDispatchLag time.Duration
	// MaxRecurringLag is the largest HealthReport.RecurringLag at which
	// the bus is ready. Default DefaultMaxRecurringLag (1 minute);
	// negative: reported, not checked.
	MaxRecurringLag time.Duration
	// Timeout bounds the checks of one /readyz request. Default
	// DefaultHealthTimeout (1 s); keep the probe's timeoutSeconds above it.
	Timeout time.Duration
}

func (o HealthOptions) withDefaults() HealthOptions {
	if o.MaxDispatchLag == 0 {
		o.MaxDispatchLag = DefaultMaxDispatchLag
	}
	if o.MaxRecurringLag == 0 {
		o.MaxRecurringLag = DefaultMaxRecurringLag
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultHealthTimeout
	}
	return o
}

// HealthHandler serves Kubernetes-style probes of b, at any path that
// ends in "/livez" or "/readyz" (so it can be mounted at the root or
// under a prefix), for GET and HEAD:
//
//   - /livez answers 200 while the process runs a bus that was not
//     stopped (before Start too: a bus waiting for its store to come up is
//     alive), else 503. It checks no backend, so a database outage never
//     gets a process restarted.
//   - /readyz answers 200 when the bus is started, its transport and
//     store answer their pings (a backend without Pinger is not held
//     against it), and the lags are within opts' thresholds; else 503.
//
// The body is a short JSON object: "status" ("ok" or "fail"), "checks"
// (each with "name", "ok" and a "detail" that never carries an error's
// text, so no address or password), and for /readyz the lags in seconds
// and the last claim. Other paths get 404, other methods 405.
func HealthHandler(b *Bus, opts HealthOptions) http.Handler {
	opts = opts.withDefaults()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var live bool
		switch p := strings.TrimSuffix(r.URL.Path, "/"); {
		case strings.HasSuffix(p, "/livez") || p == "livez":
			live = true
		case strings.HasSuffix(p, "/readyz") || p == "readyz":
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var body healthBody
		if live {
			body = livez(b)
		} else {
			ctx, cancel := context.WithTimeout(r.Context(), opts.Timeout)
			body = readyz(b.Health(ctx), opts)
			cancel()
		}
		code := http.StatusOK
		if body.Status != "ok" {
			code = http.StatusServiceUnavailable
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(code)
		if r.Method == http.MethodHead {
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	})
}

// healthBody is the JSON a probe answers with.
type healthBody struct {
	Status              string        `json:"status"` // "ok" or "fail"
	Checks              []HealthCheck `json:"checks"`
	DispatchLagSeconds  *float64      `json:"dispatch_lag_seconds,omitempty"`
	RecurringLagSeconds *float64      `json:"recurring_lag_seconds,omitempty"`
	LastClaim           string        `json:"last_claim,omitempty"` // RFC 3339, UTC
}

// HealthCheck is one line of a probe's verdict.
type HealthCheck struct {
	Name   string `json:"name"`             // started, transport, store, dispatch_lag, recurring_lag; bus for /livez
	OK     bool   `json:"ok"`               // the check passed
	Detail string `json:"detail,omitempty"` // what was found, without any error's text
}

// finish sets the status from the checks.
func (h *healthBody) finish() healthBody {
	h.Status = "ok"
	for _, c := range h.Checks {
		if !c.OK {
			h.Status = "fail"
		}
	}
	return *h
}

func livez(b *Bus) healthBody {
	b.mu.Lock()
	st := b.state
	b.mu.Unlock()
	detail := map[state]string{stateNew: "not started yet", stateStarted: "started", stateClosed: "stopped"}[st]
	h := healthBody{Checks: []HealthCheck{{Name: "bus", OK: st != stateClosed, Detail: detail}}}
	return h.finish()
}

// Readiness judges r as /readyz does, with o's thresholds (zero values:
// the defaults): the bus is ready when every check is OK. The checks are
// started, transport, store, dispatch_lag (judged only on a bus that
// dispatches) and recurring_lag. A backend without Pinger passes.
func (o HealthOptions) Readiness(r HealthReport) []HealthCheck {
	o = o.withDefaults()
	started := HealthCheck{Name: "started", OK: r.Started, Detail: "started"}
	switch {
	case r.Stopped:
		started.Detail = "stopped"
	case !r.Started:
		started.Detail = "not started yet"
	}
	dispatch := lagCheck("dispatch_lag", r.DispatchLag, r.DispatchLagErr, o.MaxDispatchLag)
	if !r.Dispatching {
		dispatch.OK, dispatch.Detail = true, "not dispatching: "+dispatch.Detail
	}
	return []HealthCheck{started, pingCheck("transport", r.Transport), pingCheck("store", r.Store),
		dispatch, lagCheck("recurring_lag", r.RecurringLag, r.RecurringLagErr, o.MaxRecurringLag)}
}

// readyz judges r against opts.
func readyz(r HealthReport, opts HealthOptions) healthBody {
	h := healthBody{Checks: opts.Readiness(r)}
	if r.DispatchLagErr == nil {
		s := r.DispatchLag.Seconds()
		h.DispatchLagSeconds = &s
	}
	if r.RecurringLagErr == nil {
		s := r.RecurringLag.Seconds()
		h.RecurringLagSeconds = &s
	}
	if !r.LastClaim.IsZero() {
		h.LastClaim = r.LastClaim.UTC().Format(time.RFC3339Nano)
	}
	return h.finish()
}

// pingCheck describes a ping without its error's text.
func pingCheck(name string, p PingResult) HealthCheck {
	switch p.Status {
	case Reachable:
		return HealthCheck{Name: name, OK: true, Detail: "reachable in " + roundLatency(p.Latency).String()}
	case Unreachable:
		return HealthCheck{Name: name, Detail: "unreachable: " + failureKind(p.Err)}
	}
	return HealthCheck{Name: name, OK: true, Detail: "unknown: no ping"}
}

// lagCheck compares a lag with its threshold (negative: not checked).
func lagCheck(name string, lag time.Duration, err error, limit time.Duration) HealthCheck {
	if err != nil {
		return HealthCheck{Name: name, OK: limit < 0, Detail: "unknown: " + failureKind(err)}
	}
	c := HealthCheck{Name: name, OK: limit < 0 || lag <= limit, Detail: roundLatency(lag).String()}
	if limit >= 0 {
		c.Detail += fmt.Sprintf(" (max %v)", limit)
	}
	return c
}

// failureKind names a failure without its text, which may carry an
// address or a user name.
func failureKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.Is(err, context.Canceled):
		return "check cancelled"
	}
	return "the check failed"
}

// roundLatency keeps a duration short for a probe's detail.
func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
