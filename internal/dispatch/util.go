package dispatch

// Log keys, the bus's own.
const (
	logKeyError     = "error"
	logKeyMessageID = "message_id"
)
