package drivertest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
)

// Password is the password the tests put in connection URLs, to look for
// it in what a bus shows.
const Password = "S3cretPw-XYZ"

// Exposure gathers what a bus and its drivers show the world: their log,
// kept at Debug, the errors of their calls, their metrics. A test gives
// Log to the drivers it builds, runs a bus (RunBus), adds what else it
// saw, and checks (NoPassword) that none of it holds Password.
type Exposure struct {
	// Log keeps every record, Debug and above.
	Log   *slog.Logger
	mu    sync.Mutex
	log   strings.Builder
	shown []string
	errs  int
}

// NewExposure returns an empty Exposure.
func NewExposure() *Exposure {
	e := &Exposure{}
	e.Log = slog.New(slog.NewTextHandler(logWriter{e}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return e
}

type logWriter struct{ e *Exposure }

func (w logWriter) Write(p []byte) (int, error) {
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	return w.e.log.Write(p)
}

// Add records text, shown as what.
func (e *Exposure) Add(what, text string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shown = append(e.shown, what+": "+text)
}

// AddErr records err, when not nil, as what, and tells whether it was.
func (e *Exposure) AddErr(what string, err error) bool {
	if err != nil {
		e.Add(what, err.Error())
		e.mu.Lock()
		e.errs++
		e.mu.Unlock()
	}
	return err != nil
}

// Errors returns how many errors AddErr recorded.
func (e *Exposure) Errors() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.errs
}

// LogText returns the log so far.
func (e *Exposure) LogText() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.String()
}

// secretsCommand is the command RunBus sends.
type secretsCommand struct{ N int }

// RunBus builds a bus on cfg with e.Log, handles and routes a command to
// its own endpoint, starts it, sends the command now and in a minute,
// waits until something is logged at Warn or above (or 3 s), and stops it,
// each call bounded by d. It records every error and the bus's Metrics.
func (e *Exposure) RunBus(t testing.TB, cfg bus.Config, d time.Duration) {
	t.Helper()
	cfg.Logger = e.Log
	b, err := bus.New(cfg)
	if e.AddErr("New", err) {
		return
	}
	if err := bus.Handle(b, func(context.Context, secretsCommand) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := bus.Route[secretsCommand](b, cfg.Endpoint); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if !e.AddErr("Start", b.Start(ctx)) {
		sctx, cancel := context.WithTimeout(context.Background(), d)
		e.AddErr("Send", b.Send(sctx, secretsCommand{1}))
		cancel()
		sctx, cancel = context.WithTimeout(context.Background(), d)
		e.AddErr("Send later", b.Send(sctx, secretsCommand{2}, bus.DeliverAfter(time.Minute)))
		cancel()
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if l := e.LogText(); strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				break
			}
		}
	}
	stop, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	e.AddErr("Stop", b.Stop(stop))
	e.Add("Metrics()", fmt.Sprintf("%+v", b.Metrics()))
}

// NoPassword fails t when the log or a recorded text holds Password. With
// -v it logs what it checked.
func (e *Exposure) NoPassword(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	all := append([]string{"the log: " + e.log.String()}, e.shown...)
	for _, s := range all {
		if strings.Contains(s, Password) {
			t.Errorf("the password is shown in %s", s)
		}
	}
	if testing.Verbose() {
		t.Logf("checked:\n%s", strings.Join(all, "\n"))
	}
}
