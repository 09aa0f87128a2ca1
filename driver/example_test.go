package driver_test

import (
	"fmt"
	"maps"
	"slices"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// A transport whose broker has text headers that it trims: values are
// %-escaped where needed, map keys Token-escaped.
func ExampleMapping() {
	m := driver.Mapping{Keys: driver.DefaultKeys(), Values: driver.Percent{EdgeBlanks: true}, MapKeys: driver.Token{}}
	h := map[string]string{}
	_ = m.Encode(&bus.Envelope{ID: "id-1", Type: "sales.OrderPlaced", Kind: bus.KindEvent,
		Headers: map[string]string{"tenant.id": " acme"}}, func(k, v string) { h[k] = v })
	for _, k := range slices.Sorted(maps.Keys(h)) {
		fmt.Printf("%s: %s\n", k, h[k])
	}
	env, err := m.Decode(maps.All(h))
	fmt.Println(env.Type, env.Kind, env.Headers["tenant.id"], err)
	// Output:
	// Postbus-H-tenant_2Eid: %20acme
	// Postbus-Id: id-1
	// Postbus-Kind: event
	// Postbus-Type: sales.OrderPlaced
	// sales.OrderPlaced event  acme <nil>
}

// A message another tool wrote reaches the error queue with the reason.
func ExampleUndecodable() {
	m := driver.Mapping{Keys: driver.DefaultKeys()}
	h := map[string]string{driver.KeyID: "id-7", driver.KeyKind: "urgent"}
	env, err := m.Decode(maps.All(h))
	if err != nil {
		env = driver.Undecodable("mybroker", env.ID, []byte("raw"), nil, err)
	}
	fmt.Println(env.ID, env.Header(bus.HeaderDecodeError))
	// Output:
	// id-7 mybroker: header Postbus-Kind: bus: unknown message kind "urgent"; header Postbus-Type: missing
}

func ExampleFit() {
	var tok driver.Token
	name := "github.com/acme/sales.OrderPlaced"
	fmt.Println(driver.Fit(tok.Escape(name), name, 32, 8))
	// Output:
	// github_2Ecom_2Facme_2Fs-2922a742
}

func ExampleSanitize() {
	allowed := func(c byte) bool { return driver.TokenByte(c) || c == '_' }
	fmt.Println(driver.Sanitize("billing", allowed, 80, 10))
	fmt.Println(driver.Sanitize("sales.orders", allowed, 80, 10))
	// Output:
	// billing
	// sales_orders-9070a83f92
}

func ExampleFirst() {
	type Options struct {
		Prefetch int
		Replicas int
	}
	o := Options{Prefetch: 64, Replicas: 7}
	if p := driver.First(driver.NotNegative("Prefetch", o.Prefetch), driver.Between("Replicas", o.Replicas, 1, 5)); p != nil {
		fmt.Println(p.Field, p.Reason)
	}
	// Output:
	// Replicas must be between 1 and 5
}
