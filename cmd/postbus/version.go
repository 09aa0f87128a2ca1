package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version and commit are set at link time by the release archives
// (make dist: -ldflags "-X main.version=v0.3.0 -X main.commit=abc1234").
// A binary installed with `go install .../cmd/postbus@v0.3.0` has neither
// and takes its version from its build information.
var (
	version string
	commit  string
)

// versionText is the line "postbus version" prints: the version, then in
// parentheses what the build knows of its source and the platform. The
// version is the linker's, else the build information's module version
// (v0.3.0 for `go install pkg@v0.3.0`, a pseudo-version for a build in a
// clone), else "(devel)". The commit is the linker's, else the build's VCS
// fields: vcs.revision, vcs.time and vcs.modified ("modified"), each where
// the build has it; a module installed from a proxy has none, and then no
// commit is printed. info is nil when the binary has no build information.
func versionText(linkVersion, linkCommit string, info *debug.BuildInfo, platform string) string {
	v := linkVersion
	if v == "" && info != nil && info.Main.Version != "" {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	var source []string
	if linkCommit != "" {
		source = append(source, "commit "+linkCommit)
	} else if info != nil {
		var rev, at string
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			source = append(source, "commit "+rev)
		}
		if at != "" {
			source = append(source, at)
		}
		if modified {
			source = append(source, "modified")
		}
	}
	if len(source) == 0 {
		return fmt.Sprintf("postbus %s (%s)", v, platform)
	}
	return fmt.Sprintf("postbus %s (%s; %s)", v, strings.Join(source, ", "), platform)
}

// versionCmd prints the version, what the build knows of its source and
// the Go toolchain and platform.
func (a *app) versionCmd(args []string) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprintln(a.stdout, "Usage: postbus version\n\nPrints the version of this binary and, where its build recorded them, its commit, commit time and whether the tree was modified.")
			return errHelp
		}
		return usagef("version takes no arguments")
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	platform := fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintln(a.stdout, versionText(version, commit, info, platform))
	return nil
}
