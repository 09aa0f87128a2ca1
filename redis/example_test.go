package redis_test

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
	"github.com/postbus/bus/redis"
)

// The transport takes the application's own client. This example needs a
// Redis server, so it is compiled but not run.
func Example() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	tr, err := redis.New(rdb, redis.Options{Prefix: "shop", Lease: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(context.Background()); err != nil { // creates the stream and its group
		fmt.Println(err)
		return
	}
	defer b.Stop(context.Background())
}

// Options are checked before anything is sent.
func ExampleNew_invalidOptions() {
	rdb := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	_, err := redis.New(rdb, redis.Options{Lease: time.Millisecond})
	fmt.Println(err)
	// Output: redis: invalid options: Lease: must be at least 1s
}
