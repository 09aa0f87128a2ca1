package e2e_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// postgresKit returns a namespace on the PostgreSQL transport: a schema of
// its own for the transport's tables, dropped at cleanup. Each transport
// value has a pool of its own, like a separate process.
func postgresKit(t testing.TB) *kit {
	t.Helper()
	admin := newPool(t, 2)
	schema := freshSchema(t, admin)
	s := suffix()
	k := &kit{
		name: "postgres", endpoint: "pbe2e-" + s, errorQueue: "pbe2e-" + s + "-error",
		deadLetter: "pbe2e-" + s + "-deadletter",
	}
	k.newTransport = func(t testing.TB, addr string) bus.Transport {
		t.Helper()
		u := postgresURL()
		if addr != "" { // a proxy's host:port
			pu, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			pu.Host = addr
			u = pu.String()
		}
		tr, err := postgres.NewTransport(newPoolAt(t, u, 16), postgres.TransportOptions{Schema: schema, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = tr.Close(ctx)
		})
		return tr
	}
	return k
}

// TestDelayedTwoInstancesPostgres runs the two-instance delayed-delivery
// case over the PostgreSQL transport: 2,000 messages due over 5 s, each
// handled once, none early.
func TestDelayedTwoInstancesPostgres(t *testing.T) {
	t.Parallel()
	delayedTwoInstances(t, postgresKit(t))
}
