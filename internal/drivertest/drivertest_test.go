package drivertest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestUniqueNames(t *testing.T) {
	t.Parallel()
	a, b := drivertest.Unique("pbtest-"), drivertest.Unique("pbtest-")
	if a == b || !strings.HasPrefix(a, "pbtest-") || len(a) != len("pbtest-")+12 {
		t.Errorf("Unique: %q and %q", a, b)
	}
	if x, y := drivertest.ID(), drivertest.ID(); x == y || len(x) != 24 {
		t.Errorf("ID: %q and %q", x, y)
	}
}

func TestAddr(t *testing.T) {
	t.Setenv("POSTBUS_TEST_DRIVERTEST_ADDR", "")
	if got := drivertest.Addr("POSTBUS_TEST_DRIVERTEST_ADDR", "127.0.0.1:1"); got != "127.0.0.1:1" {
		t.Errorf("default: got %q", got)
	}
	t.Setenv("POSTBUS_TEST_DRIVERTEST_ADDR", "10.0.0.1:2")
	if got := drivertest.Addr("POSTBUS_TEST_DRIVERTEST_ADDR", "127.0.0.1:1"); got != "10.0.0.1:2" {
		t.Errorf("from env: got %q", got)
	}
}

// fakeReceiver hands n deliveries to the handler, then waits for ctx.
type fakeReceiver struct{ n int }

func (f fakeReceiver) Receive(ctx context.Context, queue string, _ bus.ReceiveOptions, h bus.DeliveryHandler) error {
	for i := 0; i < f.n; i++ {
		if err := h(ctx, &bus.Envelope{ID: queue}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

func TestReceiveStopsOnce(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	stop := drivertest.Receive(t, fakeReceiver{n: 3}, "q", bus.ReceiveOptions{}, func(context.Context, *bus.Envelope) error {
		got.Add(1)
		return nil
	})
	deadline := time.Now().Add(30 * time.Second)
	for got.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	stop()
	if got.Load() != 3 {
		t.Errorf("handled %d, want 3", got.Load())
	}
}

func TestCountReceived(t *testing.T) {
	t.Parallel()
	handled := drivertest.CountReceived(t, fakeReceiver{n: 5}, "q", 5)
	select {
	case <-handled.All():
	case <-time.After(30 * time.Second):
		t.Fatal("countdown never reached zero")
	}
}

func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.json")
	type rec struct{ A string }
	t.Setenv("POSTBUS_UPDATE_GOLDEN", "1")
	if want := drivertest.Golden(t, path, []rec{{"x"}}); len(want) != 1 || want[0].A != "x" {
		t.Fatalf("got %v", want)
	}
	t.Setenv("POSTBUS_UPDATE_GOLDEN", "")
	var ft fakeT
	ft.TB = t
	drivertest.Golden(&ft, path, []rec{{"y"}})
	if !ft.failed {
		t.Error("a changed value did not fail the golden test")
	}
	if _, err := os.Stat(path); err != nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("golden file: %v", err)
	}
}

// fakeT records a failure instead of failing the test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Helper()               {}

// TestWireEnvelopesAreValidUTF8: golden files are JSON, which holds only
// valid UTF-8 exactly.
func TestWireEnvelopesAreValidUTF8(t *testing.T) {
	t.Parallel()
	for _, env := range drivertest.WireEnvelopes() {
		strs := []string{env.ID, env.Type, env.ContentType, env.CorrelationID, env.Source, env.Destination, env.OrderingKey}
		for _, m := range []map[string]string{env.Headers, env.Attributes, env.StickyAttributes} {
			for k, v := range m {
				strs = append(strs, k, v)
			}
		}
		for _, s := range strs {
			if !utf8.ValidString(s) {
				t.Errorf("envelope %s: %q is not valid UTF-8", env.ID, s)
			}
		}
	}
}

type oddError struct{}

func (*oddError) Error() string { return "odd" }

func TestTypedError(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("x: invalid")
	err := fmt.Errorf("send: %w", &wrapErr{sentinel})
	if got := drivertest.TypedError[*wrapErr](t, err, sentinel, "send: x: invalid"); got == nil {
		t.Error("TypedError returned no error value")
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"another type", &oddError{}, "odd"},
		{"another sentinel", &wrapErr{errors.New("y")}, "y"},
		{"another text", err, "x: invalid"},
		{"nil", nil, ""},
	} {
		ft := &fakeT{TB: t}
		drivertest.TypedError[*wrapErr](ft, c.err, sentinel, c.want)
		if !ft.failed {
			t.Errorf("%s: TypedError did not fail", c.name)
		}
	}
}

type wrapErr struct{ err error }

func (e *wrapErr) Error() string { return e.err.Error() }
func (e *wrapErr) Unwrap() error { return e.err }
