package main

import (
	"math"
	"strings"
	"testing"
)

// sampled returns a series of count samples every 10 s whose value at
// sample i is f(i).
func sampled(name string, floor float64, count int, f func(i int) float64) series {
	s := series{name: name, floor: floor}
	for i := range count {
		s.pts = append(s.pts, point{at: at(float64(10 * i)), v: f(i)})
	}
	return s
}

func TestAnalyzeTrendFlagsSteadyGrowth(t *testing.T) {
	t.Parallel()
	// 30 minutes, +1 MiB a minute from 50 MiB: a leak.
	s := sampled("rss", floorRSSMiB, 181, func(i int) float64 { return 50 + float64(i)/6 })
	tr := analyzeTrend(s)
	if !tr.judged || !tr.grows {
		t.Fatalf("trend %+v: want judged and growing", tr)
	}
	if math.Abs(tr.slope-60) > 0.5 || math.Abs(tr.lateSlope-60) > 0.5 {
		t.Errorf("slopes %.2f / %.2f per hour, want 60 / 60", tr.slope, tr.lateSlope)
	}
}

func TestAnalyzeTrendAcceptsGrowthThatLevelsOff(t *testing.T) {
	t.Parallel()
	// An inbox bounded by its retention: rows grow for 5 minutes, then
	// the purge keeps them about level, with a saw-tooth of purges.
	s := sampled("inbox rows", floorRows, 181, func(i int) float64 {
		if i < 30 {
			return float64(i) * 1000
		}
		return 30000 + float64(i%6)*500
	})
	if tr := analyzeTrend(s); !tr.judged || tr.grows {
		t.Errorf("trend %+v: want judged, levelling off", tr)
	}
}

func TestAnalyzeTrendIgnoresNoiseBelowTheFloor(t *testing.T) {
	t.Parallel()
	// Goroutines 20 → 35 over 30 minutes: more than 10% but under the
	// floor of 25.
	s := sampled("goroutines", floorGoroutines, 181, func(i int) float64 { return 20 + float64(i)/12 })
	if tr := analyzeTrend(s); tr.grows {
		t.Errorf("trend %+v: want no growth verdict under the floor", tr)
	}
}

func TestAnalyzeTrendJudgesNoShortSeries(t *testing.T) {
	t.Parallel()
	// A worker killed a minute after it started.
	s := sampled("rss", floorRSSMiB, 6, func(i int) float64 { return float64(100 * i) })
	if tr := analyzeTrend(s); tr.judged || tr.grows {
		t.Errorf("trend %+v: want no verdict", tr)
	}
	var b strings.Builder
	if printTrends(&b, []series{s}) || !strings.Contains(b.String(), "too short to judge") {
		t.Errorf("printTrends: %s", b.String())
	}
}
