package redis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

// TestStartWithServerDownReturns: with nothing listening at the server's
// address, Start with context.Background() returns: the client gives up
// after its retries, and StartTimeout bounds it when it would keep trying.
func TestStartWithServerDownReturns(t *testing.T) {
	t.Parallel()
	rdb := goredis.NewClient(&goredis.Options{Addr: bustest.DeadAddr(t)})
	defer rdb.Close()
	tr, err := redis.New(rdb, redis.Options{Prefix: drivertest.Unique("pbtest:"), Logger: drivertest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	err = bustest.StartWithBrokerDown(t, tr, 2*time.Second)
	if !errors.Is(err, bus.ErrStartTimeout) && !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Start = %v, want bus.ErrStartTimeout or the refused connection", err)
	}
}
