package nats

import (
	natsio "github.com/nats-io/nats.go"

	"github.com/postbus/bus"
)

// EncodeMsg exposes the wire encoding to the external tests, so the
// bare-client benchmark can send exactly what the transport sends.
func EncodeMsg(subject string, env *bus.Envelope) *natsio.Msg { return encodeMsg(subject, env, "") }
