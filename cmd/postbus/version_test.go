package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// The version line: a binary installed with `go install
// .../cmd/postbus@v0.3.0` knows its version only from its build
// information, which has no VCS fields; a build in a clone has the VCS
// fields; release archives set version and commit at link time, which win.
func TestVersionText(t *testing.T) {
	t.Parallel()
	const platform = "go1.26.8 linux/amd64"
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/postbus/bus/cmd/postbus", Version: "v0.3.0"}}
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	clone := &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1-0.20261201100000-0123456789ab+dirty"}, Settings: vcs}
	cleanClone := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "false"}}}
	for _, tc := range []struct {
		name                string
		linkVersion, commit string
		info                *debug.BuildInfo
		want                string
	}{
		{"go install @version", "", "", installed, "postbus v0.3.0 (go1.26.8 linux/amd64)"},
		{"release archive", "v0.3.1", "abc1234", installed, "postbus v0.3.1 (commit abc1234; go1.26.8 linux/amd64)"},
		{"built in a clone", "", "", clone,
			"postbus v0.3.1-0.20261201100000-0123456789ab+dirty (commit 0123456789abcdef0123456789abcdef01234567, 2026-12-01T10:00:00Z, modified; go1.26.8 linux/amd64)"},
		{"clean clone without a time", "", "", cleanClone, "postbus (devel) (commit 0123456789abcdef0123456789abcdef01234567; go1.26.8 linux/amd64)"},
		{"no build info", "", "", nil, "postbus (devel) (go1.26.8 linux/amd64)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionText(tc.linkVersion, tc.commit, tc.info, platform); got != tc.want {
				t.Fatalf("versionText =\n%q, want\n%q", got, tc.want)
			}
		})
	}
}

func TestVersionCommandPrintsVersionAndCommit(t *testing.T) {
	t.Parallel()
	r := runApp(t, nil, nil, "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "postbus ") || !strings.Contains(r.stdout, runtime.Version()) {
		t.Fatalf("postbus version: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runApp(t, nil, nil, "version", "extra"); r.code != exitUsage {
		t.Fatalf("postbus version extra: code %d, want %d", r.code, exitUsage)
	}
	if r := runApp(t, nil, nil, "help"); !strings.Contains(r.stdout, "postbus version") {
		t.Fatalf("help does not list the version command:\n%s", r.stdout)
	}
}
