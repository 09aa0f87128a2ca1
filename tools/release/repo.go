package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// repo is the repository being released: its root, the version all of its
// modules share, and the modules that go.work joins.
type repo struct {
	root    string   // absolute path of the folder holding go.work
	version string   // the content of VERSION, e.g. v0.3.0
	prefix  string   // the root module's path; every module of the set lives under it
	modules []module // in go.work order, the root module first
	work    *modfile.WorkFile
}

// module is one module of the release set.
type module struct {
	dir   string // slash path relative to the repository root: "." or "postgres"
	path  string // module path
	gomod string // absolute path of its go.mod
	file  *modfile.File
}

// tagPrefix is the prefix of the module's git tags: "" for the root module,
// "postgres/" for a module in postgres/.
func (m module) tagPrefix() string {
	if m.dir == "." {
		return ""
	}
	return m.dir + "/"
}

// findRoot walks up from dir to the folder that holds go.work.
func findRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("release: no go.work in this folder or above it")
		}
		dir = parent
	}
}

// loadRepo reads VERSION, go.work and every go.mod it names.
func loadRepo(root string) (*repo, error) {
	r := &repo{root: root}
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	r.version = strings.TrimSpace(string(v))
	if err := checkVersion(r.version); err != nil {
		return nil, fmt.Errorf("release: VERSION: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	r.work = work
	for _, u := range work.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		gomod := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
		data, err := os.ReadFile(gomod)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		f, err := modfile.Parse(gomod, data, nil)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		if f.Module == nil {
			return nil, fmt.Errorf("release: %s/go.mod: no module line", dir)
		}
		r.modules = append(r.modules, module{dir: dir, path: f.Module.Mod.Path, gomod: gomod, file: f})
	}
	sort.SliceStable(r.modules, func(i, j int) bool { return r.modules[i].dir == "." && r.modules[j].dir != "." })
	if len(r.modules) == 0 || r.modules[0].dir != "." {
		return nil, errors.New("release: go.work does not use the root module (.)")
	}
	r.prefix = r.modules[0].path
	return r, nil
}

// checkVersion accepts a canonical semantic version: v0.3.0, v1.2.3-rc.1.
func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "" {
		return fmt.Errorf("%q is not a version like v0.3.0", v)
	}
	return nil
}

// ours reports whether a module path belongs to this repository.
func (r *repo) ours(modPath string) bool {
	return modPath == r.prefix || strings.HasPrefix(modPath, r.prefix+"/")
}

// module returns the module of the set with that path.
func (r *repo) module(modPath string) (module, bool) {
	for _, m := range r.modules {
		if m.path == modPath {
			return m, true
		}
	}
	return module{}, false
}

// workDir is the folder of a module as go.work names it: "./" or "./postgres".
func (m module) workDir() string {
	if m.dir == "." {
		return "./"
	}
	return "./" + m.dir
}

// moduleIn returns the module of the set in the folder dir.
func (r *repo) moduleIn(dir string) (module, bool) {
	for _, m := range r.modules {
		if m.dir == dir {
			return m, true
		}
	}
	return module{}, false
}
