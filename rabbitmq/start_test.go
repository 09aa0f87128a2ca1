package rabbitmq_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/rabbitmq"
)

// TestStartWithBrokerDownReturns: with nothing listening at the broker's
// address, Start with context.Background() returns once StartTimeout has
// passed, with an error that names the last connection failure, and the
// reconnection attempts are logged with their backoff, a bounded number of
// times.
func TestStartWithBrokerDownReturns(t *testing.T) {
	t.Parallel()
	var logs bustest.LogBuffer
	opts := rabbitmq.Options{ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	tr, err := rabbitmq.New("amqp://guest:guest@"+bustest.DeadAddr(t)+"/", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctxT(t, 10*time.Second))
	err = bustest.StartWithBrokerDown(t, tr, 2*time.Second)
	if !errors.Is(err, bus.ErrStartTimeout) || !errors.Is(err, rabbitmq.ErrNotConnected) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Start = %v, want ErrStartTimeout and ErrNotConnected naming the refused connection", err)
	}
	lines := strings.Count(logs.String(), "connect failed; retrying")
	if lines < 1 || lines > 2 || !strings.Contains(logs.String(), "retry_in=") {
		t.Errorf("%d connect-failure lines in 2 s of attempts every 50 ms, want 1 or 2 with their backoff:\n%s", lines, logs.String())
	}
}
