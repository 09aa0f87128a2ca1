package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOneTraceAcrossTheDelay runs the example with a short delay: the
// checkout and the delivery after the delay are one trace, and the
// lateness histogram is served at /metrics.
func TestOneTraceAcrossTheDelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out, "127.0.0.1:0", 300*time.Millisecond, false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	var checkoutTrace string
	for block := range strings.SplitSeq(text, "\ntrace ") {
		if strings.Contains(block, " checkout\n") {
			checkoutTrace = block
		}
	}
	for _, span := range []string{"send orders", "process orders", "schedule billing", "dispatch billing", "receive billing", "process billing"} {
		if !strings.Contains(checkoutTrace, " "+span+"\n") {
			t.Fatalf("the checkout's trace has no %q span:\n%s", span, checkoutTrace)
		}
	}
	if !strings.Contains(text, `postbus_delivery_lateness_seconds_count{`) {
		t.Fatalf("no lateness histogram in the metrics output:\n%s", text)
	}
	if !strings.Contains(text, `"Name":"process billing"`) {
		t.Fatalf("the stdout exporter printed no span")
	}
}
