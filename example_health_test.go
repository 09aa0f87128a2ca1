package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/postbus/bus"
)

// Kubernetes probes a service through HealthHandler: /livez while the bus
// was not stopped, /readyz once it is started, its backends answer and
// scheduled messages are on time.
func ExampleHealthHandler() {
	ctx := context.Background()
	b, _ := bus.New(bus.Config{Endpoint: "billing", Logger: quiet()})
	mux := http.NewServeMux()
	// Mounted beside the service's own routes: GET /livez and GET /readyz.
	probes := bus.HealthHandler(b, bus.HealthOptions{MaxDispatchLag: 2 * time.Minute})
	mux.Handle("/livez", probes)
	mux.Handle("/readyz", probes)

	get := func(path string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body struct {
			Status string `json:"status"`
			Checks []struct {
				Name string `json:"name"`
				OK   bool   `json:"ok"`
			} `json:"checks"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		fmt.Print(path, " ", rec.Code, " ", body.Status, ":")
		for _, c := range body.Checks {
			fmt.Print(" ", c.Name, "=", c.OK)
		}
		fmt.Println()
	}
	get("/readyz") // not started yet
	_ = b.Start(ctx)
	get("/livez")
	get("/readyz")
	_ = b.Stop(ctx)
	get("/livez")
	// Output:
	// /readyz 503 fail: started=false transport=true store=true dispatch_lag=true recurring_lag=true
	// /livez 200 ok: bus=true
	// /readyz 200 ok: started=true transport=true store=true dispatch_lag=true recurring_lag=true
	// /livez 503 fail: bus=false
}
