package sqlstore

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/postbus/bus/backend"
)

// ClaimColumns is the layout of a claim statement's rows: id, kind,
// envelope, due_at, then lease_until when LeaseUntil is set, then
// failures, last_error, transport, message_type, available_at, then the
// server's clock when Now is set. Times are read with the dialect's Times.
type ClaimColumns struct {
	LeaseUntil bool
	Now        bool
}

// ScanClaimed reads the rows of a claim statement, appending them to out,
// and closes rows. It returns the rows and the latest clock read (Now).
// A NULL envelope is read as an empty one.
func ScanClaimed(d *Dialect, rows Rows, cols ClaimColumns, out []backend.OutgoingMessage) ([]backend.OutgoingMessage, time.Time, error) {
	defer func() { _ = rows.Close() }()
	var (
		now                   time.Time
		m                     backend.OutgoingMessage
		kind                  int64
		due, lease, av, rowAt any
	)
	dest := make([]any, 0, 11)
	dest = append(dest, &m.ID, &kind, &m.Envelope, &due)
	if cols.LeaseUntil {
		dest = append(dest, &lease)
	}
	dest = append(dest, &m.Failures, &m.LastError, &m.Transport, &m.Type, &av)
	if cols.Now {
		dest = append(dest, &rowAt)
	}
	for rows.Next() {
		m = backend.OutgoingMessage{}
		if err := rows.Scan(dest...); err != nil {
			return out, now, err
		}
		m.Kind = backend.Kind(kind)
		var err error
		if m.DueAt, err = d.ScanTime(due); err != nil {
			return out, now, err
		}
		if m.AvailableAt, err = d.ScanTime(av); err != nil {
			return out, now, err
		}
		if cols.LeaseUntil {
			if m.LeaseUntil, err = d.ScanTime(lease); err != nil {
				return out, now, err
			}
		}
		if cols.Now {
			t, err := d.ScanTime(rowAt)
			if err != nil {
				return out, now, err
			}
			if t.After(now) {
				now = t
			}
		}
		if m.Envelope == nil {
			m.Envelope = []byte{}
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return out, now, err
	}
	return out, now, rows.Close()
}

// NewToken returns a new claim token: 128 random bits in hex, so no two
// claims, in any process, share one.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// parseInt reads an integer column a client returned as text (MySQL's
// text protocol, with interpolateParams): without fmt's scanning, which
// would cost a claim several allocations a row.
func parseInt(b []byte) (int64, error) { return strconv.ParseInt(string(b), 10, 64) }
