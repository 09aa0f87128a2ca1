package sqs_test

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/postbus/bus"
	"github.com/postbus/bus/sqs"
)

// The transport takes the application's own SDK clients. This example
// needs AWS (or an emulator), so it is compiled but not run.
func Example() {
	cfg := aws.Config{Region: "eu-west-1"} // usually config.LoadDefaultConfig(ctx)
	tr, err := sqs.New(awssqs.NewFromConfig(cfg), sns.NewFromConfig(cfg), sqs.Options{
		NamePrefix:        "prod-",
		VisibilityTimeout: time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: tr})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Start(context.Background()); err != nil { // provisions queues, topics and subscriptions
		fmt.Println(err)
		return
	}
	defer b.Stop(context.Background())
}

// Options are checked by New, with a typed error naming the field.
func ExampleNew_invalidOptions() {
	cfg := aws.Config{Region: "eu-west-1"}
	_, err := sqs.New(awssqs.NewFromConfig(cfg), sns.NewFromConfig(cfg), sqs.Options{NamePrefix: "prod.eu"})
	fmt.Println(err)
	// Output: sqs: invalid options: NamePrefix: "prod.eu" may hold only letters, digits, '-' and '_'
}
