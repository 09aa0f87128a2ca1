package postgres_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

// A bus on the PostgreSQL store and transport, through a URL that holds a
// password (trust authentication accepts it), or the same URL on a closed
// port, shows the password nowhere: not in its log at Debug, not in the
// errors of its calls, not in Metrics or the transport's Identity.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	admin := testPool(t) // skips when the server is absent
	for name, host := range map[string]string{"accepted": "", "closed port": bustest.DeadAddr(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(testURL())
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.UserPassword(u.User.Username(), drivertest.Password)
			q := u.Query()
			if host != "" {
				u.Host = host
				q.Set("connect_timeout", "2")
			}
			u.RawQuery = q.Encode()
			e := drivertest.NewExposure()
			pool, err := pgxpool.New(t.Context(), u.String())
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			schema := freshSchema(t, admin)
			p, err := postgres.New(pool, postgres.Options{Schema: schema, Logger: e.Log})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := postgres.NewTransport(pool, postgres.TransportOptions{Schema: schema, Logger: e.Log})
			if err != nil {
				t.Fatal(err)
			}
			e.Add("Identity()", tr.Identity())
			e.RunBus(t, bus.Config{Endpoint: "secrets-" + bustest.Namespace(), Persistence: p, Transport: tr}, 10*time.Second)
			if host != "" && e.Errors() == 0 {
				t.Error("no error on a closed port: the test proves nothing")
			}
			e.NoPassword(t)
		})
	}
}
