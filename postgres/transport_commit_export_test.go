package postgres

// NotifyChannel returns the channel t's sends notify, for the group
// commit test that counts notifications.
func NotifyChannel(t *Transport) string { return t.names.channel }

// MaxCommitsInFlight is how many group commits a transport runs at once.
const MaxCommitsInFlight = maxCommitsInFlight

// QueuedSends returns how many of t's sends wait in the queue for a commit
// to start, for the Close tests that must know every send was accepted.
func QueuedSends(t *Transport) int {
	t.sends.mu.Lock()
	defer t.sends.mu.Unlock()
	return len(t.sends.queue)
}
