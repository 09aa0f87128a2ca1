package storetest

import (
	"context"
	"sync/atomic"
	"testing"
)

// TestServiceOpensTheSharedHandleOnce: the shared handle is opened on first
// use and closed by Shutdown; a handle of a test's own is closed at its
// cleanup.
func TestServiceOpensTheSharedHandleOnce(t *testing.T) {
	t.Parallel()
	var opened, closed atomic.Int32
	s := &Service[int32]{Name: "fake", Env: "POSTBUS_STORETEST_FAKE", Default: "fake:1",
		Open: func(_ context.Context, addr string, n int) (int32, error) {
			if addr != "fake:1" || n != 20 && n != 3 {
				t.Errorf("Open(%q, %d)", addr, n)
			}
			return opened.Add(1), nil
		},
		Close: func(int32) { closed.Add(1) },
	}
	if a, b := s.Shared(t), s.Shared(t); a != 1 || b != 1 {
		t.Fatalf("Shared = %d then %d, want the first handle twice", a, b)
	}
	t.Run("own", func(t *testing.T) {
		if h := s.Own(t, 3); h != 2 {
			t.Errorf("Own = %d, want a new handle", h)
		}
	})
	if closed.Load() != 1 {
		t.Errorf("%d handles closed after the subtest, want its own", closed.Load())
	}
	s.Shutdown()
	s.Shutdown()
	if closed.Load() != 2 {
		t.Errorf("%d handles closed after Shutdown, want 2", closed.Load())
	}
}
