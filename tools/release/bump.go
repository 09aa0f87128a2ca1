package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"golang.org/x/mod/modfile"
)

// bump sets VERSION and every requirement of a module of the set to
// version, rewriting only the files that change. It leaves replace
// directives alone: the check refuses them.
func bump(r *repo, version string) error {
	if err := checkVersion(version); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	for _, m := range r.modules {
		old, err := os.ReadFile(m.gomod)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		f, err := modfile.Parse(m.gomod, old, nil)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		for _, req := range f.Require {
			if r.ours(req.Mod.Path) && req.Mod.Version != version {
				if err := f.AddRequire(req.Mod.Path, version); err != nil {
					return fmt.Errorf("release: %s: %w", m.gomod, err)
				}
			}
		}
		f.Cleanup()
		data, err := f.Format()
		if err != nil {
			return fmt.Errorf("release: %s: %w", m.gomod, err)
		}
		if !bytes.Equal(data, old) {
			if err := os.WriteFile(m.gomod, data, 0o644); err != nil {
				return fmt.Errorf("release: %w", err)
			}
		}
	}
	if err := bumpWork(r, version); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.root, "VERSION"), []byte(version+"\n"), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// bumpWork points go.work's replace of each module of the set, at version,
// to the module's folder, keeping the file's layout.
func bumpWork(r *repo, version string) error {
	name := filepath.Join(r.root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	out := data
	var missing []module
	for _, m := range r.modules {
		re := regexp.MustCompile(`(?m)^(\s*(?:replace\s+)?` + regexp.QuoteMeta(m.path) + `\s+)v\S+(\s+=>)`)
		if !re.Match(out) {
			missing = append(missing, m)
			continue
		}
		out = re.ReplaceAll(out, []byte("${1}"+version+"${2}"))
	}
	if len(missing) > 0 {
		w, err := modfile.ParseWork(name, out, nil)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		for _, m := range missing {
			if err := w.AddReplace(m.path, version, m.workDir(), ""); err != nil {
				return fmt.Errorf("release: go.work: %w", err)
			}
		}
		w.Cleanup()
		out = modfile.Format(w.Syntax)
	}
	if !bytes.Equal(out, data) {
		if err := os.WriteFile(name, out, 0o644); err != nil {
			return fmt.Errorf("release: %w", err)
		}
	}
	return nil
}
