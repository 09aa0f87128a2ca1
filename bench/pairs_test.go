package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/postbus/bus/bustest"
)

// TestPairsTable prints the table of a results file of three pairs, one
// run failed without a result and one with a duplicate: each build's
// median is over its runs that passed, the session CPU is per message,
// the WAL records are the run's own WAL less its full-page images, and the
// failed runs show.
func TestPairsTable(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			bustest.SkipOutsideCI(t, "pairs.sh needs %s: %v", tool, err)
		}
	}
	out, err := exec.CommandContext(t.Context(), "bash", "pairs.sh", "-table", "testdata/pairs.jsonl").CombinedOutput()
	if err != nil {
		t.Fatalf("pairs.sh -table: %v\n%s", err, out)
	}
	for _, want := range []string{
		"bench flags: `-workload burst -n 100`",
		"- A: tree /src/before",
		"| 1A | 1.00 1.00 1.00 | 1000 | 10 | 20 | 40 | 30 | 1600 | 1500 | 1200 | 0, 0, 0 |",
		"| 2B | 1.30 1.00 1.00 | failed (exit 2): bench: connect: refused |||||||||",
		"| 3B | 1.50 1.00 1.00 | 4000 | 7 | 10 | 30 | 20 | 600 | – | – | 0, 1, 0 (exit 1) |",
		// A: rates 1000, 3000, 2000; session CPU 30, 50 and none (an
		// even count averages the middle two).
		"| median A (3 runs) |  | 2000 | 20 | 25 | 50 | 40 | 1700 | 1600 | 1200 |  |",
		// B: the run that failed and the one with a duplicate left out.
		"| median B (1 runs) |  | 2000 | 5 | 20 | 20 | 10 | 400 | 300 | 300 |  |",
		"| B ÷ A |  | 1 | 0.25 | 0.8 | 0.4 | 0.25 | 0.235 | 0.188 | 0.25 |  |",
	} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
