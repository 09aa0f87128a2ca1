package kafka

import "github.com/twmb/franz-go/pkg/kerr"

// kerrOf returns the error of a Kafka error code, or nil for 0.
func kerrOf(code int16) error { return kerr.ErrorForCode(code) }
