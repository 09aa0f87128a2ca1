package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are set at link time by the release archives
// (make dist: -ldflags "-X main.version=v0.3.0 -X main.commit=abc1234").
// A binary installed with `go install .../cmd/postbus@v0.3.0` has neither
// and takes its version from its build information.
var (
	version string
	commit  string
)

// buildVersion is the version and commit to print: the linker's, else the
// build information's (the module version of `go install pkg@version`,
// the git revision of a build in a clone), else "(devel)" and "unknown".
func buildVersion(linkVersion, linkCommit string, info *debug.BuildInfo, ok bool) (v, c string) {
	v, c = linkVersion, linkCommit
	if ok && info != nil {
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		if c == "" {
			var modified bool
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					c = s.Value
					if len(c) > 12 {
						c = c[:12]
					}
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if c != "" && modified {
				c += "-dirty"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}

// versionCmd prints the version, the commit and the Go toolchain.
func (a *app) versionCmd(args []string) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
			fmt.Fprintln(a.stdout, "Usage: postbus version\n\nPrints the version and commit of this binary.")
			return errHelp
		}
		return usagef("version takes no arguments")
	}
	info, ok := debug.ReadBuildInfo()
	v, c := buildVersion(version, commit, info, ok)
	fmt.Fprintf(a.stdout, "postbus %s (commit %s, %s %s/%s)\n", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
