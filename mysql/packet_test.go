package mysql_test

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/mysql"
)

// serverPacketLimit reads the server's max_allowed_packet (never changed
// by the tests: the server is shared).
func serverPacketLimit(t *testing.T) int {
	t.Helper()
	var limit int
	if err := testDB(t).QueryRowContext(drivertest.Ctx(t, 0), "SELECT @@max_allowed_packet").Scan(&limit); err != nil {
		t.Fatalf("read max_allowed_packet: %v", err)
	}
	return limit
}

func sizedRow(id string, size int) bus.OutgoingMessage {
	return bus.OutgoingMessage{ID: id, Kind: bus.KindCommand, Type: "test.Big", Envelope: bytes.Repeat([]byte("x"), size),
		DueAt: time.Now().Add(time.Hour), Transport: "t"}
}

// TestRowLargerThanMaxAllowedPacketIsRefused: a row the server would cut
// the connection over (a packet larger than its max_allowed_packet) is
// refused before anything is sent, with an error that matches
// bus.ErrInvalidMessage and names the limit. The call stores nothing of
// its batch, as for any invalid row, and the store goes on working; a row
// just under the limit is stored.
func TestRowLargerThanMaxAllowedPacketIsRefused(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	p := newStore(t, db, mysql.Options{})
	limit := serverPacketLimit(t)
	ctx := drivertest.Ctx(t, 0)

	err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{sizedRow("small", 10), sizedRow("big", limit+1)})
	if !errors.Is(err, bus.ErrInvalidMessage) {
		t.Fatalf("StoreOutgoing of a row over max_allowed_packet = %v, want bus.ErrInvalidMessage", err)
	}
	var tooLarge *mysql.RowTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.ID != "big" || tooLarge.Limit != limit {
		t.Errorf("err = %v, want a *RowTooLargeError for row big with Limit %d", err, limit)
	}
	if !strings.Contains(err.Error(), strconv.Itoa(limit)) || !strings.Contains(err.Error(), "max_allowed_packet") {
		t.Errorf("the error does not name the limit: %v", err)
	}
	if n, err := p.Len(ctx); err != nil || n != 0 {
		t.Errorf("Len = %d, %v after the refused call; want 0 (the call stores all or none)", n, err)
	}

	under := limit - 4096
	if err := p.StoreOutgoing(ctx, []bus.OutgoingMessage{sizedRow("small", 10), sizedRow("under", under)}); err != nil {
		t.Fatalf("StoreOutgoing of a row of %d bytes, under max_allowed_packet %d: %v", under, limit, err)
	}
	if n, err := p.Len(ctx); err != nil || n != 2 {
		t.Errorf("Len = %d, %v; want 2", n, err)
	}
}

type bigMessage struct{ Data string }

// TestSendLargerThanMaxAllowedPacketSaysWhy: through the bus, a delayed
// message too large for the server fails its Send with the store's
// refusal, and the next message goes through.
func TestSendLargerThanMaxAllowedPacketSaysWhy(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	p := newStore(t, db, mysql.Options{})
	limit := serverPacketLimit(t)
	b := bustest.StartBus(t, bus.Config{Endpoint: bustest.Namespace(), Persistence: p, SendOnly: true, MaxMessageSize: 2 * limit,
		Logger: drivertest.Logger()}, nil)
	ctx := drivertest.Ctx(t, 0)
	err := b.Send(ctx, bigMessage{Data: strings.Repeat("x", limit)}, bus.To("billing"), bus.DeliverAfter(time.Hour))
	var tooLarge *mysql.RowTooLargeError
	if !errors.Is(err, bus.ErrInvalidMessage) || !errors.As(err, &tooLarge) {
		t.Fatalf("Send of a message over max_allowed_packet = %v, want a *mysql.RowTooLargeError", err)
	}
	if err := b.Send(ctx, bigMessage{Data: "small"}, bus.To("billing"), bus.DeliverAfter(time.Hour)); err != nil {
		t.Fatalf("the next Send: %v", err)
	}
	if n, err := p.Len(ctx); err != nil || n != 1 {
		t.Errorf("Len = %d, %v; want 1", n, err)
	}
}
