package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/postbus/bus/console"
)

func (a *app) console(ctx context.Context, args []string) error {
	c := a.newCommand("console", "console [--addr 127.0.0.1:8080] [--read-only]",
		"  POSTBUS_POSTGRES_URL=postgres://ops@db/app postbus console --addr 127.0.0.1:8080\n"+
			"  postbus console --read-only   # browse only: no cancel, retry or delete\n")
	addr := c.fs.String("addr", "127.0.0.1:8080", "listen address; the console serves loopback clients only")
	readOnly := c.fs.Bool("read-only", false, "hide and refuse every action")
	pos, err := a.parse(c, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("console takes no arguments")
	}
	hasT := len(c.conn.transports()) > 0
	b, err := a.open(ctx, c.conn, need{persistence: true, transport: hasT})
	if err != nil {
		return err
	}
	defer b.Close()
	h, stop, err := a.consoleHandler(b, *readOnly)
	if err != nil {
		return err
	}
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(a.stderr, "postbus console on http://%s/ (%s", ln.Addr(), b.PersistenceName)
	if b.Transport != nil {
		fmt.Fprintf(a.stderr, ", retries through %s", b.TransportName)
	} else {
		fmt.Fprint(a.stderr, ", no transport: retry disabled")
	}
	fmt.Fprintln(a.stderr, "); stop with Ctrl-C")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// consoleHandler returns the console on the opened backends, and what
// stops it.
func (a *app) consoleHandler(b *backends, readOnly bool) (http.Handler, func(), error) {
	opts := console.Options{Scheduled: b.Scheduled, Failed: b.Failed, Transport: b.Transport, ReadOnly: readOnly, Logger: a.logger()}
	stop := func() {}
	if b.Recurring != nil {
		rb, err := a.recurringBus(b)
		if err != nil {
			return nil, nil, err
		}
		stop = func() { _ = rb.Stop(context.Background()) }
		opts.Recurring = rb
	}
	h, err := console.Handler(opts)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("the %s persistence offers nothing to browse: %w", b.PersistenceName, err)
	}
	return h, stop, nil
}
