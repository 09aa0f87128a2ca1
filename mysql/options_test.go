package mysql_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mysql"
)

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", server.Default) // does not connect
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		opts  mysql.Options
		field string
	}{
		{mysql.Options{Table: "bad name`; DROP TABLE x"}, "Table"},
		{mysql.Options{Table: "1st"}, "Table"},
		{mysql.Options{Table: strings.Repeat("x", 55)}, "Table"},
		{mysql.Options{Isolation: sql.LevelSnapshot}, "Isolation"},
	}
	for _, c := range cases {
		_, err := mysql.New(db, c.opts)
		var oe *mysql.OptionsError
		if !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, mysql.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v; want an *OptionsError on %s", c.opts, err, c.field)
		}
	}
	if _, err := mysql.New(nil, mysql.Options{}); !errors.Is(err, mysql.ErrNilDB) {
		t.Errorf("New(nil) = %v, want ErrNilDB", err)
	}
	if _, err := mysql.New(db, mysql.Options{Table: strings.Repeat("x", 54)}); err != nil {
		t.Errorf("a 54-byte table name: %v", err)
	}
}

func TestSetupIsIdempotentAndMatchesMigrations(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	table := freshTable()
	p := newStore(t, db, mysql.Options{Table: table})
	for range 2 {
		if err := p.Setup(t.Context()); err != nil {
			t.Fatalf("Setup again: %v", err)
		}
	}
	stmts, err := mysql.MigrationsFor(table)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context()) // the statements share a session
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("a migration on set-up tables: %v\n%s", err, s)
		}
	}
	if got := mysql.Migrations(); len(got) != len(stmts) || !strings.Contains(got[0], "`outgoing_messages`") {
		t.Errorf("Migrations() = %d statements, the first %.60q…", len(got), got[0])
	}
}

// The session time zone changes no time: a row due now on the server's
// UTC clock is claimable at once through a session whose zone is +10:00.
func TestSessionTimeZoneIsIrrelevant(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", testDSN()+"?time_zone=%27%2B10%3A00%27&loc=Local&parseTime=true")
	if strings.Contains(testDSN(), "?") {
		db, err = sql.Open("mysql", testDSN()+"&time_zone=%27%2B10%3A00%27")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(t.Context()); err != nil {
		serverUnavailable(t, err)
	}
	p := newStore(t, db, mysql.Options{})
	now, err := p.StoreNow(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if skew := time.Since(now); skew > time.Minute || skew < -time.Minute {
		t.Fatalf("StoreNow = %v, %v from this machine's clock: not UTC", now, skew)
	}
	due := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	rows := []bus.OutgoingMessage{
		{ID: "due", Kind: bus.KindCommand, Envelope: []byte("e"), DueAt: due, Transport: "t"},
		{ID: "later", Kind: bus.KindCommand, Envelope: []byte("e"), DueAt: time.Now().Add(time.Hour), Transport: "t"},
		{ID: "in-5h", Kind: bus.KindCommand, Envelope: []byte("e"), Delay: 5 * time.Hour, Transport: "t"},
	}
	if err := p.StoreOutgoing(t.Context(), rows); err != nil {
		t.Fatal(err)
	}
	got, err := p.ClaimDueOutgoing(t.Context(), "t", time.Now(), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].ID != "due" || !got[0].DueAt.Equal(due) {
		t.Fatalf("claimed %+v, %v; want the row due at %v only", got, err, due)
	}
	if n, err := p.DeleteOutgoing(t.Context(), []bus.Claim{got[0].Claim()}); err != nil || n != 1 {
		t.Fatalf("DeleteOutgoing = %d, %v", n, err)
	}
	next, ok, err := p.NextDueOutgoing(t.Context(), "t")
	if err != nil || !ok || time.Until(next) < 59*time.Minute || time.Until(next) > 61*time.Minute {
		t.Fatalf("NextDueOutgoing = %v, %v, %v; want in an hour", next, ok, err)
	}
}
