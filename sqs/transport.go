package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/postbus/bus"
	"github.com/postbus/bus/driver"
)

var (
	_ bus.Transport         = (*Transport)(nil)
	_ bus.TransportIdentity = (*Transport)(nil)
)

// Transport carries Postbus envelopes over Amazon SQS queues and SNS topics.
// It is safe for concurrent use. Create it with New.
type Transport struct {
	sqs      *awssqs.Client
	sns      *sns.Client
	opts     Options
	identity string

	mu     sync.Mutex
	urls   map[string]string // SQS queue name -> queue URL
	topics map[string]string // SNS topic name -> topic ARN
}

// New returns a transport using the caller's SQS and SNS clients, whose
// region, credentials, endpoint and retry settings apply. New does not
// contact AWS; Provision creates queues, topics and subscriptions.
func New(sqsClient *awssqs.Client, snsClient *sns.Client, opts Options) (*Transport, error) {
	if sqsClient == nil {
		return nil, &OptionsError{Field: "sqsClient", Reason: "must not be nil"}
	}
	if snsClient == nil {
		return nil, &OptionsError{Field: "snsClient", Reason: "must not be nil"}
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Transport{
		sqs:      sqsClient,
		sns:      snsClient,
		opts:     opts,
		identity: identity(sqsClient.Options(), opts.NamePrefix),
		urls:     map[string]string{},
		topics:   map[string]string{},
	}, nil
}

// identity is "sqs:<where>/<prefix>": where is the client's endpoint URL
// (scheme, host and path, without user info or query) when it has one, its
// region otherwise.
func identity(o awssqs.Options, prefix string) string {
	where := o.Region
	if o.BaseEndpoint != nil && *o.BaseEndpoint != "" {
		where = *o.BaseEndpoint
		if u, err := url.Parse(where); err == nil && u.Host != "" {
			where = u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
		}
	}
	return "sqs:" + where + "/" + prefix
}

// Identity names the endpoint (or region) and name prefix:
// "sqs:<endpoint-or-region>/<prefix>". Scheduled rows carry it, so a
// dispatcher only sends rows scheduled through the same queues. It holds no
// credentials; the account is not part of it, so two accounts in one region
// whose services share a database need different NamePrefix values.
func (t *Transport) Identity() string { return t.identity }

// Close releases nothing: the SQS and SNS clients stay the caller's. It
// exists so every Postbus transport can be closed the same way.
func (t *Transport) Close(context.Context) error { return nil }

// Provision creates the SQS queue of top.Queue and of each of top.Queues,
// an SNS topic for each type in top.Events, and a raw-delivery subscription
// of top.Queue to each of those topics; unless Options.KeepQueuePolicy is
// set it also sets top.Queue's policy so the bus's topics may send to it.
// It is idempotent. Existing queues keep their attributes (a queue created
// with other attributes is used as it is). Provision never deletes: a
// subscription an endpoint dropped stays until an operator removes it.
func (t *Transport) Provision(ctx context.Context, top bus.Topology) error {
	if err := driver.CheckTopology[errorFamily](top); err != nil {
		return err
	}
	for _, q := range append([]string{top.Queue}, top.Queues...) {
		if q == "" {
			continue
		}
		if _, err := t.queueURL(ctx, q); err != nil {
			return err
		}
	}
	if len(top.Events) == 0 {
		return nil
	}
	qurl, err := t.queueURL(ctx, top.Queue)
	if err != nil {
		return err
	}
	qarn, err := t.queueARN(ctx, qurl)
	if err != nil {
		return err
	}
	for _, typ := range top.Events {
		tarn, err := t.topicARN(ctx, typ)
		if err != nil {
			return err
		}
		_, err = t.sns.Subscribe(ctx, &sns.SubscribeInput{
			TopicArn:              aws.String(tarn),
			Protocol:              aws.String("sqs"),
			Endpoint:              aws.String(qarn),
			Attributes:            map[string]string{"RawMessageDelivery": "true"},
			ReturnSubscriptionArn: true,
		})
		if err != nil {
			return fmt.Errorf("sqs: subscribe %s to %s: %w", qarn, tarn, err)
		}
	}
	if t.opts.KeepQueuePolicy {
		return nil
	}
	_, err = t.sqs.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{
		QueueUrl:   aws.String(qurl),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNamePolicy): t.queuePolicy(qarn)},
	})
	if err != nil {
		return fmt.Errorf("sqs: set policy of %s: %w", qurl, err)
	}
	return nil
}

// queuePolicy lets the bus's SNS topics (same partition, region and account
// as the queue, name starting with NamePrefix) send to the queue qarn.
func (t *Transport) queuePolicy(qarn string) string {
	topics := "arn:aws:sns:*:*:" + t.opts.NamePrefix + "*"
	if p := strings.Split(qarn, ":"); len(p) == 6 {
		topics = strings.Join([]string{p[0], p[1], "sns", p[3], p[4], t.opts.NamePrefix + "*"}, ":")
	}
	return `{"Version":"2012-10-17","Statement":[{"Sid":"PostbusTopics","Effect":"Allow",` +
		`"Principal":{"Service":"sns.amazonaws.com"},"Action":"sqs:SendMessage",` +
		`"Resource":` + strconv.Quote(qarn) + `,"Condition":{"ArnLike":{"aws:SourceArn":` + strconv.Quote(topics) + `}}}]}`
}

