package nats_test

import (
	"context"
	"fmt"

	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/nats"
)

// The transport takes the application's own connection. This example needs
// a JetStream server, so it is compiled but not run.
func Example() {
	nc, err := natsio.Connect(natsio.DefaultURL, natsio.MaxReconnects(-1), natsio.ReconnectBufSize(-1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	tr, err := nats.New(nc, nats.Options{Stream: "SHOP", SubjectPrefix: "shop"})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(context.Background()); err != nil { // provisions stream and consumers
		fmt.Println(err)
		return
	}
	defer b.Stop(context.Background())
}
