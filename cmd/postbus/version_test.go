package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// A binary installed with `go install .../cmd/postbus@v0.3.0` knows its
// version only from its build information; release archives set version
// and commit at link time, which win.
func TestVersionComesFromBuildInfoOrLinkerFlags(t *testing.T) {
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/postbus/bus/cmd/postbus", Version: "v0.3.0"}}
	fromVCS := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name                string
		linkVersion, commit string
		info                *debug.BuildInfo
		ok                  bool
		wantV, wantC        string
	}{
		{"go install @version", "", "", installed, true, "v0.3.0", "unknown"},
		{"release archive", "v0.3.1", "abc1234", installed, true, "v0.3.1", "abc1234"},
		{"built in a clone", "", "", fromVCS, true, "(devel)", "0123456789ab-dirty"},
		{"no build info", "", "", nil, false, "(devel)", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, c := buildVersion(tc.linkVersion, tc.commit, tc.info, tc.ok)
			if v != tc.wantV || c != tc.wantC {
				t.Fatalf("buildVersion = %q, %q; want %q, %q", v, c, tc.wantV, tc.wantC)
			}
		})
	}
}

func TestVersionCommandPrintsVersionAndCommit(t *testing.T) {
	t.Parallel()
	r := runApp(t, nil, nil, "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "postbus ") || !strings.Contains(r.stdout, "commit ") {
		t.Fatalf("postbus version: code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := runApp(t, nil, nil, "version", "extra"); r.code != exitUsage {
		t.Fatalf("postbus version extra: code %d, want %d", r.code, exitUsage)
	}
	if r := runApp(t, nil, nil, "help"); !strings.Contains(r.stdout, "postbus version") {
		t.Fatalf("help does not list the version command:\n%s", r.stdout)
	}
}
