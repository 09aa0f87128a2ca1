package main

import (
	"errors"
	"strings"

	"github.com/robfig/cron/v3"

	"github.com/postbus/bus"
)

// parseSchedule reads the text of a schedule made at runtime, as the
// CLI's buses do (bus.Config.ParseSchedule): "@every <duration>" with
// bus.ParseEvery (ticks at multiples of the duration since the Unix epoch,
// as bus.Every), anything else as a standard cron spec (robfig/cron's
// ParseStandard: five fields or a descriptor such as @daily) that names
// its time zone with CRON_TZ= or TZ=, since the CLI may run in another
// zone than the services.
func parseSchedule(text string) (bus.Schedule, error) {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "@every ") {
		return bus.ParseEvery(t)
	}
	if !strings.HasPrefix(t, "CRON_TZ=") && !strings.HasPrefix(t, "TZ=") {
		return nil, errors.New(`want "@every <duration>" or a cron spec that names its time zone, such as "CRON_TZ=Europe/Berlin 0 9 * * 1-5"`)
	}
	s, err := cron.ParseStandard(t)
	if err != nil {
		return nil, err
	}
	return s, nil
}
