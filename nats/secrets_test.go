package nats_test

import (
	"net/url"
	"testing"
	"time"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/nats"
)

// A bus on a connection made through a URL that holds a password (the
// test server has no authentication and ignores it), or through the same
// URL on a closed port, shows the password nowhere: not in its log at
// Debug, not in the errors of its calls or of Connect, not in Metrics or
// the transport's Identity.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	admin := connect(t, serverURL()) // skips when the server is absent
	for name, host := range map[string]string{"ignored": "", "closed port": bustest.DeadAddr(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(serverURL())
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.UserPassword("app", drivertest.Password)
			if host != "" {
				u.Host = host
			}
			e := drivertest.NewExposure()
			nc, err := natsio.Connect(u.String(), natsio.Timeout(time.Second), natsio.RetryOnFailedConnect(true),
				natsio.MaxReconnects(-1), natsio.ReconnectWait(50*time.Millisecond),
				natsio.ErrorHandler(func(_ *natsio.Conn, _ *natsio.Subscription, err error) { e.AddErr("ErrorHandler", err) }),
				natsio.DisconnectErrHandler(func(_ *natsio.Conn, err error) { e.AddErr("DisconnectErrHandler", err) }))
			if e.AddErr("Connect", err) {
				t.Fatal(err)
			}
			defer nc.Close()
			opts := namespace(t, admin)
			opts.Logger = e.Log
			tr, err := nats.New(nc, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			e.Add("Identity()", tr.Identity())
			e.RunBus(t, bus.Config{Endpoint: "secrets-" + bustest.Namespace(), Transport: tr}, 5*time.Second)
			e.AddErr("LastError", nc.LastError())
			if host != "" && e.Errors() == 0 {
				t.Error("no error on a closed port: the test proves nothing")
			}
			e.NoPassword(t)
		})
	}
}
