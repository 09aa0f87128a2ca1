package driver

// The attribute keys of the bus's own log records. A transport that logs
// with them lines up with the bus: one query for queue = "orders" finds
// the records of both.
const (
	// LogQueue is the queue a record is about.
	LogQueue = "queue"
	// LogConsumer is the broker's consumer or group name.
	LogConsumer = "consumer"
	// LogError is the error a record reports.
	LogError = "error"
	// LogMessageID is the ID of the message a record is about.
	LogMessageID = "message_id"
)
