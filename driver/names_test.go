package driver_test

import (
	"strings"
	"testing"

	"github.com/postbus/bus/driver"
)

func TestTokenEscape(t *testing.T) {
	t.Parallel()
	var tok driver.Token
	for in, want := range map[string]string{
		"billing":                           "billing",
		"github.com/acme/sales.OrderPlaced": "github_2Ecom_2Facme_2Fsales_2EOrderPlaced",
		"a_b":                               "a__b",
		"東":                                 "_E6_9D_B1",
	} {
		if got := tok.Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"a.b", "_", "_4", "_ZZ", "_2e"} {
		if _, err := tok.Unescape(bad); err == nil {
			t.Errorf("Unescape(%q): no error", bad)
		}
	}
}

func TestFit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 300)
	for _, c := range []struct {
		s, name     string
		limit, hash int
		wantLen     int
	}{
		{"short", "short", 10, 16, 5},
		{long, long, 249, 16, 249},
		{long, long, 10, 16, 17}, // no room for a start: the hash alone
	} {
		got := driver.Fit(c.s, c.name, c.limit, c.hash)
		if len(got) != c.wantLen {
			t.Errorf("Fit(%d bytes, %d, %d) = %q (%d bytes), want %d", len(c.s), c.limit, c.hash, got, len(got), c.wantLen)
		}
	}
	a, b := driver.Fit(long+"x", long+"x", 100, 16), driver.Fit(long+"y", long+"y", 100, 16)
	if a == b || a[:83] != b[:83] {
		t.Errorf("names that differ past the cut: %q and %q", a, b)
	}
	if got := driver.Fit(long, long, 100, 16); got != driver.Fit(long, long, 100, 16) || !strings.HasSuffix(got, "-"+driver.Hash(long, 16)) {
		t.Errorf("Fit is not stable: %q", got)
	}
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	allowed := func(c byte) bool { return driver.TokenByte(c) || c == '_' }
	long := strings.Repeat("a", 100)
	for _, c := range []struct {
		in, want string
		limit    int
	}{
		{"billing", "billing", 80},
		{"", "-" + driver.Hash("", 10), 80},
		{"a.b", "a_b-" + driver.Hash("a.b", 10), 80},
		{long, long[:69] + "-" + driver.Hash(long, 10), 80},
	} {
		if got := driver.Sanitize(c.in, allowed, c.limit, 10); got != c.want {
			t.Errorf("Sanitize(%q, %d) = %q, want %q", c.in, c.limit, got, c.want)
		}
	}
	if a, b := driver.Sanitize("a.b", allowed, 80, 10), driver.Sanitize("a/b", allowed, 80, 10); a == b {
		t.Errorf("a.b and a/b both map to %q", a)
	}
}
