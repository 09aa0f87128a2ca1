package kafka_test

import (
	"testing"

	"github.com/postbus/bus"
	"github.com/postbus/bus/internal/drivertest"
	"github.com/postbus/bus/kafka"
)

// The typed errors of a real invalid option and name: errors.As finds
// them, errors.Is matches the sentinels, and the text is Kafka's.
func TestTypedErrors(t *testing.T) {
	t.Parallel()
	_, err := kafka.New([]string{"127.0.0.1:9092"}, kafka.Options{Partitions: -1})
	oe := drivertest.TypedError[*kafka.OptionsError](t, err, kafka.ErrInvalidOptions, "kafka: invalid options: Partitions: must be positive")
	if oe != nil && oe.Field != "Partitions" {
		t.Errorf("Field %q", oe.Field)
	}
	tr, err := kafka.New([]string{"127.0.0.1:9092"}, kafka.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(t.Context())
	err = tr.Send(t.Context(), "", &bus.Envelope{ID: "x", Type: "a.B"})
	drivertest.TypedError[*kafka.NameError](t, err, kafka.ErrInvalidName, `kafka: invalid queue "": must not be empty`)
}
