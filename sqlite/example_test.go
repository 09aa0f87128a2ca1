package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqlite"
)

// The store used directly, as the bus's dispatcher uses it: schedule a
// message, claim it once it is due, delete it once it was sent.
func Example() {
	dir, err := os.MkdirTemp("", "postbus-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	p, err := sqlite.Open(filepath.Join(dir, "postbus.db"), sqlite.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	ctx := context.Background()
	if err := p.Setup(ctx); err != nil { // bus.Start does this for you
		fmt.Println(err)
		return
	}

	// A relative delay is measured on the store's clock. Rows carry the
	// identity of the transport they go out through; a dispatcher claims
	// only its own transport's rows.
	const transport = "memory"
	env := &bus.Envelope{ID: "invoice-reminder-1", Type: "billing.Remind", Kind: bus.KindCommand}
	err = p.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: env.ID, Kind: env.Kind, Envelope: bus.MarshalEnvelope(env),
		Delay: 50 * time.Millisecond, Transport: transport}})
	if err != nil {
		fmt.Println(err)
		return
	}

	early, _ := p.ClaimDueOutgoing(ctx, transport, time.Now(), 10, time.Minute)
	fmt.Println("claimed before due:", len(early))

	next, _, _ := p.NextDueOutgoing(ctx, transport)
	now, _ := p.StoreNow(ctx)
	time.Sleep(next.Sub(now)) // the dispatcher sleeps until the next due time
	claimed, _ := p.ClaimDueOutgoing(ctx, transport, time.Now(), 10, time.Minute)
	for _, m := range claimed {
		fmt.Println("claimed when due:", m.ID, m.Kind)
	}
	// Settling names each row with the lease token of its claim: a row
	// that another claim took after this lease lapsed is left alone.
	deleted, _ := p.DeleteOutgoing(ctx, []bus.Claim{claimed[0].Claim()})
	fmt.Println("deleted:", deleted)
	n, _ := p.Len(ctx)
	fmt.Println("rows left:", n)
	// Output:
	// claimed before due: 0
	// claimed when due: invoice-reminder-1 command
	// deleted: 1
	// rows left: 0
}
