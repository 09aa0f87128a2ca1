package main

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/postbus/bus/bustest"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/sqs"
	"github.com/postbus/bus/sqs/sqstest"
)

// sqsEmulator starts goaws (or uses the one POSTBUS_TEST_GOAWS_URL names)
// for the test.
func sqsEmulator(t *testing.T) *sqstest.Emulator {
	t.Helper()
	if u := os.Getenv("POSTBUS_TEST_GOAWS_URL"); u != "" {
		return &sqstest.Emulator{URL: u}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e, err := sqstest.Start(ctx)
	if err != nil {
		bustest.SkipOutsideCI(t, "goaws emulator unavailable (set POSTBUS_TEST_GOAWS_URL to use a running one): %v", err)
	}
	t.Cleanup(e.Stop)
	return e
}

// TestSQSFlagsRetryAndProvision is not parallel: the command takes its AWS
// credentials from the process environment, as the SDK does, and the test
// sets them.
func TestSQSFlagsRetryAndProvision(t *testing.T) {
	emu := sqsEmulator(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	sc, nc := emu.Clients(hc)
	prefix := drivertest.Unique("pbcli") + "-"
	t.Cleanup(func() { deleteQueues(t, sc, prefix) })
	flags := []string{"--sqs-region", sqstest.Region, "--sqs-endpoint", emu.URL, "--sqs-protocol", "query"}
	t.Run("retry", func(t *testing.T) {
		path, id := failedInSQLite(t, "billing")
		tr, err := sqs.New(sc, nc, sqs.Options{NamePrefix: prefix, WaitTime: time.Second, Logger: drivertest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		checkRetried(t, tr, map[string]string{"POSTBUS_SQS_PREFIX": prefix}, flags, path, "billing", id)
	})
	t.Run("provision", func(t *testing.T) {
		runProvision(t, map[string]string{"POSTBUS_SQS_PREFIX": prefix}, append(provisionArgs("shipping"), flags...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		queues := slices.DeleteFunc(prefixed(t, sc, prefix), func(q string) bool { return !strings.Contains(q, "shipping") })
		want := []string{prefix + "shipping", prefix + "shipping-deadletter", prefix + "shipping-error"}
		if !slices.Equal(queues, want) {
			t.Errorf("queues %v, want %v", queues, want)
		}
		topics, err := nc.ListTopics(ctx, &sns.ListTopicsInput{})
		if err != nil {
			t.Fatal(err)
		}
		var topic string
		for _, tp := range topics.Topics {
			if strings.Contains(aws.ToString(tp.TopicArn), ":"+prefix+"orders_OrderPlaced") {
				topic = aws.ToString(tp.TopicArn)
			}
		}
		if topic == "" {
			t.Fatalf("no SNS topic for orders.OrderPlaced under %s in %v", prefix, topics.Topics)
		}
		subs, err := nc.ListSubscriptionsByTopic(ctx, &sns.ListSubscriptionsByTopicInput{TopicArn: aws.String(topic)})
		if err != nil || len(subs.Subscriptions) != 1 || !strings.HasSuffix(aws.ToString(subs.Subscriptions[0].Endpoint), prefix+"shipping") {
			t.Errorf("subscriptions of %s: %+v, %v; want the queue %sshipping", topic, subs, err, prefix)
		}
	})
}

// prefixed lists the names of the queues whose names start with prefix.
func prefixed(t *testing.T, sc *awssqs.Client, prefix string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := sc.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix)})
	if err != nil {
		t.Fatalf("list queues: %v", err)
	}
	var names []string
	for _, u := range out.QueueUrls {
		if name := u[strings.LastIndexByte(u, '/')+1:]; strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// deleteQueues deletes the queues whose names start with prefix.
func deleteQueues(t *testing.T, sc *awssqs.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := sc.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix)})
	if err != nil {
		t.Errorf("cleanup: list queues: %v", err)
		return
	}
	for _, u := range out.QueueUrls {
		if _, err := sc.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(u)}); err != nil {
			t.Errorf("cleanup: delete queue %s: %v", u, err)
		}
	}
}
