package mongodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/postbus/bus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StoreOutgoing inserts the messages in one unordered InsertMany (which the
// driver splits into several writes past the server's batch limits). A
// message whose ID is already stored keeps its existing document: the
// duplicate-key errors that causes are expected and ignored, so a retried
// send cannot schedule twice. A message with a Delay is due that long after
// the server's time, read once per call from the hello command. A message
// with an empty ID or no envelope is an *ArgumentError, and nothing is
// stored.
//
// The insert runs without a transaction (standalone servers and FerretDB
// have none), so the rows of one call are not stored all or none: a call
// that fails part way (a lost connection, a server error) may leave some
// stored. Calling again with the same rows stores the rest, each once; a
// batch sent with bus.SendBatch is retryable that way when its messages
// have fixed IDs (bus.WithMessageID).
func (p *Persistence) StoreOutgoing(ctx context.Context, msgs []bus.OutgoingMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	var serverNow time.Time
	for i := range msgs {
		if msgs[i].ID == "" {
			return &ArgumentError{Method: "StoreOutgoing", Argument: fmt.Sprintf("msgs[%d].ID", i), Reason: "is empty"}
		}
		if !utf8.ValidString(msgs[i].ID) {
			// BSON strings are UTF-8: an invalid ID would be stored cleaned,
			// and two such IDs would share one document.
			return &ArgumentError{Method: "StoreOutgoing", Argument: fmt.Sprintf("msgs[%d].ID", i), Reason: "is not valid UTF-8"}
		}
		if msgs[i].Envelope == nil {
			return &ArgumentError{Method: "StoreOutgoing", Argument: fmt.Sprintf("msgs[%d].Envelope", i), Reason: "is nil"}
		}
		if msgs[i].Delay > 0 && serverNow.IsZero() {
			var err error
			if serverNow, err = p.serverTime(ctx); err != nil {
				return fmt.Errorf("mongodb: store: %w", err)
			}
		}
	}
	now := time.Now()
	docs := make([]any, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		due := m.DueAt
		if m.Delay > 0 {
			due = latest(serverNow).Add(m.Delay)
		}
		docs[i] = &message{
			ID: m.ID, Kind: int32(m.Kind), Envelope: m.Envelope, Transport: m.Transport,
			DueAt: due.UnixNano(), AvailableAt: ceilMillis(due),
			Failures: int32(m.Failures), LastError: m.LastError, CreatedAt: now, Type: m.Type,
		}
	}
	_, err := p.msgs.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err = ignoreDuplicates(err); err != nil {
		return fmt.Errorf("mongodb: store: %w", err)
	}
	return nil
}

// ignoreDuplicates returns err unless every write error in it is a
// duplicate key.
func ignoreDuplicates(err error) error {
	if err == nil {
		return nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		return err
	}
	for _, we := range bwe.WriteErrors {
		if !isDuplicateKey(we.WriteError) {
			return err
		}
	}
	return nil
}

func isDuplicateKey(we mongo.WriteError) bool {
	switch we.Code {
	case 11000, 11001, 12582:
		return true
	}
	return strings.Contains(we.Message, "E11000")
}

// CancelOutgoing removes a message that no claim holds (never claimed,
// released, failed, or its lease lapsed on the server's clock) and reports
// whether it did. A message whose lease is running stays: it is being
// delivered.
func (p *Persistence) CancelOutgoing(ctx context.Context, id string) (bool, error) {
	now, err := p.serverTime(ctx)
	if err != nil {
		return false, fmt.Errorf("mongodb: cancel: %w", err)
	}
	res, err := p.msgs.DeleteOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldLeaseUntil, Value: nil}},
			bson.D{{Key: fieldLeaseUntil, Value: bson.D{{Key: "$lte", Value: now}}}},
		}},
	})
	if err != nil {
		return false, fmt.Errorf("mongodb: cancel: %w", err)
	}
	return res.DeletedCount > 0, nil
}

// NextDueOutgoing returns when the earliest message of transport (or of
// none) becomes claimable: the first entry of the claim index.
func (p *Persistence) NextDueOutgoing(ctx context.Context, transport string) (time.Time, bool, error) {
	var m struct {
		AvailableAt time.Time `bson:"available_at"`
	}
	err := p.msgs.FindOne(ctx, bson.D{ofTransport(transport)}, options.FindOne().
		SetSort(byAvailability()).
		SetProjection(bson.D{{Key: fieldAvailableAt, Value: 1}})).Decode(&m)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("mongodb: next due: %w", err)
	}
	return m.AvailableAt, true, nil
}