// Send sends env to queue with SendMessage and returns once SQS stored it.
// A queue nobody provisioned yet is created first, so a command sent before
// its receiver first started is kept for it.
func (t *Transport) Send(ctx context.Context, queue string, env *bus.Envelope) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	w, err := encode(env)
	if err != nil {
		return err
	}
	in := &awssqs.SendMessageInput{
		MessageBody:       aws.String(w.body),
		MessageAttributes: make(map[string]sqstypes.MessageAttributeValue, len(w.attrs)),
	}
	for _, a := range w.attrs {
		in.MessageAttributes[a.name] = sqstypes.MessageAttributeValue{DataType: aws.String(dataTypeString), StringValue: aws.String(a.value)}
	}
	for attempt := 0; ; attempt++ {
		qurl, err := t.queueURL(ctx, queue)
		if err != nil {
			return err
		}
		in.QueueUrl = aws.String(qurl)
		_, err = t.sqs.SendMessage(ctx, in)
		if err == nil {
			return nil
		}
		if isQueueMissing(err) && attempt == 0 {
			t.forgetQueue(queue) // deleted since we looked it up
			continue
		}
		return fmt.Errorf("sqs: send %s to %s: %w", env.ID, queue, err)
	}
}

// Publish publishes env to the SNS topic of env.Type, creating the topic if
// needed, and returns once SNS accepted it. Every queue subscribed to the
// topic gets a copy; with no subscriber SNS drops it.
func (t *Transport) Publish(ctx context.Context, env *bus.Envelope) error {
	if err := checkName("event type", env.Type); err != nil {
		return err
	}
	w, err := encode(env)
	if err != nil {
		return err
	}
	tarn, err := t.topicARN(ctx, env.Type)
	if err != nil {
		return err
	}
	in := &sns.PublishInput{
		TopicArn:          aws.String(tarn),
		Message:           aws.String(w.body),
		MessageAttributes: make(map[string]snstypes.MessageAttributeValue, len(w.attrs)),
	}
	for _, a := range w.attrs {
		in.MessageAttributes[a.name] = snstypes.MessageAttributeValue{DataType: aws.String(dataTypeString), StringValue: aws.String(a.value)}
	}
	if _, err := t.sns.Publish(ctx, in); err != nil {
		return fmt.Errorf("sqs: publish %s to %s: %w", env.ID, tarn, err)
	}
	return nil
}

// queueURL returns the URL of the bus queue q, creating the queue when it
// does not exist. Answers are cached.
func (t *Transport) queueURL(ctx context.Context, q string) (string, error) {
	name := t.queueName(q)
	t.mu.Lock()
	u, ok := t.urls[name]
	t.mu.Unlock()
	if ok {
		return u, nil
	}
	out, err := t.sqs.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err == nil {
		u = aws.ToString(out.QueueUrl)
	} else if isQueueMissing(err) {
		u, err = t.createQueue(ctx, name)
	}
	if err != nil {
		return "", fmt.Errorf("sqs: queue %s (%s): %w", q, name, err)
	}
	t.mu.Lock()
	t.urls[name] = u
	t.mu.Unlock()
	return u, nil
}

func (t *Transport) createQueue(ctx context.Context, name string) (string, error) {
	out, err := t.sqs.CreateQueue(ctx, &awssqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			string(sqstypes.QueueAttributeNameVisibilityTimeout): strconv.Itoa(int(t.opts.VisibilityTimeout.Seconds())),
		},
	})
	if err != nil {
		var exists *sqstypes.QueueNameExists
		if errors.As(err, &exists) || apiCode(err) == "QueueAlreadyExists" {
			// Created meanwhile with other attributes: use it as it is.
			got, gerr := t.sqs.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
			if gerr != nil {
				return "", gerr
			}
			return aws.ToString(got.QueueUrl), nil
		}
		return "", fmt.Errorf("create: %w", err)
	}
	t.opts.Logger.Debug("sqs: queue created", driver.LogQueue, name)
	return aws.ToString(out.QueueUrl), nil
}

func (t *Transport) forgetQueue(q string) {
	t.mu.Lock()
	delete(t.urls, t.queueName(q))
	t.mu.Unlock()
}

func (t *Transport) queueARN(ctx context.Context, qurl string) (string, error) {
	out, err := t.sqs.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(qurl),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", fmt.Errorf("sqs: ARN of %s: %w", qurl, err)
	}
	arn := out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", fmt.Errorf("sqs: ARN of %s: not returned", qurl)
	}
	return arn, nil
}

// topicARN returns the ARN of the topic of typ, creating the topic (an
// idempotent call) the first time. Answers are cached.
func (t *Transport) topicARN(ctx context.Context, typ string) (string, error) {
	name := t.topicName(typ)
	t.mu.Lock()
	arn, ok := t.topics[name]
	t.mu.Unlock()
	if ok {
		return arn, nil
	}
	out, err := t.sns.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(name)})
	if err != nil {
		return "", fmt.Errorf("sqs: topic %s (%s): %w", typ, name, err)
	}
	arn = aws.ToString(out.TopicArn)
	t.mu.Lock()
	t.topics[name] = arn
	t.mu.Unlock()
	return arn, nil
}

// isQueueMissing reports an error saying the queue does not exist, as SQS
// reports it over either of its protocols.
func isQueueMissing(err error) bool {
	var missing *sqstypes.QueueDoesNotExist
	if errors.As(err, &missing) {
		return true
	}
	switch apiCode(err) {
	case "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue":
		return true
	}
	return false
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
