package mysql_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/mysql"
)

// Concurrent StoreOutgoing calls share INSERTs: every row of every call
// is stored once, and a call with an ID stored by another is still one row.
func TestConcurrentStoresAreEachStored(t *testing.T) {
	t.Parallel()
	p := newStore(t, testDB(t), mysql.Options{})
	const senders, each = 32, 40
	due := time.Now().Add(-time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("g-%02d-%03d", s, i)
				rows := []bus.OutgoingMessage{{ID: id, Kind: bus.KindCommand, Envelope: []byte(id), DueAt: due, Transport: "t"}}
				if i%10 == 0 { // a batch that repeats another sender's ID
					rows = append(rows, bus.OutgoingMessage{ID: "g-shared", Kind: bus.KindCommand, Envelope: []byte("x"), DueAt: due, Transport: "t"})
				}
				if err := p.StoreOutgoing(t.Context(), rows); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, err := p.Len(t.Context()); err != nil || n != senders*each+1 {
		t.Fatalf("Len = %d, %v; want %d", n, err, senders*each+1)
	}
}
