package redis

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/postbus/bus"
)

// unavailable marks err with bus.StoreUnavailable when it says the server
// cannot be reached for now, which retrying later may fix (see
// isUnavailable), so that bus.Start retries Setup.
func unavailable(err error) error {
	if isUnavailable(err) {
		return bus.StoreUnavailable(err)
	}
	return err
}

// transientPrefixes start the replies of a server that cannot serve now
// but may later: loading its data set, a cluster without a quorum or
// resharding, a replica without its master, a busy script.
var transientPrefixes = []string{"LOADING", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "BUSY", "READONLY", "MOVED", "ASK"}

// isUnavailable reports whether err says the server could not be reached
// or refused to serve for now: a failed dial, a lost connection, a
// timeout, a pool exhausted, or a transient reply. An error the server
// returned about what was asked (NOAUTH, WRONGPASS, NOPERM, an unknown
// command), a closed client, a certificate that cannot be verified, or a
// cancelled ctx is not: retrying cannot fix it.
func isUnavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, goredis.ErrClosed) {
		return false
	}
	var unknownAuthority x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	if errors.As(err, &unknownAuthority) || errors.As(err, &invalid) || errors.As(err, &hostname) {
		return false
	}
	var rerr goredis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, goredis.ErrPoolTimeout) ||
		errors.Is(err, goredis.ErrPoolExhausted)
}
