package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

// The error families of two drivers, as a driver package declares its own.
type alpha struct{}
type beta struct{}

var alphaSentinels, betaSentinels = driver.Sentinels{
	Transport: "alpha", InvalidOptions: errors.New("alpha: invalid options"), InvalidName: errors.New("alpha: invalid name"),
}, driver.Sentinels{
	Transport: "beta", InvalidOptions: errors.New("beta: invalid options"), InvalidName: errors.New("beta: invalid name"),
}

func (alpha) Sentinels() driver.Sentinels { return alphaSentinels }
func (beta) Sentinels() driver.Sentinels  { return betaSentinels }

var (
	errAOptions, errAName = alphaSentinels.InvalidOptions, alphaSentinels.InvalidName
	errBOptions, errBName = betaSentinels.InvalidOptions, betaSentinels.InvalidName
)

type (
	alphaOptionsError = driver.OptionsError[alpha]
	alphaNameError    = driver.NameError[alpha]
	betaOptionsError  = driver.OptionsError[beta]
	betaNameError     = driver.NameError[beta]
)

func TestOptionsErrorTextAndMatching(t *testing.T) {
	t.Parallel()
	err := driver.Invalid[alpha](driver.Positive("Partitions", 0))
	if got, want := err.Error(), "alpha: invalid options: Partitions: must be positive"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, errAOptions) {
		t.Errorf("%v does not match its driver's sentinel", err)
	}
	if errors.Is(err, errBOptions) || errors.Is(err, errAName) {
		t.Errorf("%v matches another sentinel", err)
	}
	var oe *alphaOptionsError
	if !errors.As(err, &oe) || oe.Field != "Partitions" || oe.Reason != "must be positive" {
		t.Errorf("errors.As(%v) = %+v, want Field Partitions", err, oe)
	}
	var other *betaOptionsError
	if errors.As(err, &other) {
		t.Errorf("errors.As matched another driver's OptionsError: %+v", other)
	}
	// A driver builds its error as a plain literal too.
	lit := error(&alphaOptionsError{Field: "seeds", Reason: "none given"})
	if got, want := lit.Error(), "alpha: invalid options: seeds: none given"; got != want || !errors.Is(lit, errAOptions) {
		t.Errorf("literal: %q (matches sentinel: %v), want %q", got, errors.Is(lit, errAOptions), want)
	}
	if err := driver.Invalid[alpha](nil); err != nil {
		t.Errorf("Invalid(nil) = %#v, want a nil error", err)
	}
}

func TestNameErrorTextAndMatching(t *testing.T) {
	t.Parallel()
	err := driver.NonEmpty[beta]("queue", "")
	if got, want := err.Error(), `beta: invalid queue "": must not be empty`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, errBName) || errors.Is(err, errAName) || errors.Is(err, errBOptions) {
		t.Errorf("%v: wrong sentinels matched", err)
	}
	var ne *betaNameError
	if !errors.As(err, &ne) || ne.What != "queue" {
		t.Errorf("errors.As(%v) = %+v, want What queue", err, ne)
	}
	var other *alphaNameError
	if errors.As(err, &other) {
		t.Errorf("errors.As matched another driver's NameError: %+v", other)
	}
	if err := driver.NonEmpty[beta]("queue", "orders"); err != nil {
		t.Errorf("NonEmpty(orders) = %#v, want a nil error", err)
	}
	lit := error(&betaNameError{What: "event type", Name: "a\tb", Reason: "has a tab"})
	if got, want := lit.Error(), `beta: invalid event type "a\tb": has a tab`; got != want {
		t.Errorf("literal: %q, want %q", got, want)
	}
}

func TestCheckTopology(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		top  bus.Topology
		want string // "" for valid
	}{
		{bus.Topology{}, ""},
		{bus.Topology{Queue: "sales", Events: []string{"a.B"}, Queues: []string{"billing"}}, ""},
		{bus.Topology{Events: []string{"a.B"}}, `alpha: invalid queue "": events need a queue to be delivered to`},
		{bus.Topology{Queue: "sales", Events: []string{"a.B", ""}}, `alpha: invalid event type "": must not be empty`},
		{bus.Topology{Queue: "sales", Queues: []string{""}}, `alpha: invalid queue "": must not be empty`},
		// Event types are checked before the other queues.
		{bus.Topology{Queue: "sales", Events: []string{""}, Queues: []string{""}}, `alpha: invalid event type "": must not be empty`},
	} {
		err := driver.CheckTopology[alpha](c.top)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckTopology(%+v) = %v, want nil", c.top, err)
		case c.want != "" && (err == nil || err.Error() != c.want || !errors.Is(err, errAName)):
			t.Errorf("CheckTopology(%+v) = %v, want %q matching the sentinel", c.top, err, c.want)
		}
	}
}

func TestCheckReceive(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *bus.Envelope) error { return nil }
	if err := driver.CheckReceive[alpha]("sales", h); err != nil {
		t.Errorf("CheckReceive(sales, h) = %v", err)
	}
	if err := driver.CheckReceive[alpha]("", h); err == nil || err.Error() != `alpha: invalid queue "": must not be empty` {
		t.Errorf("CheckReceive(\"\", h) = %v", err)
	}
	err := driver.CheckReceive[alpha]("sales", nil)
	var ne *alphaNameError
	if !errors.As(err, &ne) || err.Error() != `alpha: invalid handler "sales": must not be nil` {
		t.Errorf("CheckReceive(sales, nil) = %v, want a NameError on the handler", err)
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if !driver.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep on a live ctx reported it ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if driver.Sleep(ctx, time.Hour) {
		t.Error("Sleep on an ended ctx reported it live")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Sleep on an ended ctx took %v", d)
	}
}
