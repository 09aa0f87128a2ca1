package poll_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus/internal/poll"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// goroutine.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// A condition that comes true in time ends the wait, without a failure,
// soon after.
func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	go func() {
		time.Sleep(20 * time.Millisecond) // the other goroutine's work
		n.Store(1)
	}()
	r := &recorder{TB: t}
	start := time.Now()
	poll.Eventually(r, 10*time.Second, func() bool { return n.Load() == 1 }, "n to be %d", 1)
	if r.failed != "" {
		t.Fatalf("failed: %s", r.failed)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("returned after %v", took)
	}
}

// A condition that never holds fails the test after the timeout, with a
// message naming what was awaited, and does not check it again after that.
func TestEventuallyFailsWithAClearMessage(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	checks := 0
	start := time.Now()
	poll.Eventually(r, 50*time.Millisecond, func() bool { checks++; return false }, "queue %q to hold %d messages", "sales", 3)
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("gave up after %v", took)
	}
	if want := `waited 50ms, in vain, for queue "sales" to hold 3 messages`; r.failed != want {
		t.Fatalf("message %q, want %q", r.failed, want)
	}
	if checks < 3 || !strings.Contains(r.failed, "sales") {
		t.Fatalf("%d checks", checks)
	}
}
