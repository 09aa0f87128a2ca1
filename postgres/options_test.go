package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postbus/bus"
	"github.com/postbus/bus/postgres"
)

// lazyPool returns a pool that has not connected: New never touches the
// database, so these tests need no server.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestInvalidNamesAreTypedErrors(t *testing.T) {
	t.Parallel()
	pool := lazyPool(t)
	bad := []postgres.Options{
		{Schema: `public"; DROP TABLE x; --`},
		{Table: "outgoing messages"},
		{Table: "1table"},
		{Schema: "sch-ema"},
		{Table: "tåble"},
		{Schema: strings.Repeat("s", 64)},
		{Table: strings.Repeat("t", 47)}, // the index name would exceed 63 bytes
	}
	for _, o := range bad {
		_, err := postgres.New(pool, o)
		var nameErr *postgres.NameError
		if !errors.As(err, &nameErr) || !errors.Is(err, postgres.ErrInvalidName) {
			t.Errorf("New(%+v) = %v; want *NameError wrapping ErrInvalidName", o, err)
		}
		if _, err := postgres.MigrationsFor(o.Schema, o.Table); !errors.Is(err, postgres.ErrInvalidName) {
			t.Errorf("MigrationsFor(%q, %q) = %v; want ErrInvalidName", o.Schema, o.Table, err)
		}
	}
	good := []postgres.Options{{}, {Schema: "Mixed_Case", Table: "T1"}, {Schema: strings.Repeat("s", 63), Table: strings.Repeat("t", 46)}}
	for _, o := range good {
		if _, err := postgres.New(pool, o); err != nil {
			t.Errorf("New(%+v) = %v; want no error", o, err)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	if _, err := postgres.New(nil, postgres.Options{}); !errors.Is(err, postgres.ErrNilPool) {
		t.Errorf("New(nil) = %v; want ErrNilPool", err)
	}
	pool := lazyPool(t)
	for _, o := range []postgres.Options{{MaxBatchRows: -1}, {MaxConcurrentInserts: -1}, {NotifyWithin: -time.Second}} {
		_, err := postgres.New(pool, o)
		var optErr *postgres.OptionsError
		if !errors.As(err, &optErr) || !errors.Is(err, postgres.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v; want *OptionsError wrapping ErrInvalidOptions", o, err)
		}
	}
}

func TestInvalidRowsAreRejectedBeforeStoring(t *testing.T) {
	t.Parallel()
	p, err := postgres.New(lazyPool(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []bus.OutgoingMessage{
		{ID: "", Envelope: []byte{1}},
		{ID: "a\x00b", Envelope: []byte{1}},
		{ID: "\xff", Envelope: []byte{1}},
		{ID: "no-envelope"},
	} {
		// The pool points at a closed port: a row that reached the
		// database would fail with a connection error instead.
		err := p.StoreOutgoing(t.Context(), []bus.OutgoingMessage{m})
		var rowErr *postgres.InvalidRowError
		if !errors.As(err, &rowErr) || !errors.Is(err, postgres.ErrInvalidRow) {
			t.Errorf("StoreOutgoing(%q) = %v; want *InvalidRowError", m.ID, err)
		}
	}
}

func TestMigrationsAndNames(t *testing.T) {
	t.Parallel()
	m := postgres.Migrations()
	if len(m) != 18 || !strings.Contains(m[1], `"public"."outgoing_messages"`) ||
		!strings.Contains(m[3], `(transport, available_at, id)`) ||
		!strings.Contains(m[5], `"public"."outgoing_messages_inbox"`) || !strings.Contains(m[6], `(handled_at)`) ||
		!strings.Contains(m[7], `"public"."outgoing_messages_sagas"`) ||
		!strings.Contains(m[8], `message_type`) || !strings.Contains(m[9], `(due_at, id)`) ||
		!strings.Contains(m[10], `(message_type, due_at, id)`) || !strings.Contains(m[11], `"public"."outgoing_messages_failed"`) ||
		!strings.Contains(m[12], `(last_failed, id)`) || !strings.Contains(m[13], `(failure_group, last_failed, id)`) ||
		!strings.Contains(m[14], `"public"."outgoing_messages_recurring"`) || !strings.Contains(m[15], `alive_until`) ||
		!strings.Contains(m[16], `"outgoing_messages_recur_due_idx"`) || !strings.Contains(m[17], `"public"."outgoing_messages_runs"`) {
		t.Errorf("Migrations() = %q", m)
	}
	p, err := postgres.New(lazyPool(t), postgres.Options{Schema: "Billing", Table: "scheduled"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Table() != `"Billing"."scheduled"` || p.Channel() != "postbus.Billing.scheduled" {
		t.Errorf("Table() = %s, Channel() = %s", p.Table(), p.Channel())
	}
	long, err := postgres.New(lazyPool(t), postgres.Options{Schema: strings.Repeat("s", 40), Table: strings.Repeat("t", 40)})
	if err != nil {
		t.Fatal(err)
	}
	if ch := long.Channel(); len(ch) > 63 || !strings.HasPrefix(ch, "postbus.") {
		t.Errorf("long Channel() = %q (%d bytes), want a hashed name of at most 63 bytes", ch, len(ch))
	}
	if !p.Durable() {
		t.Error("Durable() = false")
	}
}
