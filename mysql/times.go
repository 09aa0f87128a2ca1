package mysql

import (
	"time"

	"github.com/postbus/bus/backend/sqlstore"
)

// Times are DATETIME(6) columns holding UTC. They travel between the
// client and the server as microseconds since the Unix epoch, converted in
// SQL (at, us), so the session time zone and the DSN's parseTime and loc
// never change them.

// epochSQL is the Unix epoch as a DATETIME literal.
const epochSQL = "TIMESTAMP'1970-01-01 00:00:00'"

// at is the DATETIME of the microseconds expression e.
func at(e string) string { return "TIMESTAMPADD(MICROSECOND, " + e + ", " + epochSQL + ")" }

// us is the microseconds since the epoch of the DATETIME expression e.
func us(e string) string { return "TIMESTAMPDIFF(MICROSECOND, " + epochSQL + ", " + e + ")" }

// nowPlus is the server's UTC now plus the microseconds expression e.
func nowPlus(e string) string { return "TIMESTAMPADD(MICROSECOND, " + e + ", UTC_TIMESTAMP(6))" }

// The range of DATETIME, in microseconds since the epoch.
var (
	minMicros = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxMicros = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
)

// micros converts t to microseconds since the epoch, clamped to what
// DATETIME holds (which keeps the order); the zero time is the earliest.
func micros(t time.Time) int64 {
	switch {
	case t.IsZero() || t.Year() < 1000:
		return minMicros
	case t.Year() > 9999:
		return maxMicros
	}
	return t.UnixMicro()
}

// fromMicros is the inverse of micros, in UTC.
func fromMicros(n int64) time.Time { return time.UnixMicro(n).UTC() }

// durMicros is d in whole microseconds, rounded up so that a positive
// delay never becomes zero.
func durMicros(d time.Duration) int64 { return sqlstore.CeilMicros(d) }
