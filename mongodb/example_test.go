package mongodb_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mongodb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// A store schedules a message, and a dispatcher claims it once it is due.
// (The bus does both itself: pass the store as bus.Config.Persistence.)
func ExampleNew() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("POSTBUS_TEST_MONGODB_URI")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Disconnect(ctx)

	store, err := mongodb.New(client.Database("postbus_example"), mongodb.Options{Collection: "example_outgoing"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Database("postbus_example").Drop(ctx)
	if err := store.Setup(ctx); err != nil { // bus.Start does this
		fmt.Println(err)
		return
	}

	due := time.Now().Add(50 * time.Millisecond)
	env := &bus.Envelope{ID: "order-42", Type: "PlaceOrder", Kind: bus.KindCommand, DueAt: due}
	msg := bus.OutgoingMessage{ID: env.ID, Kind: env.Kind, Envelope: bus.MarshalEnvelope(env), DueAt: due, Transport: "example"}
	if err := store.StoreOutgoing(ctx, []bus.OutgoingMessage{msg}); err != nil {
		fmt.Println(err)
		return
	}

	claimed, _ := store.ClaimDueOutgoing(ctx, "example", time.Now(), 10, time.Minute)
	fmt.Println("claimed before due:", len(claimed))

	for len(claimed) == 0 {
		time.Sleep(10 * time.Millisecond)
		claimed, err = store.ClaimDueOutgoing(ctx, "example", time.Now(), 10, time.Minute)
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("claimed when due:", claimed[0].ID, !time.Now().Before(due))
	n, _ := store.DeleteOutgoing(ctx, []bus.Claim{claimed[0].Claim()}) // after the transport accepted it
	fmt.Println("deleted:", n)
	// Output:
	// claimed before due: 0
	// claimed when due: order-42 true
	// deleted: 1
}
