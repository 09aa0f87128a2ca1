// Command release checks, builds and versions the modules of this
// repository as one set, all at the version in VERSION:
//
//	release check           the go.mod files are releasable (no replace, every requirement of the set at VERSION)
//	release proxy DIR       check, then write a module proxy folder with every module at VERSION
//	release release-check   proxy, then a fresh app outside the repository gets, builds, vets and runs every module, and go install builds the CLI
//	release tidy [DIR...]   go mod tidy in every module, the set served from a proxy folder of the working tree
//	release bump vX.Y.Z     set VERSION and every requirement of the set to vX.Y.Z
//	release tags            the git tags a release of VERSION needs, one per module
//	release apidiff [REF]   exported API changes of each module since REF (default: the last release) and the bump they need
//	release dist DIR        the postbus CLI as archives for linux, darwin and windows on amd64 and arm64
//
// It runs from anywhere inside the repository (it finds go.work).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

const usage = `usage: release check | proxy DIR | release-check | tidy [DIR...] | bump vX.Y.Z | tags | apidiff [REF] | dist DIR`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", usage)
	}
	root, err := findRoot(".")
	if err != nil {
		return err
	}
	r, err := loadRepo(root)
	if err != nil {
		return err
	}
	switch cmd, rest := args[0], args[1:]; {
	case cmd == "check" && len(rest) == 0:
		return checkModules(r)
	case cmd == "bump" && len(rest) == 1:
		if err := bump(r, rest[0]); err != nil {
			return err
		}
		fmt.Printf("VERSION and every requirement of the set are now %s\n", rest[0])
		return nil
	case cmd == "proxy" && len(rest) == 1:
		return buildProxy(r, rest[0], os.Stderr)
	case cmd == "release-check" && len(rest) == 0:
		return releaseCheck(ctx, r, os.Stderr)
	case cmd == "apidiff" && len(rest) <= 1:
		ref := ""
		if len(rest) == 1 {
			ref = rest[0]
		}
		return apiDiff(ctx, r, ref, os.Stdout)
	case cmd == "dist" && len(rest) == 1:
		return dist(ctx, r, rest[0], os.Stderr)
	case cmd == "tidy":
		return tidy(ctx, r, rest, os.Stderr)
	case cmd == "tags" && len(rest) == 0:
		for _, m := range r.modules {
			fmt.Println(m.tagPrefix() + r.version)
		}
		return nil
	default:
		return fmt.Errorf("%s", usage)
	}
}
