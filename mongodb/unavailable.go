package mongodb

import (
	"context"
	"crypto/x509"
	"errors"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// String describes the store for logs and errors: "mongodb
// database/collection". A *mongo.Database does not tell its servers;
// errors of an unreachable server name them.
func (p *Persistence) String() string {
	return "mongodb " + p.db.Name() + "/" + p.msgs.Name()
}

// unavailable returns err with its passwords redacted, marked with
// bus.StoreUnavailable when it says the server cannot be reached for now,
// which retrying later may fix (see isUnavailable).
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	red := driver.RedactError(err)
	if isUnavailable(err) {
		return bus.StoreUnavailable(red)
	}
	return red
}

// Server error codes of failed authentication or authorization: retrying
// cannot fix them, whatever labels the driver adds.
var deniedCodes = []int{
	11,   // UserNotFound
	13,   // Unauthorized
	18,   // AuthenticationFailed
	8000, // AtlasError: bad credentials on Atlas
}

// Server error codes of a server that cannot serve now but may later.
var transientCodes = []int{
	6, 7, 89, 9001, // HostUnreachable, HostNotFound, NetworkTimeout, SocketException
	91, 11600, 11602, // ShutdownInProgress, InterruptedAtShutdown, InterruptedDueToReplStateChange
	189, 10107, 13435, 13436, // PrimarySteppedDown, NotWritablePrimary, NotPrimaryNoSecondaryOk, NotPrimaryOrSecondary
	24, 46, 50, 112, 134, 262, // LockTimeout, LockBusy, MaxTimeMSExpired, WriteConflict, ReadConcernMajorityNotAvailableYet, ExceededTimeLimit
}

// isUnavailable reports whether err says the server could not be reached,
// or refused to serve for now: no server selected in time, a failed dial
// or lost connection, a timeout, a server shutting down or stepping down.
// An error the server returned about what was asked (authentication or
// authorization failed, an index that conflicts with an existing one), a
// client that was disconnected, or a certificate that cannot be verified
// is not: retrying cannot fix it. So is a ctx that was cancelled.
func isUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, mongo.ErrClientDisconnected) {
		return false
	}
	var se mongo.ServerError
	if errors.As(err, &se) {
		for _, c := range deniedCodes {
			if se.HasErrorCode(c) {
				return false
			}
		}
		for _, c := range transientCodes {
			if se.HasErrorCode(c) {
				return true
			}
		}
		return mongo.IsNetworkError(err) || se.HasErrorLabel("RetryableWriteError") || se.HasErrorLabel("TransientTransactionError")
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return false
	}
	// No answer from the server: no server selected within the client's
	// timeout, a dial or network failure, a connection closed under the
	// call.
	return true
}
