package bus

import (
	"encoding/json"
	"reflect"
	"sync"
)

// Serializer turns messages into envelope bodies and back. JSONSerializer is
// the default; set Config.Serializer for another format.
type Serializer interface {
	// ContentType names the format, e.g. "application/json"; it travels in
	// Envelope.ContentType.
	ContentType() string
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONSerializer encodes messages with encoding/json.
type JSONSerializer struct{}

// ContentType returns "application/json".
func (JSONSerializer) ContentType() string { return "application/json" }

// Marshal encodes v as JSON.
func (JSONSerializer) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON into v.
func (JSONSerializer) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Named is implemented by message types that choose their own type name.
type Named interface {
	MessageName() string
}

// MessageName returns the stable type name of a message: the result of its
// MessageName method when it has one, otherwise the Go package path and type
// name, as in "github.com/acme/sales.PlaceOrder". Pointers are named after
// the type they point to. The name travels in Envelope.Type and routes
// events, so renaming a Go type or moving its package changes it; give
// long-lived messages a MessageName method to decouple the wire name from
// the code.
func MessageName(msg any) string {
	if n, ok := msg.(Named); ok {
		return n.MessageName()
	}
	return typeName(reflect.TypeOf(msg))
}

// typeNames caches MessageName for types without a MessageName method: the
// reflection and string building cost more than the rest of a Send.
type typeNames struct{ m sync.Map } // reflect.Type -> string

func (c *typeNames) of(msg any) string {
	if n, ok := msg.(Named); ok {
		return n.MessageName()
	}
	t := reflect.TypeOf(msg)
	if name, ok := c.m.Load(t); ok {
		return name.(string)
	}
	name := typeName(t)
	c.m.Store(t, name)
	return name
}

func typeName(t reflect.Type) string {
	if t == nil {
		return ""
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// nameOfType returns MessageName for the static type T. Define MessageName
// on the value receiver so that values and pointers agree.
func nameOfType[T any]() string {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer {
		return MessageName(reflect.New(t.Elem()).Interface())
	}
	var zero T
	return MessageName(zero)
}
