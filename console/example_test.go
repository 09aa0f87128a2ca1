package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/postbus/bus"
	"github.com/postbus/bus/console"
)

// Mount the console under /ops/ on a service's own server.
func ExampleHandler() {
	store := bus.NewMemoryPersistence() // the service's persistence
	h, err := console.Handler(console.Options{
		Scheduled: store,
		Failed:    store,
		Transport: bus.NewMemoryTransport(), // for retries
		ReadOnly:  false,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))

	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/ops/", nil)
	r.RemoteAddr = "127.0.0.1:50000"
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println(w.Code)
	// Output: 200
}
