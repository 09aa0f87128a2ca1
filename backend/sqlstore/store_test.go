package sqlstore

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/postbus/bus/backend"
)

func TestCheckRows(t *testing.T) {
	t.Parallel()
	invalid := func(i int, id, reason string) error { return fmt.Errorf("row %d %q: %s", i, id, reason) }
	env := []byte("e")
	for _, tc := range []struct {
		rows []backend.OutgoingMessage
		want string
	}{
		{[]backend.OutgoingMessage{{ID: "a", Envelope: env}}, ""},
		{[]backend.OutgoingMessage{{ID: "a", Envelope: env}, {Envelope: env}}, `row 1 "": empty ID`},
		{[]backend.OutgoingMessage{{ID: "a"}}, `row 0 "a": no envelope`},
		{[]backend.OutgoingMessage{{ID: "a\x00", Envelope: env}}, `row 0 "a\x00": ID is not valid UTF-8 text without NUL bytes`},
		{[]backend.OutgoingMessage{{ID: "a\xff", Envelope: env}}, `row 0 "a\xff": ID is not valid UTF-8 text without NUL bytes`},
	} {
		err := CheckRows(tc.rows, TextID, invalid)
		if got := fmt.Sprint(err); (err == nil) != (tc.want == "") || err != nil && got != tc.want {
			t.Errorf("CheckRows(%v) = %v; want %q", tc.rows, err, tc.want)
		}
	}
	if err := CheckRows([]backend.OutgoingMessage{{ID: "a\xff", Envelope: env}}, nil, invalid); err != nil {
		t.Errorf("without validID: %v", err)
	}
}

func TestInDoubt(t *testing.T) {
	t.Parallel()
	unsent := errors.New("unsent")
	serverDoubt, serverNo := errors.New("fatal"), errors.New("syntax")
	isUnsent := func(err error) bool { return errors.Is(err, unsent) }
	server := func(err error) (bool, bool) {
		switch {
		case errors.Is(err, serverDoubt):
			return true, true
		case errors.Is(err, serverNo):
			return false, true
		}
		return false, false
	}
	for err, want := range map[error]bool{
		context.Canceled: false, context.DeadlineExceeded: false, unsent: false,
		serverDoubt: true, serverNo: false, errors.New("connection reset"): true,
	} {
		if got := InDoubt(fmt.Errorf("wrapped: %w", err), isUnsent, server); got != want {
			t.Errorf("InDoubt(%v) = %v; want %v", err, got, want)
		}
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	busy, denied, plugin := errors.New("busy"), errors.New("denied"), errors.New("plugin")
	server := func(err error) (bool, bool) {
		switch {
		case errors.Is(err, busy):
			return true, true
		case errors.Is(err, denied):
			return false, true
		}
		return false, false
	}
	unreachable := func(err error) bool { return Unreachable(err, server, plugin) }
	for err, want := range map[error]bool{
		busy: true, denied: false, plugin: false, context.Canceled: false,
		x509.UnknownAuthorityError{}: false, errors.New("dial tcp: refused"): true,
	} {
		got := Unavailable(err, nil, unreachable)
		if errors.Is(got, backend.ErrStoreUnavailable) != want || !errors.Is(got, err) {
			t.Errorf("Unavailable(%v) = %v; want marked %v", err, got, want)
		}
	}
	redacted := Unavailable(busy, func(err error) error { return fmt.Errorf("redacted: %w", err) }, unreachable)
	if redacted.Error() != "redacted: busy" || !errors.Is(redacted, backend.ErrStoreUnavailable) {
		t.Errorf("redacted: %v", redacted)
	}
	if Unavailable(nil, nil, unreachable) != nil {
		t.Error("nil is not nil")
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{"outgoing_1": true, "_x": true, "1x": false, "a-b": false, "": false, "abcdefghijk": false} {
		if got := CheckName(name, 10) == ""; got != ok {
			t.Errorf("CheckName(%q) ok = %v; want %v", name, got, ok)
		}
	}
}

func TestClaimersAndCeilMicros(t *testing.T) {
	t.Parallel()
	var c Claimers
	c.Note("b")
	c.Note("a")
	c.Note("b")
	got := c.List()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("List = %v", got)
	}
	for d, want := range map[time.Duration]int64{-time.Second: 0, 0: 0, time.Nanosecond: 1, time.Microsecond: 1, 1001 * time.Nanosecond: 2} {
		if got := CeilMicros(d); got != want {
			t.Errorf("CeilMicros(%v) = %d; want %d", d, got, want)
		}
	}
}
