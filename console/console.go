package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/postbus/bus"
)

//go:embed templates/*.html
var templateFS embed.FS

// ErrInvalidOptions is returned by Handler for Options it cannot serve.
var ErrInvalidOptions = errors.New("console: invalid options")

// OptionsError names the Options field Handler rejected.
type OptionsError struct {
	Field  string
	Reason string
}

// Error describes the problem.
func (e *OptionsError) Error() string {
	return "console: invalid options: " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionsError) Unwrap() error { return ErrInvalidOptions }

// Options configure Handler. At least one of Scheduled, Failed, Recurring
// and Health is required.
type Options struct {
	// Scheduled is the scheduled-message store to browse. Nil: the
	// scheduled pages say the persistence has none.
	Scheduled bus.ScheduledBrowser
	// Failed is the failed-message store. Nil: the failed pages say there
	// is none.
	Failed bus.FailedStore
	// Transport sends retried messages back (bus.RetryFailed). Nil: retry
	// is not offered; delete still is.
	Transport bus.Transport
	// Recurring lists, creates, pauses, resumes and deletes recurring
	// schedules: pass the service's *bus.Bus. Nil: the schedules page
	// says there are none.
	Recurring Recurring
	// Metrics returns the bus's counters for the overview. Nil: not shown.
	Metrics func() bus.Metrics
	// Health reports the bus's health for the overview: pass the
	// service's (*bus.Bus).Health. The overview shows the checks of
	// /readyz (bus.HealthHandler), judged with HealthOptions, and the
	// lags. Nil: not shown.
	Health func(context.Context) bus.HealthReport
	// HealthOptions are the thresholds and the timeout Health's report is
	// judged and read with, as for bus.HealthHandler; zero values are its
	// defaults.
	HealthOptions bus.HealthOptions
	// Authorize decides whether a request may use the console. Nil: only
	// requests from a loopback address to a loopback Host are served.
	Authorize func(*http.Request) bool
	// ReadOnly hides every action and refuses every POST.
	ReadOnly bool
	// Now is the clock for the overview (overdue, histogram windows).
	// Default time.Now.
	Now func() time.Time
	// Logger receives failed actions and store errors. Default
	// slog.Default().
	Logger *slog.Logger
}

// csrfCookie holds the random value the forms' token is derived from.
const csrfCookie = "postbus_console_csrf"

// csrfField is the form field carrying the token.
const csrfField = "csrf"

type console struct {
	opts   Options
	tmpl   map[string]*template.Template
	secret [32]byte
	log    *slog.Logger
}

// Handler returns the console. Routes are relative to where it is mounted:
// "/" (overview), "/scheduled", "/scheduled/{id}", "/recurring", "/failed",
// "/failed/{id}", and the POST actions under them. Mount it under a prefix
// with http.StripPrefix.
func Handler(opts Options) (http.Handler, error) {
	if opts.Scheduled == nil && opts.Failed == nil && opts.Recurring == nil && opts.Health == nil {
		return nil, &OptionsError{Field: "Scheduled", Reason: "give a ScheduledBrowser, a FailedStore, a Recurring or a Health"}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &console{opts: opts, log: opts.Logger}
	if c.log == nil {
		c.log = slog.Default()
	}
	if _, err := rand.Read(c.secret[:]); err != nil {
		return nil, err
	}
	tm, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	c.tmpl = tm

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /scheduled", c.scheduledList)
	mux.HandleFunc("GET /scheduled/{id}", c.scheduledShow)
	mux.HandleFunc("POST /scheduled/{id}/cancel", c.scheduledCancel)
	mux.HandleFunc("POST /scheduled/{id}/send-now", c.scheduledSendNow)
	mux.HandleFunc("GET /recurring", c.recurringList)
	mux.HandleFunc("POST /recurring", c.recurringCreate)
	mux.HandleFunc("POST /recurring/{name}/delete", c.recurringDelete)
	mux.HandleFunc("POST /recurring/{name}/pause", c.recurringPause)
	mux.HandleFunc("POST /recurring/{name}/resume", c.recurringResume)
	mux.HandleFunc("GET /failed", c.failedList)
	mux.HandleFunc("GET /failed/{id}", c.failedShow)
	mux.HandleFunc("POST /failed/retry", c.failedAction(actionRetry))
	mux.HandleFunc("POST /failed/delete", c.failedAction(actionDelete))
	return c.guard(mux), nil
}

// guard applies the access rules before any route.
func (c *console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.opts.Authorize != nil {
			if !c.opts.Authorize(r) {
				http.Error(w, "forbidden", http.StatusForbidden)
				return
			}
		} else if !loopbackRequest(r) {
			http.Error(w, "forbidden: the console serves only loopback requests unless Options.Authorize is set", http.StatusForbidden)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if r.Method == http.MethodPost {
			if c.opts.ReadOnly {
				http.Error(w, "forbidden: the console is read-only", http.StatusForbidden)
				return
			}
			if !c.validCSRF(r) {
				http.Error(w, "forbidden: missing or invalid CSRF token", http.StatusForbidden)
				return
			}
		} else if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackRequest reports whether r comes from a loopback address and names
// a loopback host: the Host check defeats DNS rebinding, where a page on a
// foreign name reaches the console through the user's browser.
func loopbackRequest(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return false
	}
	return loopbackHost(r.Host)
}

func loopbackHost(hostport string) bool {
	h := hostport
	if sh, _, err := net.SplitHostPort(hostport); err == nil {
		h = sh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// csrfToken returns the form token for r, setting the cookie it is bound to
// when r has none.
func (c *console) csrfToken(w http.ResponseWriter, r *http.Request) string {
	v := ""
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) == 64 {
		v = ck.Value
	} else {
		var b [32]byte
		_, _ = rand.Read(b[:])
		v = hex.EncodeToString(b[:])
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		r.AddCookie(&http.Cookie{Name: csrfCookie, Value: v})
	}
	return c.sign(v)
}

func (c *console) sign(v string) string {
	m := hmac.New(sha256.New, c.secret[:])
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

func (c *console) validCSRF(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(c.sign(ck.Value)))
}
