package bus

// identityOf returns t's identity for scheduled rows; "" when it has none.
func identityOf(t Transport) string {
	if ti, ok := t.(TransportIdentity); ok {
		return ti.Identity()
	}
	return ""
}

// outboundOf says how the core hands env over: an event without a
// destination is published; everything else (including an event being
// retried at one endpoint) is sent to its destination queue.
func outboundOf(env *Envelope) Outbound {
	if env.Kind == KindEvent && env.Destination == "" {
		return Outbound{Publish: true, Envelope: env}
	}
	return Outbound{Queue: env.Destination, Envelope: env}
}
