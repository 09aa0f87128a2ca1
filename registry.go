package bus

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"unsafe"
)

// handlerSet holds every handler registered for one message type.
type handlerSet struct {
	name   string
	goType reflect.Type // the T of Handle[T]
	event  bool         // subscribed as an event (published to this endpoint)
	decode func(Serializer, []byte) (any, error)
	funcs  []func(ctx context.Context, msg any) error
	fnIDs  []unsafe.Pointer // funcIdentity of each registered fn
}

// funcIdentity returns the address of fn's closure record. Go cannot
// compare func values, and reflect gives only the code pointer, which two
// closures of one literal share although they may capture different state
// (handlers made in a loop); the closure record is the same for every use
// of one top-level function or one closure value, and differs otherwise.
// Reading it needs unsafe: a func value is one pointer to that record.
func funcIdentity[T any](fn func(context.Context, T) error) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&fn))
}

// Handle registers fn for messages of type T received by b. Several handlers
// may be registered for one type; they run in registration order, and the
// message counts as handled when all returned nil. Register before Start.
//
// Every handled type is subscribed as an event: Start asks the transport to
// deliver published T events to this endpoint. Commands of type T arrive
// when another endpoint routes T here.
//
// Handle returns an error wrapping ErrInvalidRegistration for a handler the
// bus could never call: T an interface type (a message on the wire has a
// concrete type), or T and *T both registered (they share one message name;
// register one of them), or a function (or closure value) already
// registered for T, which would run twice for each message.
func Handle[T any](b *Bus, fn func(ctx context.Context, msg T) error) error {
	if fn == nil {
		return fmt.Errorf("bus: Handle: %w: nil handler", ErrInvalidMessage)
	}
	goType := reflect.TypeFor[T]()
	if goType.Kind() == reflect.Interface {
		return fmt.Errorf("bus: Handle[%v]: %w: an interface type never arrives; register a concrete message type", goType, ErrInvalidRegistration)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == stateClosed:
		return ErrClosed
	case b.cfg.SendOnly:
		return &ConfigError{Field: "SendOnly", Reason: "a send-only bus has no handlers"}
	case b.state == stateStarted:
		return fmt.Errorf("bus: Handle after Start: %w", ErrAlreadyStarted)
	}
	name := nameOfType[T]()
	hs := b.handlers[name]
	if hs == nil {
		hs = &handlerSet{name: name, goType: goType, event: true, decode: decoderFor[T]()}
		b.handlers[name] = hs
	} else if hs.goType != goType {
		return fmt.Errorf("bus: Handle[%v]: %w: message name %q is already handled as %v; register handlers of one Go type per message", goType, ErrInvalidRegistration, name, hs.goType)
	}
	id := funcIdentity(fn)
	if slices.Contains(hs.fnIDs, id) {
		return fmt.Errorf("bus: Handle[%v]: %w: this handler function is already registered for %q; it would run twice per message", goType, ErrInvalidRegistration, name)
	}
	hs.fnIDs = append(hs.fnIDs, id)
	hs.funcs = append(hs.funcs, func(ctx context.Context, msg any) error { return fn(ctx, msg.(T)) })
	return nil
}

func decoderFor[T any]() func(Serializer, []byte) (any, error) {
	if t := reflect.TypeFor[T](); t.Kind() == reflect.Pointer {
		return func(s Serializer, body []byte) (any, error) {
			v := reflect.New(t.Elem())
			if err := s.Unmarshal(body, v.Interface()); err != nil {
				return nil, err
			}
			return v.Interface(), nil
		}
	}
	return func(s Serializer, body []byte) (any, error) {
		var v T
		if err := s.Unmarshal(body, &v); err != nil {
			return nil, err
		}
		return v, nil
	}
}

// Route sends commands of type T to endpoint when Send is called without To.
func Route[T any](b *Bus, endpoint string) error {
	if err := validateQueueName("endpoint", endpoint); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == stateClosed {
		return ErrClosed
	}
	b.routes[nameOfType[T]()] = endpoint
	return nil
}

func (b *Bus) handlerSet(name string) *handlerSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.handlers[name]
}

func (b *Bus) route(name string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.routes[name]
	return e, ok
}
