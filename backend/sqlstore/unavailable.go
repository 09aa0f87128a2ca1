package sqlstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"

	"github.com/postbus/bus/backend"
)

// Unavailable returns err passed through redact (nil: as it is), marked
// with backend.StoreUnavailable when unreachable reports that the server
// cannot be reached for now, which retrying later may fix. A ctx that
// was cancelled never is.
func Unavailable(err error, redact func(error) error, unreachable func(error) bool) error {
	if err == nil {
		return nil
	}
	red := err
	if redact != nil {
		red = redact(err)
	}
	if !errors.Is(err, context.Canceled) && unreachable(err) {
		return backend.StoreUnavailable(red)
	}
	return red
}

// Unreachable reports whether err says a server could not be reached, or
// refused to serve for now: a failed dial or lost connection, a timeout,
// a server shutting down, too many connections. server classifies the
// server's own errors (known false: not one), by their codes. An error
// in permanent (the client cannot authenticate, say) or a certificate
// that cannot be verified is not: retrying cannot fix it. Any other error
// had no answer from the server: a dial, network or TLS handshake
// failure, a timeout, a connection closed under the call.
func Unreachable(err error, server func(error) (transient, known bool), permanent ...error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if transient, known := server(err); known {
		return transient
	}
	for _, p := range permanent {
		if errors.Is(err, p) {
			return false
		}
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return !errors.As(err, &unknownCA) && !errors.As(err, &hostname) && !errors.As(err, &invalid)
}

// identifierRE is a plain SQL identifier: letters, digits and
// underscores, not starting with a digit.
var identifierRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckName returns why name cannot name a table (or schema) of at most
// maxLen bytes, or "" when it can: it must be a plain identifier, which
// statements always quote.
func CheckName(name string, maxLen int) string {
	switch {
	case len(name) > maxLen:
		return fmt.Sprintf("longer than %d bytes", maxLen)
	case !identifierRE.MatchString(name):
		return "must be letters, digits and underscores, not starting with a digit"
	}
	return ""
}
