package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/postgres"
)

// transportFeatures is what the transport declares to the suite.
var transportFeatures = bustest.Features{
	NativeRedelivery: true,
	MaxMessageSize:   postgres.DefaultMaxMessageSize,
}

// newTransport returns a transport on pool in schema, with a short lease.
func newTransport(t testing.TB, pool *pgxpool.Pool, schema string, opts postgres.TransportOptions) *postgres.Transport {
	t.Helper()
	opts.Schema = schema
	if opts.Lease == 0 {
		opts.Lease = 3 * time.Second
	}
	tr, err := postgres.NewTransport(pool, opts)
	if err != nil {
		t.Fatalf("NewTransport: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	return tr
}

func TestTransportConformance(t *testing.T) {
	t.Parallel()
	testPool(t)
	pool := newPool(t, 40)
	schema := freshSchema(t, pool)
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		return newTransport(t, pool, schema, postgres.TransportOptions{})
	}, transportFeatures)
}

func TestTransportConformanceWithoutNotify(t *testing.T) {
	t.Parallel()
	testPool(t)
	pool := newPool(t, 40)
	schema := freshSchema(t, pool)
	bustest.TransportTests(t, func(t *testing.T) bus.Transport {
		return newTransport(t, pool, schema, postgres.TransportOptions{DisableNotify: true, PollInterval: 100 * time.Millisecond})
	}, transportFeatures)
}

func TestTransportOptionsAreChecked(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{}
	for _, tc := range []struct {
		opts postgres.TransportOptions
		want error
	}{
		{postgres.TransportOptions{Schema: "bad name"}, postgres.ErrInvalidName},
		{postgres.TransportOptions{TablePrefix: strings.Repeat("p", 60)}, postgres.ErrInvalidName},
		{postgres.TransportOptions{Lease: time.Millisecond}, postgres.ErrInvalidOptions},
		{postgres.TransportOptions{MaxMessageSize: -1}, postgres.ErrInvalidOptions},
	} {
		if _, err := postgres.NewTransport(pool, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("NewTransport(%+v) = %v, want %v", tc.opts, err, tc.want)
		}
	}
	_, err := postgres.NewTransport(pool, postgres.TransportOptions{PollInterval: -time.Second})
	drivertest.TypedError[*postgres.OptionsError](t, err, postgres.ErrInvalidOptions, "postgres: invalid options: PollInterval: must not be negative")
	if _, err := postgres.NewTransport(nil, postgres.TransportOptions{}); !errors.Is(err, postgres.ErrNilPool) {
		t.Errorf("NewTransport(nil) = %v, want ErrNilPool", err)
	}
}
