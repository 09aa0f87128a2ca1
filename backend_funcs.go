package bus

import (
	"time"

	"github.com/postbus/bus/backend"
)

// The message kinds: [backend.KindCommand], [backend.KindEvent] and
// [backend.KindReply].
const (
	KindCommand = backend.KindCommand
	KindEvent   = backend.KindEvent
	KindReply   = backend.KindReply
)

// The reserved headers (see package backend, where each is described).
const (
	HeaderReplyTo         = backend.HeaderReplyTo         // see [backend.HeaderReplyTo]
	HeaderFailureReason   = backend.HeaderFailureReason   // see [backend.HeaderFailureReason]
	HeaderFailureEndpoint = backend.HeaderFailureEndpoint // see [backend.HeaderFailureEndpoint]
	HeaderFailureQueue    = backend.HeaderFailureQueue    // see [backend.HeaderFailureQueue]
	HeaderFailureTime     = backend.HeaderFailureTime     // see [backend.HeaderFailureTime]
	HeaderFailureAttempts = backend.HeaderFailureAttempts // see [backend.HeaderFailureAttempts]
	HeaderFailureKind     = backend.HeaderFailureKind     // see [backend.HeaderFailureKind]
	HeaderDelayedRetries  = backend.HeaderDelayedRetries  // see [backend.HeaderDelayedRetries]
	HeaderDispatchRetries = backend.HeaderDispatchRetries // see [backend.HeaderDispatchRetries]
	HeaderDispatchBackoff = backend.HeaderDispatchBackoff // see [backend.HeaderDispatchBackoff]
	HeaderDecodeError     = backend.HeaderDecodeError     // see [backend.HeaderDecodeError]
)

// MaxHistogramBuckets is [backend.MaxHistogramBuckets].
const MaxHistogramBuckets = backend.MaxHistogramBuckets

// OverdueCap is [backend.OverdueCap].
const OverdueCap = backend.OverdueCap

// Sentinel errors of stores and transports: the values of package backend,
// so errors.Is matches either name.
var (
	ErrMalformedEnvelope = backend.ErrMalformedEnvelope // see [backend.ErrMalformedEnvelope]
	ErrStoreUnavailable  = backend.ErrStoreUnavailable  // see [backend.ErrStoreUnavailable]
	ErrPermanent         = backend.ErrPermanent         // see [backend.ErrPermanent]
	ErrInvalidQuery      = backend.ErrInvalidQuery      // see [backend.ErrInvalidQuery]
	ErrSagaConflict      = backend.ErrSagaConflict      // see [backend.ErrSagaConflict]
)

// MarshalEnvelope calls [backend.MarshalEnvelope].
func MarshalEnvelope(e *Envelope) []byte { return backend.MarshalEnvelope(e) }

// UnmarshalEnvelope calls [backend.UnmarshalEnvelope].
func UnmarshalEnvelope(data []byte) (*Envelope, error) { return backend.UnmarshalEnvelope(data) }

// CheckHistogram calls [backend.CheckHistogram].
func CheckHistogram(width time.Duration, n int) error { return backend.CheckHistogram(width, n) }

// NormalizeReason calls [backend.NormalizeReason].
func NormalizeReason(reason string) string { return backend.NormalizeReason(reason) }

// FailureGroup calls [backend.FailureGroup].
func FailureGroup(typ, endpoint, reason string) string {
	return backend.FailureGroup(typ, endpoint, reason)
}

// FailedFromEnvelope calls [backend.FailedFromEnvelope].
func FailedFromEnvelope(env *Envelope, now time.Time) FailedMessage {
	return backend.FailedFromEnvelope(env, now)
}

// Permanent calls [backend.Permanent].
func Permanent(err error) error { return backend.Permanent(err) }

// StoreUnavailable calls [backend.StoreUnavailable].
func StoreUnavailable(err error) error { return backend.StoreUnavailable(err) }
