package mysql

import (
	"context"
	"fmt"

	"github.com/postbus/bus"
)

// The server cuts a connection that sends a packet larger than its
// max_allowed_packet (16 MiB by default on MariaDB, 64 MiB on MySQL 8):
// the client sees error 1153 or a connection reset, which says nothing
// of the cause. So Setup reads the limit, and the store refuses a row that
// cannot fit in one statement before sending anything (RowTooLargeError),
// and ends a multi-row INSERT before it outgrows the limit.
//
// A row's size is counted as the DSN's interpolateParams=true would send
// it, the larger of the two ways go-sql-driver sends parameters: its
// envelope with every byte that needs escaping counted twice, its short
// fields counted twice, plus rowOverhead; a statement adds stmtOverhead.
const (
	rowOverhead  = len(insertRow) + 96
	stmtOverhead = 2048
)

// RowTooLargeError reports a row StoreOutgoing (or a store in a
// transaction) refuses because its INSERT would be larger than the
// server's max_allowed_packet. Nothing of the call was stored. It matches
// bus.ErrInvalidMessage.
type RowTooLargeError struct {
	ID    string // the row's ID
	Size  int    // the bytes the row needs in a statement, overhead included
	Limit int    // the server's max_allowed_packet, read at Setup
}

// Error describes the failure and the fix.
func (e *RowTooLargeError) Error() string {
	return fmt.Sprintf("mysql: row %q needs %d bytes in an INSERT, more than the server's max_allowed_packet of %d bytes: "+
		"send a smaller message, or raise max_allowed_packet on the server", e.ID, e.Size, e.Limit)
}

// Unwrap returns bus.ErrInvalidMessage.
func (e *RowTooLargeError) Unwrap() error { return bus.ErrInvalidMessage }

// readPacketLimit reads the server's max_allowed_packet for checkSizes.
func (p *Persistence) readPacketLimit(ctx context.Context) error {
	var limit int64
	if err := p.db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&limit); err != nil {
		return err
	}
	p.packetLimit.Store(limit)
	return nil
}

// packetBudget returns the bytes of rows one statement may carry, and
// whether the limit is known: Setup reads it, or else the first store
// does (a failure to read it leaves rows unchecked, as before).
func (p *Persistence) packetBudget(ctx context.Context) (int, bool) {
	limit := p.packetLimit.Load()
	if limit == 0 {
		if err := p.readPacketLimit(ctx); err != nil {
			return 0, false
		}
		limit = p.packetLimit.Load()
	}
	return int(limit) - stmtOverhead, true
}

// checkSizes refuses the first row that cannot fit in one statement.
func (p *Persistence) checkSizes(ctx context.Context, msgs []bus.OutgoingMessage) error {
	budget, ok := p.packetBudget(ctx)
	if !ok {
		return nil
	}
	for i := range msgs {
		m := &msgs[i]
		if worstRowSize(m) <= budget {
			continue // no need to count the bytes that need escaping
		}
		if n := rowSize(m); n > budget {
			return &RowTooLargeError{ID: m.ID, Size: n + stmtOverhead, Limit: budget + stmtOverhead}
		}
	}
	return nil
}

// worstRowSize bounds rowSize without reading the envelope: every byte
// escaped.
func worstRowSize(m *bus.OutgoingMessage) int {
	return 2*(len(m.Envelope)+len(m.ID)+len(m.Transport)+len(m.Type)) + rowOverhead
}

// rowSize is the bytes m takes in an INSERT (see the top of the file).
func rowSize(m *bus.OutgoingMessage) int {
	n := len(m.Envelope)
	for _, c := range m.Envelope {
		if escaped[c] {
			n++
		}
	}
	return n + 2*(len(m.ID)+len(m.Transport)+len(m.Type)) + rowOverhead
}

// escaped marks the bytes go-sql-driver escapes with a backslash when it
// interpolates a parameter.
var escaped = [256]bool{0: true, '\n': true, '\r': true, 0x1a: true, '\'': true, '"': true, '\\': true}
