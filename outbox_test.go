package bus_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/postbus/bus"
)

func TestOutboxOnAPersistenceWithoutItIsRefused(t *testing.T) {
	t.Parallel()
	_, err := bus.New(bus.Config{Endpoint: "orders", Outbox: bus.OutboxConfig{Enabled: true}})
	var ce *bus.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Outbox.Enabled" || !strings.Contains(err.Error(), "postgres.New") {
		t.Fatalf("New with the outbox on the in-memory persistence = %v, want a *ConfigError naming the fix", err)
	}
	if _, err := bus.New(bus.Config{Endpoint: "orders", Outbox: bus.OutboxConfig{Retention: -1}}); !errors.Is(err, bus.ErrInvalidConfig) {
		t.Errorf("negative Outbox.Retention: %v, want ErrInvalidConfig", err)
	}
}
