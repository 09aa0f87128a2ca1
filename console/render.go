package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := now.Sub(t).Round(time.Second)
		if d < 0 {
			return "in " + (-d).String()
		}
		return d.String() + " ago"
	},
	"p": url.PathEscape,
}

func parseTemplates() (map[string]*template.Template, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	pages, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, p := range pages {
		name := path.Base(p)
		if name == "layout.html" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, p)
		if err != nil {
			return nil, err
		}
		out[strings.TrimSuffix(name, ".html")] = t
	}
	return out, nil
}

// page is what every template receives.
type page struct {
	Title    string
	Base     string // the prefix the console is mounted under
	Nav      string
	CSRF     string
	ReadOnly bool
	CanRetry bool
	Flash    string
	Error    string
	Now      time.Time
	Data     any
	Refresh  int // seconds between reloads of the page; 0: none
}

// base returns the prefix the console is mounted under (what StripPrefix
// removed), so links work wherever it is mounted.
func base(r *http.Request) string {
	orig := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		orig = u.Path
	}
	return strings.TrimSuffix(strings.TrimSuffix(orig, r.URL.Path), "/")
}

func (c *console) render(w http.ResponseWriter, r *http.Request, name, title string, status int, data any, pageErr error) {
	p := page{
		Title: title, Base: base(r), Nav: name, ReadOnly: c.opts.ReadOnly,
		CanRetry: c.opts.Transport != nil && !c.opts.ReadOnly,
		Flash:    r.URL.Query().Get("msg"), Now: c.opts.Now().UTC(), Data: data,
	}
	if n, err := strconv.Atoi(r.URL.Query().Get("refresh")); err == nil && n >= 5 && n <= 3600 {
		p.Refresh = n
	}
	if !c.opts.ReadOnly {
		p.CSRF = c.csrfToken(w, r)
	}
	if pageErr != nil {
		pageErr = driver.RedactError(pageErr) // a client library may quote its URL
		p.Error = pageErr.Error()
		if status == http.StatusOK {
			status = http.StatusInternalServerError
		}
		if status >= http.StatusInternalServerError {
			c.log.Error("console: page failed", "page", name, "error", pageErr)
		}
	}
	var buf bytes.Buffer
	if err := c.tmpl[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("console: render", "page", name, "error", err)
		http.Error(w, "render error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// redirect sends the browser back to a page with a message (POST, then
// redirect, then GET). The message loses any password it quotes: it lands
// in the browser's address bar and history.
func redirect(w http.ResponseWriter, r *http.Request, to, msg string) {
	u := base(r) + to
	if msg = driver.Redact(msg); msg != "" {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + "msg=" + url.QueryEscape(msg)
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

// envelopeView is a decoded envelope for the message page.
type envelopeView struct {
	Fields  [][2]string
	Headers [][2]string
	Body    string
	Binary  bool
	Err     string
}

func viewEnvelope(data []byte) envelopeView {
	env, err := bus.UnmarshalEnvelope(data)
	if err != nil {
		return envelopeView{Err: err.Error()}
	}
	ts := funcs["ts"].(func(time.Time) string)
	v := envelopeView{Fields: [][2]string{
		{"ID", env.ID}, {"Type", env.Type}, {"Kind", env.Kind.String()},
		{"Content type", env.ContentType}, {"Correlation ID", env.CorrelationID},
		{"Source", env.Source}, {"Destination", env.Destination},
		{"Sent at", ts(env.SentAt)}, {"Due at", ts(env.DueAt)}, {"Expires at", ts(env.ExpiresAt)},
		{"Ordering key", env.OrderingKey},
	}}
	v.Headers = sortedPairs(env.Headers, "")
	v.Headers = append(v.Headers, sortedPairs(env.Attributes, "attribute ")...)
	v.Headers = append(v.Headers, sortedPairs(env.StickyAttributes, "sticky ")...)
	if utf8.Valid(env.Body) {
		v.Body = string(env.Body)
	} else {
		v.Binary = true
		v.Body = fmt.Sprintf("% x", env.Body)
	}
	return v
}

func sortedPairs(m map[string]string, prefix string) [][2]string {
	out := make([][2]string, 0, len(m))
	for k, v := range m {
		out = append(out, [2]string{prefix + k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}
