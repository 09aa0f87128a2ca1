package main

import (
	"context"
	"fmt"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/packages"
)

// lastRelease is the git ref the API is compared with: the newest version
// tag reachable from HEAD, else the last commit that changed VERSION.
func lastRelease(root string) (string, error) {
	if tag, err := gitOutput(root, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*"); err == nil {
		return strings.TrimSpace(tag), nil
	}
	out, err := gitOutput(root, "log", "-1", "--format=%H", "--", "VERSION")
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(out) == "" {
		return "", fmt.Errorf("release: no version tag and no commit of VERSION: give a git ref")
	}
	return strings.TrimSpace(out), nil
}

// apiDiff prints, for each library module, the exported API changes since
// ref and the version bump they need, and the next version the set needs.
func apiDiff(ctx context.Context, r *repo, ref string, w io.Writer) error {
	if ref == "" {
		var err error
		if ref, err = lastRelease(r.root); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "postbus-apidiff-")
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(tmp)
	// The base tree, whole (its go.work joins its modules as they were).
	archive := exec.CommandContext(ctx, "sh", "-c", `git archive --format=tar "$1" | tar -x -C "$2"`, "sh", ref, tmp)
	archive.Dir = r.root
	if out, err := archive.CombinedOutput(); err != nil {
		return fmt.Errorf("release: git archive %s: %w: %s", ref, err, out)
	}
	baseVersion := r.version
	if v, err := os.ReadFile(filepath.Join(tmp, "VERSION")); err == nil {
		baseVersion = strings.TrimSpace(string(v))
	}
	short, _ := gitOutput(r.root, "rev-parse", "--short", ref)
	fmt.Fprintf(w, "API changes since %s (%s, VERSION %s)\n", ref, strings.TrimSpace(short), baseVersion)

	worst := bumpPatch
	var known []move // types moved within a module, aliased where they were
	for _, m := range r.modules {
		if notLibrary(m) {
			continue
		}
		newPkgs, err := loadAPI(ctx, filepath.Join(r.root, filepath.FromSlash(m.dir)))
		if err != nil {
			return err
		}
		oldDir := filepath.Join(tmp, filepath.FromSlash(m.dir))
		var oldPkgs []*types.Package
		if _, err := os.Stat(filepath.Join(oldDir, "go.mod")); err == nil {
			if oldPkgs, err = loadAPI(ctx, oldDir); err != nil {
				return err
			}
		}
		report := apidiff.ModuleChanges(&apidiff.Module{Path: m.path, Packages: oldPkgs}, &apidiff.Module{Path: m.path, Packages: newPkgs})
		moves := findMoves(oldPkgs, newPkgs)
		known = append(known, moves...)
		report = applyMoves(report, oldPkgs, moves, known)
		need := bumpFor(report, oldPkgs == nil, baseVersion)
		worst = max(worst, need)
		fmt.Fprintf(w, "\n== %s: %s\n", m.path, need)
		for _, c := range report.Changes {
			mark := "+"
			if !c.Compatible {
				mark = "!"
			}
			fmt.Fprintf(w, "  %s %s\n", mark, c.Message)
		}
	}
	fmt.Fprintf(w, "\n(! incompatible, + compatible)\nThe release after %s needs a %s: %s\n", baseVersion, worst, nextVersion(baseVersion, worst))
	return nil
}

// bumpKind is the part of the version a set of changes needs to raise.
type bumpKind int

const (
	bumpPatch bumpKind = iota // no change to the exported API
	bumpMinor                 // additions (or, before v1, any change)
	bumpMajor                 // incompatible changes from v1 on
)

func (b bumpKind) String() string {
	return [...]string{"patch (no exported API change)", "minor version", "major version"}[b]
}

// bumpFor is the bump a module's report needs after version base. Before
// v1, which is where the set is, an incompatible change needs a minor
// version too: the version policy in docs/guide/installing.md.
func bumpFor(r apidiff.Report, added bool, base string) bumpKind {
	for _, c := range r.Changes {
		if !c.Compatible && semver.Major(base) != "v0" {
			return bumpMajor
		}
	}
	if added || len(r.Changes) > 0 {
		return bumpMinor
	}
	return bumpPatch
}

// nextVersion is the version after v that a bump of kind b gives; a major
// change before v1 is a minor one.
func nextVersion(v string, b bumpKind) string {
	var major, minor, patch int
	fmt.Sscanf(semver.Canonical(v), "v%d.%d.%d", &major, &minor, &patch)
	switch {
	case b == bumpMajor && major > 0:
		return fmt.Sprintf("v%d.0.0", major+1)
	case b >= bumpMinor:
		return fmt.Sprintf("v%d.%d.0", major, minor+1)
	default:
		return fmt.Sprintf("v%d.%d.%d", major, minor, patch+1)
	}
}

// loadAPI type-checks the module in dir and returns its importable
// packages: no main, internal or test packages.
func loadAPI(ctx context.Context, dir string) ([]*types.Package, error) {
	cfg := &packages.Config{
		Context: ctx,
		Dir:     dir,
		Mode:    packages.NeedName | packages.NeedTypes | packages.NeedImports | packages.NeedDeps | packages.NeedModule,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, fmt.Errorf("release: load %s: %w", dir, err)
	}
	var out []*types.Package
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("release: load %s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Name == "main" || p.Types == nil || strings.Contains(p.PkgPath, "/internal/") || strings.HasSuffix(p.PkgPath, "/internal") ||
			strings.Contains(p.PkgPath, "/testdata/") || (p.Module != nil && p.Module.Dir != "" && !sameDir(p.Module.Dir, dir)) {
			continue
		}
		out = append(out, p.Types)
	}
	return out, nil
}

func sameDir(a, b string) bool {
	a, _ = filepath.Abs(a)
	b, _ = filepath.Abs(b)
	return filepath.Clean(a) == filepath.Clean(b)
}
