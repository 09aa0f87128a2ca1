package otelbus

import (
	"github.com/postbus/bus"
	"go.opentelemetry.io/otel/propagation"
)

// headers lets a propagator read and write an envelope's headers.
type headers struct{ env *bus.Envelope }

var _ propagation.TextMapCarrier = headers{}

func (h headers) Get(key string) string { return h.env.Header(key) }

func (h headers) Set(key, value string) { h.env.SetHeader(key, value) }

func (h headers) Keys() []string {
	keys := make([]string, 0, len(h.env.Headers))
	for k := range h.env.Headers {
		keys = append(keys, k)
	}
	return keys
}
