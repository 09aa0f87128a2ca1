package main

import (
	"context"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/postbus/bus/sqs/sqstest"
)

// startEmulator starts the broker of a transport that has no shared
// service: Kafka as kfake, in this process, on a loopback port the workers
// dial; SQS/SNS as a goaws child process. It returns the broker's URL and
// the function that stops it; for the other transports, brokerURL and a
// no-op.
//
// What the emulators cannot show: kfake keeps its log in memory and dies
// with the soak, so a run proves nothing about a broker's durability or a
// broker restart, and its address comes back in the cluster metadata, so
// cuts reach only the database; goaws is a single process without SQS's
// distributed at-least-once delivery and its visibility timeout is coarse.
func startEmulator(ctx context.Context, transport string) (string, func(), error) {
	switch transport {
	case transportKafka:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, fmt.Errorf("kfake port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
		if err != nil {
			return "", nil, fmt.Errorf("kfake cluster: %w", err)
		}
		return fmt.Sprintf("kafka://127.0.0.1:%d", port), c.Close, nil
	case transportSQS:
		emu, err := sqstest.Start(ctx)
		if err != nil {
			return "", nil, fmt.Errorf("goaws: %w", err)
		}
		return emu.URL, emu.Stop, nil
	}
	return brokerURL(transport), func() {}, nil
}
