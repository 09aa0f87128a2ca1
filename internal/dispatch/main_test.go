package dispatch

import (
	"testing"

	"github.com/postbus/bus/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
