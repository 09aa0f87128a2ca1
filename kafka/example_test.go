package kafka_test

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/postbus/bus"
	"github.com/postbus/bus/kafka"
)

// The transport owns its clients; TLS and SASL are franz-go options. This
// example needs a Kafka cluster, so it is compiled but not run.
func Example() {
	tr, err := kafka.New([]string{"broker-1:9093", "broker-2:9093"}, kafka.Options{
		TopicPrefix:       "shop",
		Partitions:        12,
		ReplicationFactor: 3,
		ClientOptions: []kgo.Opt{
			kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}),
			kgo.SASL(plain.Auth{User: "billing", Pass: "secret"}.AsMechanism()),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close(context.Background())
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(context.Background()); err != nil { // provisions the topics
		fmt.Println(err)
		return
	}
	defer b.Stop(context.Background())
}

// Options are checked before anything is contacted.
func ExampleNew() {
	_, err := kafka.New([]string{"127.0.0.1:9092"}, kafka.Options{Partitions: -1})
	fmt.Println(err)
	// Output: kafka: invalid options: Partitions: must be positive
}
