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

	due := time.Now().Add(50 * time.Millisecond)
	env := &bus.Envelope{ID: "invoice-reminder-1", Type: "billing.Remind", Kind: bus.KindCommand, DueAt: due}
	err = p.StoreOutgoing(ctx, []bus.OutgoingMessage{{ID: env.ID, Kind: env.Kind, Envelope: bus.MarshalEnvelope(env), DueAt: due}})
	if err != nil {
		fmt.Println(err)
		return
	}

	early, _ := p.ClaimDueOutgoing(ctx, time.Now(), 10, time.Minute)
	fmt.Println("claimed before due:", len(early))

	next, _, _ := p.NextDueOutgoing(ctx)
	time.Sleep(time.Until(next)) // the dispatcher sleeps until the next due time
	claimed, _ := p.ClaimDueOutgoing(ctx, time.Now(), 10, time.Minute)
	for _, m := range claimed {
		fmt.Println("claimed when due:", m.ID, m.Kind)
	}
	_ = p.DeleteOutgoing(ctx, []string{"invoice-reminder-1"})
	n, _ := p.Len(ctx)
	fmt.Println("rows left:", n)
	// Output:
	// claimed before due: 0
	// claimed when due: invoice-reminder-1 command
	// rows left: 0
}
