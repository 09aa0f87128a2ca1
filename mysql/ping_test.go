package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/postbus/bus/mysql"
)

// Ping answers through the handle, and fails once it is closed.
func TestPingFollowsTheHandle(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	p, err := mysql.New(db, mysql.Options{Table: freshTable()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	_ = db.Close()
	if err := p.Ping(ctx); err == nil {
		t.Fatal("ping through a closed handle succeeded")
	}
}
