package driver

import (
	"fmt"

	"github.com/postbus/bus"
)

// Sentinels names a driver and the sentinel errors its typed errors wrap.
type Sentinels struct {
	Transport      string // starts every message: "kafka"
	InvalidOptions error  // wrapped by the driver's *OptionsError
	InvalidName    error  // wrapped by the driver's *NameError
}

// ErrorFamily is what a driver's typed errors are made of: an empty type of
// the driver's own whose Sentinels method names the driver and its
// sentinels. The driver declares its errors as aliases,
//
//	type errorFamily struct{}
//
//	func (errorFamily) Sentinels() driver.Sentinels {
//		return driver.Sentinels{Transport: "kafka", InvalidOptions: ErrInvalidOptions, InvalidName: ErrInvalidName}
//	}
//
//	type OptionsError = driver.OptionsError[errorFamily]
//
// so each driver's OptionsError is a type of its own: errors.As with one
// driver's type never matches another driver's error.
type ErrorFamily interface {
	Sentinels() Sentinels
}

// OptionsError reports an invalid Options field or constructor argument of
// the driver F names. Its text is "<transport>: invalid options: <Field>:
// <Reason>"; it wraps the driver's InvalidOptions sentinel.
type OptionsError[F ErrorFamily] struct {
	Field  string // the Options field or argument, e.g. "Prefetch"
	Reason string // e.g. "must not be negative"
}

// Error describes the failure.
func (e *OptionsError[F]) Error() string {
	return sentinels[F]().Transport + ": invalid options: " + e.Field + ": " + e.Reason
}

// Unwrap returns the driver's InvalidOptions sentinel.
func (e *OptionsError[F]) Unwrap() error { return sentinels[F]().InvalidOptions }

// NameError reports a queue, message type or other name the driver F names
// cannot use, such as an empty one. Its text is "<transport>: invalid
// <What> <Name, quoted>: <Reason>"; it wraps the driver's InvalidName
// sentinel.
type NameError[F ErrorFamily] struct {
	What   string // "queue", "event type", "handler"
	Name   string
	Reason string
}

// Error describes the failure.
func (e *NameError[F]) Error() string {
	return fmt.Sprintf("%s: invalid %s %q: %s", sentinels[F]().Transport, e.What, e.Name, e.Reason)
}

// Unwrap returns the driver's InvalidName sentinel.
func (e *NameError[F]) Unwrap() error { return sentinels[F]().InvalidName }

func sentinels[F ErrorFamily]() Sentinels {
	var f F
	return f.Sentinels()
}

// Invalid returns the *OptionsError of p, or nil when p is nil: what a
// driver's validate returns from First.
func Invalid[F ErrorFamily](p *Problem) error {
	if p == nil {
		return nil
	}
	return &OptionsError[F]{Field: p.Field, Reason: p.Reason}
}

// NonEmpty returns a *NameError "must not be empty" when name is empty,
// else nil.
func NonEmpty[F ErrorFamily](what, name string) error {
	if name == "" {
		return &NameError[F]{What: what, Name: name, Reason: "must not be empty"}
	}
	return nil
}

// CheckTopology returns a *NameError for the first name of top a transport
// cannot provision, else nil: events with no queue to deliver them to,
// then an empty event type, then an empty queue among top.Queues.
func CheckTopology[F ErrorFamily](top bus.Topology) error {
	if top.Queue == "" && len(top.Events) > 0 {
		return &NameError[F]{What: "queue", Reason: "events need a queue to be delivered to"}
	}
	for _, typ := range top.Events {
		if err := NonEmpty[F]("event type", typ); err != nil {
			return err
		}
	}
	for _, q := range top.Queues {
		if err := NonEmpty[F]("queue", q); err != nil {
			return err
		}
	}
	return nil
}

// CheckReceive returns a *NameError when Receive cannot start: an empty
// queue, or a nil handler.
func CheckReceive[F ErrorFamily](queue string, h bus.DeliveryHandler) error {
	if err := NonEmpty[F]("queue", queue); err != nil {
		return err
	}
	if h == nil {
		return &NameError[F]{What: "handler", Name: queue, Reason: "must not be nil"}
	}
	return nil
}
