package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/rabbitmq"
)

// refusedURL returns the test broker's URL changed by edit.
func refusedURL(t *testing.T, edit func(u *url.URL)) string {
	t.Helper()
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	edit(u)
	return u.String()
}

// startRefused starts a bus on a transport to rawURL, which the broker
// refuses, and checks that Start fails long before its context ends, with
// an error matching rabbitmq.ErrPermanent that contains every string in
// reason. It returns the transport, for further checks.
func startRefused(t *testing.T, rawURL string, reason ...string) *rabbitmq.Transport {
	t.Helper()
	e := newEnv(t)
	opts := e.options()
	var reported atomic.Int64
	opts.OnError = func(error) { reported.Add(1) }
	tr, err := rabbitmq.New(rawURL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(ctxT(t, 10*time.Second)); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	b, err := bus.New(bus.Config{Endpoint: e.prefix + "refused", Transport: tr, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Before the fix Start waited for this context to end. RabbitMQ answers
	// a failed login after about 3 s, and the transport confirms an
	// inferred refusal with a second attempt: about 6 s in all.
	ctx := ctxT(t, 60*time.Second)
	start := time.Now()
	err = b.Start(ctx)
	took := time.Since(start)
	if err == nil {
		_ = b.Stop(context.Background())
		t.Fatal("Start succeeded on a connection the broker refuses")
	}
	t.Logf("Start failed after %s: %v", took.Round(time.Millisecond), err)
	if ctx.Err() != nil || took > 30*time.Second {
		t.Fatalf("Start returned after %s, when its context ended: it waited instead of failing", took)
	}
	if !errors.Is(err, rabbitmq.ErrPermanent) {
		t.Errorf("Start: got %v, want an error matching rabbitmq.ErrPermanent", err)
	}
	var perm *rabbitmq.PermanentError
	if !errors.As(err, &perm) {
		t.Errorf("Start: got %T, want a *rabbitmq.PermanentError in the chain", err)
	}
	for _, r := range reason {
		if !strings.Contains(err.Error(), r) {
			t.Errorf("Start: error %q does not give the broker's reason %q", err, r)
		}
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the password: %v", err)
	}
	if reported.Load() == 0 {
		t.Error("OnError was not told of the refusal")
	}
	return tr
}

// checkFailsAtOnce checks that Receive, Send and Provision on a refused
// transport return the permanent error at once, without calling the handler
// or retrying in a loop.
func checkFailsAtOnce(t *testing.T, tr *rabbitmq.Transport, queue string) {
	t.Helper()
	var calls atomic.Int64
	ctx := ctxT(t, 30*time.Second)
	start := time.Now()
	err := tr.Receive(ctx, queue, bus.ReceiveOptions{Concurrency: 2}, func(context.Context, *bus.Envelope) error {
		calls.Add(1)
		return nil
	})
	if !errors.Is(err, rabbitmq.ErrPermanent) {
		t.Errorf("Receive after the refusal: got %v, want ErrPermanent", err)
	}
	if err := tr.Send(ctx, queue, newEnvelope("T", nil)); !errors.Is(err, rabbitmq.ErrPermanent) {
		t.Errorf("Send after the refusal: got %v, want ErrPermanent", err)
	}
	if err := tr.Provision(ctx, bus.Topology{Queue: queue}); !errors.Is(err, rabbitmq.ErrPermanent) {
		t.Errorf("Provision after the refusal: got %v, want ErrPermanent", err)
	}
	if took := time.Since(start); ctx.Err() != nil || took > 10*time.Second {
		t.Errorf("calls after the refusal took %s: they waited instead of failing", took)
	}
	if calls.Load() != 0 {
		t.Errorf("handler called %d times", calls.Load())
	}
}

func TestStartFailsAtOnceOnWrongPassword(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	u := refusedURL(t, func(u *url.URL) { u.User = url.UserPassword(u.User.Username(), "wrong") })
	tr := startRefused(t, u, "403", "username or password not allowed")
	checkFailsAtOnce(t, tr, fmt.Sprintf("pbtest-%08x-refused", rand.Uint32()))
}

func TestStartFailsAtOnceOnMissingVhost(t *testing.T) {
	t.Parallel()
	requireBroker(t)
	vhost := fmt.Sprintf("pbtest-%08x-no-such-vhost", rand.Uint32())
	u := refusedURL(t, func(u *url.URL) { u.Path = "/" + vhost })
	tr := startRefused(t, u, "530", vhost, "not found")
	checkFailsAtOnce(t, tr, fmt.Sprintf("pbtest-%08x-refused", rand.Uint32()))
}

// A refusal is reported at once but not forever: the transport keeps
// trying in the background, and once an administrator creates the missing
// vhost, calls succeed without a new transport.
func TestRefusedTransportRecoversWhenTheVhostAppears(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		bustest.SkipOutsideCI(t, "rabbitmqctl is not on PATH; this test creates a vhost with it")
	}
	vhost := e.prefix + "late-vhost"
	var user string
	u := refusedURL(t, func(u *url.URL) { u.Path, user = "/"+vhost, u.User.Username() })
	tr, err := rabbitmq.New(u, e.options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close(ctxT(t, 10*time.Second)) })
	top := bus.Topology{Queue: e.prefix + "late"}
	if err := tr.Provision(ctxT(t, 30*time.Second), top); !errors.Is(err, rabbitmq.ErrPermanent) {
		t.Fatalf("Provision before the vhost exists: got %v, want ErrPermanent", err)
	}

	rabbitmqctl(t, "add_vhost", vhost)
	t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", vhost) })
	rabbitmqctl(t, "set_permissions", "-p", vhost, user, ".*", ".*", ".*")
	var last error
	drivertest.Eventually(t, 30*time.Second, func() bool {
		last = tr.Provision(ctxT(t, 10*time.Second), top)
		if last != nil {
			time.Sleep(20 * time.Millisecond)
		}
		return last == nil
	}, "Provision to succeed once the vhost exists")
	if err := tr.Send(ctxT(t, 10*time.Second), top.Queue, newEnvelope("T", nil)); err != nil {
		t.Fatalf("Send after recovering: %v", err)
	}
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
