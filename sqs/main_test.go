package sqs_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.uber.org/goleak"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/sqs"
	"github.com/postbus/bus/sqs/sqstest"
)

// The tests run against goaws, which sqstest installs and starts as a child
// process. POSTBUS_TEST_GOAWS_URL points them at a goaws already running
// instead.
var emu struct {
	*sqstest.Emulator
	err error
}

// httpClient is shared by every SDK client of the tests, so TestMain can
// close its idle connections before the goroutine-leak check.
var httpClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func TestMain(m *testing.M) {
	flag.Parse()
	if u := os.Getenv("POSTBUS_TEST_GOAWS_URL"); u != "" {
		emu.Emulator = &sqstest.Emulator{URL: u}
	} else if fuzzOnly() {
		// A fuzz run of the decoder (make fuzz) needs no emulator.
		emu.err = errors.New("not started: only a fuzz target runs")
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		emu.Emulator, emu.err = sqstest.Start(ctx)
		cancel()
	}
	code := m.Run()
	if emu.Emulator != nil && emu.err == nil && os.Getenv("POSTBUS_TEST_GOAWS_URL") == "" {
		emu.Stop()
	}
	httpClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fuzzOnly reports whether this run only fuzzes: -fuzz given and -run
// matching no test.
func fuzzOnly() bool {
	fz, run := flag.Lookup("test.fuzz"), flag.Lookup("test.run")
	return fz != nil && fz.Value.String() != "" && run != nil && run.Value.String() == "^$"
}

// emulatorURL returns the emulator's URL, or skips the test (fails it under
// CI=true) when it could not be started.
func emulatorURL(t testing.TB) string {
	t.Helper()
	if emu.err != nil {
		bustest.SkipOutsideCI(t, "goaws emulator unavailable (set POSTBUS_TEST_GOAWS_URL to use a running one): %v", emu.err)
	}
	return emu.URL
}

// newClients returns SQS and SNS clients of the emulator.
func newClients(t testing.TB) (*awssqs.Client, *sns.Client) {
	t.Helper()
	emulatorURL(t)
	return emu.Clients(httpClient)
}

// newTransport returns a transport with a name prefix of its own, whose
// queues are deleted when the test ends.
func newTransport(t testing.TB, opts sqs.Options) *sqs.Transport {
	t.Helper()
	sc, nc := newClients(t)
	if opts.NamePrefix == "" {
		opts.NamePrefix = bustest.Namespace() + "-"
	}
	if opts.Logger == nil {
		opts.Logger = drivertest.Logger()
	}
	tr, err := sqs.New(sc, nc, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { deletePrefixed(t, sc, opts.NamePrefix) })
	return tr
}

// deletePrefixed deletes the queues whose names start with prefix.
func deletePrefixed(t testing.TB, sc *awssqs.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := sc.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix)})
	if err != nil {
		t.Errorf("cleanup: list queues: %v", err)
		return
	}
	for _, u := range out.QueueUrls {
		if !strings.HasPrefix(u[strings.LastIndexByte(u, '/')+1:], prefix) {
			continue
		}
		if _, err := sc.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)}); err != nil {
			t.Errorf("cleanup: delete queue %s: %v", u, err)
		}
	}
}
