package bus

// unmarshalEnvelope is UnmarshalEnvelope; with dropPolicy, it leaves out
// the dispatch policy headers (HeaderDispatchRetries,
// HeaderDispatchBackoff), and an envelope with no other header gets none.
func unmarshalEnvelope(data []byte, dropPolicy bool) (*Envelope, error) {
	env, err := UnmarshalEnvelope(data)
	if err != nil || !dropPolicy || env.Headers == nil {
		return env, err
	}
	delete(env.Headers, HeaderDispatchRetries)
	delete(env.Headers, HeaderDispatchBackoff)
	if len(env.Headers) == 0 {
		env.Headers = nil
	}
	return env, nil
}
