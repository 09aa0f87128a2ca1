package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqs"
	"github.com/postbus/bus/sqs/sqstest"
)

// sqsEndpointEnv names a running goaws (or other SQS/SNS endpoint speaking
// the query protocol) for the bench; when it is unset, the run's owner
// starts goaws itself and hands its address to worker processes through
// the same variable.
const sqsEndpointEnv = "POSTBUS_BENCH_SQS_ENDPOINT"

// sqsDriver runs over goaws: figures measure the emulator as much as the
// transport (see docs/benchmarks.md). Each run uses its own name prefix.
func sqsDriver() transportDriver {
	var (
		mu  sync.Mutex
		emu *sqstest.Emulator
	)
	return transportDriver{
		shared:      true,
		serverProcs: []string{"goaws"},
		open: func(ctx context.Context, o *options, run string, owner bool) (bus.Transport, func(), error) {
			mu.Lock()
			url := os.Getenv(sqsEndpointEnv)
			started := false
			if url == "" && owner {
				e, err := sqstest.Start(ctx)
				if err != nil {
					mu.Unlock()
					return nil, nil, fmt.Errorf("start goaws: %w", err)
				}
				emu, url, started = e, e.URL, true
				_ = os.Setenv(sqsEndpointEnv, url) // for the worker processes
			}
			mu.Unlock()
			if url == "" {
				return nil, nil, fmt.Errorf("%s is not set", sqsEndpointEnv)
			}
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			e := &sqstest.Emulator{URL: url}
			cfg := e.Config(hc)
			sc := awssqs.NewFromConfig(cfg, sqstest.QueryProtocol)
			// A short visibility timeout: a ReceiveMessage response lost to a
			// closed connection (see docs/transports/sqs.md) then costs 5 s, not 30.
			t, err := sqs.New(sc, sns.NewFromConfig(cfg), sqs.Options{NamePrefix: "bench-" + run + "-", VisibilityTimeout: 5 * time.Second,
				WaitTime: 5 * time.Second, Logger: o.logger})
			if err != nil {
				return nil, nil, err
			}
			cleanup := func() {
				hc.CloseIdleConnections()
				if started {
					mu.Lock()
					emu.Stop()
					emu = nil
					_ = os.Unsetenv(sqsEndpointEnv)
					mu.Unlock()
				}
			}
			return t, cleanup, nil
		},
	}
}
