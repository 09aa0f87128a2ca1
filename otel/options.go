package otelbus

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ErrInvalidOptions is wrapped by every OptionsError.
var ErrInvalidOptions = errors.New("otelbus: invalid options")

// OptionsError names an Options field that cannot be used.
type OptionsError struct {
	Field  string
	Reason string
}

// Error describes the bad field.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("otelbus: invalid options: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidOptions.
func (e *OptionsError) Unwrap() error { return ErrInvalidOptions }

// Options configures an Observer. Every field has a default; the zero value
// is ready to use.
type Options struct {
	// TracerProvider creates the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider creates the instruments. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes trace context into message headers and reads it
	// back. Default: W3C Trace Context and Baggage ("traceparent",
	// "tracestate", "baggage").
	Propagator propagation.TextMapPropagator
	// System is the messaging.system attribute. Default "postbus".
	System string
	// DelayedAsChild makes the delivery of a delayed message (and of a
	// delayed retry) a child of the span that scheduled it, so one trace
	// runs across the delay, hours long perhaps. Default false: the
	// delivery starts a trace of its own that links to the scheduling span,
	// which keeps traces short for backends and UIs that expect so.
	DelayedAsChild bool
}

func (o Options) withDefaults() Options {
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	if o.System == "" {
		o.System = "postbus"
	}
	return o
}

func (o Options) validate() error {
	for _, c := range o.System {
		if c == ' ' || c < 0x20 {
			return &OptionsError{Field: "System", Reason: fmt.Sprintf("%q has spaces or control characters", o.System)}
		}
	}
	return nil
}
