package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/redis"
)

// A bus on a client made from a URL that holds a password (the test
// server, which has none, ignores it for the default user and refuses it
// for another), or from the same URL on a closed port, shows the password
// nowhere: not in its log at Debug, not in the errors
// of its calls or of the client, not in Metrics or the transport's
// Identity.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	admin := connect(t) // skips when the server is absent
	for name, userHost := range map[string]string{
		"ignored":     ":" + drivertest.Password + "@" + redisAddr,
		"refused":     "app:" + drivertest.Password + "@" + redisAddr,
		"closed port": "app:" + drivertest.Password + "@" + bustest.DeadAddr(t),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o, err := goredis.ParseURL("redis://" + userHost + "/0?dial_timeout=1s&max_retries=1")
			if err != nil {
				t.Fatal(err)
			}
			rdb := goredis.NewClient(o)
			defer rdb.Close()
			e := drivertest.NewExposure()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if !e.AddErr("Ping", rdb.Ping(ctx).Err()) && name != "ignored" {
				t.Fatal("the server accepted the password: the test proves nothing")
			}
			opts := namespace(t, admin)
			opts.Logger = e.Log
			tr, err := redis.New(rdb, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close(context.Background())
			e.Add("Identity()", tr.Identity())
			e.RunBus(t, bus.Config{Endpoint: "secrets-" + bustest.Namespace(), Transport: tr}, 5*time.Second)
			e.NoPassword(t)
		})
	}
}
