// Package sqs is the Amazon SQS and SNS transport of Postbus, built on
// github.com/aws/aws-sdk-go-v2 (service/sqs and service/sns).
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	t, err := sqs.New(awssqs.NewFromConfig(cfg), sns.NewFromConfig(cfg), sqs.Options{NamePrefix: "prod-"})
//	b, err := bus.New(bus.Config{Endpoint: "billing", Transport: t})
//
// The caller owns the clients: their region, credentials, endpoint and
// retry settings apply.
//
// # Topology
//
// Each bus queue (an endpoint's input queue, its error and dead-letter
// queues) is a standard SQS queue, and each event type an SNS topic. An
// endpoint that subscribes to an event type has its queue subscribed to the
// type's topic with raw message delivery, so the queue receives the
// published message itself, attributes included, not an SNS JSON
// notification. Provision creates the queues, topics and subscriptions and
// sets each subscribing queue's policy to let the bus's topics send to it
// (Options.KeepQueuePolicy leaves policies to you). Send creates a queue
// nobody provisioned yet, so a command sent before its receiver first
// started is kept for it; Publish creates the topic of its type. An event
// no queue subscribes to is dropped by SNS.
//
// # Names
//
// SQS queue names are at most 80 characters and SNS topic names at most
// 256, of ASCII letters, digits, '-' and '_'. A queue name is
// Options.NamePrefix followed by the bus queue name, a topic name the
// prefix followed by the message type. A name that already fits is used as
// it is ("billing", "prod-billing-error"); any other has each disallowed
// byte replaced by '_', is cut to fit, and ends with '-' and the first 10
// hex digits of the SHA-256 of the unprefixed name, so the event type
// "github.com/acme/sales.OrderPlaced" becomes the topic
// "prod-github_com_acme_sales_OrderPlaced-" plus those digits, and names
// that differ only in replaced characters or beyond the cut stay apart.
//
// # Receiving
//
// Receive long-polls (Options.WaitTime, default 20 s) for at most as many
// messages as it has free handler slots, so none waits unhandled while its
// visibility timeout runs. While a handler runs, a heartbeat extends the
// message's visibility (ChangeMessageVisibility to Options.VisibilityTimeout
// every Options.HeartbeatInterval), so a handler may take longer than the
// visibility timeout without another consumer receiving the message. If an
// extension fails the message may be received elsewhere, so the delivery's
// context is cancelled with cause ErrVisibilityLost. A message whose
// handler returned nil is deleted with DeleteMessageBatch, up to 10 at a
// time; one whose handler failed is made visible again at once (visibility
// 0), so the bus's immediate and delayed retries and its error queue decide
// what happens next (bustest.Features.NativeRedelivery).
//
// Delivery is at least once: a process that dies with messages in flight
// loses none; they return after the visibility timeout.
//
// # Wire format
//
// The body is the envelope's Body, and the envelope's other fields are
// message attributes. SQS allows 10 attributes, so the eight most useful to
// other tools and SNS filter policies get one each (Postbus-Id,
// Postbus-Type, Postbus-Kind, Postbus-Content-Type, Postbus-Correlation-Id,
// Postbus-Source, Postbus-Destination, Postbus-Sent-At), Postbus-Body
// tells how the body is encoded when it is not plain text, and the rest
// (due and expiry times, ordering key, headers, attributes and sticky
// attributes) travel as JSON in Postbus-Envelope. SQS bodies must be
// Unicode text: a body that is not (say, protobuf) is sent base64-encoded,
// which makes it a third larger. A message whose attributes cannot be read
// still reaches the handler, with its raw body and bus.HeaderDecodeError
// set.
//
// # Limits
//
// SNS messages, and SQS messages as this transport sends them, are at most
// 256 KiB (MaxMessageBytes), counting the body as sent and every
// attribute's name, type and value. Send and Publish refuse a larger
// message before sending, with a *MessageTooLargeError. Keep bodies
// below 255 KiB of text (about 191 KiB of binary, after base64) and large
// payloads in S3 with a reference in the message.
//
// The native per-message delay of SQS (DelaySeconds, at most 15 minutes,
// and unavailable for messages delivered through SNS) is not used: delayed
// messages wait in the bus's persistence and are sent when due, the same on
// every transport and for any delay.
//
// Queues are standard queues: no order is kept, and
// bustest.Features.OrderedByKey is not declared. SQS FIFO queues with
// message groups would keep messages of one ordering key in order; this
// transport does not create them.
package sqs
