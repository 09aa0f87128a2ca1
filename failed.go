package bus

import (
	"strings"
	"time"
)

// isFailureHeader reports the headers a retry removes: those the error
// queue added, and the delayed-retry and attempt counts of the failed
// handling.
func isFailureHeader(k string) bool {
	return strings.HasPrefix(k, "postbus.failure.") || k == HeaderDelayedRetries || k == headerPriorAttempts
}

// clearFailure readies a failed message to be handled again (Replay,
// RetryFailed): it removes the failure headers, and the due time of the
// scheduled delivery that failed, since the retry is an immediate send
// and must not count as a delivery that many minutes late (lateness).
func clearFailure(env *Envelope) {
	for k := range env.Headers {
		if isFailureHeader(k) {
			delete(env.Headers, k)
		}
	}
	env.DueAt = time.Time{}
}
