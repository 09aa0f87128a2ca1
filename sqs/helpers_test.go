package sqs_test

import (
	"bytes"
	"fmt"
	"maps"

	"github.com/postbus/bus"
)

// compareEnvelopes describes how got differs from want, or returns "".
func compareEnvelopes(want, got *bus.Envelope) string {
	if got == nil {
		return "not received"
	}
	switch {
	case got.ID != want.ID, got.Type != want.Type, got.Kind != want.Kind, got.ContentType != want.ContentType,
		got.CorrelationID != want.CorrelationID, got.Source != want.Source, got.Destination != want.Destination,
		got.OrderingKey != want.OrderingKey, !got.SentAt.Equal(want.SentAt), !got.DueAt.Equal(want.DueAt),
		!got.ExpiresAt.Equal(want.ExpiresAt):
		return fmt.Sprintf("fields differ:\n got %+v\nwant %+v", got, want)
	case !bytes.Equal(got.Body, want.Body):
		return fmt.Sprintf("body %q, want %q", got.Body, want.Body)
	case !maps.Equal(got.Headers, want.Headers), !maps.Equal(got.Attributes, want.Attributes),
		!maps.Equal(got.StickyAttributes, want.StickyAttributes):
		return fmt.Sprintf("maps differ:\n got %v %v %v\nwant %v %v %v", got.Headers, got.Attributes, got.StickyAttributes,
			want.Headers, want.Attributes, want.StickyAttributes)
	}
	return ""
}
