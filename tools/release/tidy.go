package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// tidy runs `go mod tidy` in every module of the set as a user's build
// sees it: outside the workspace, the other modules of the set at VERSION
// served from a proxy folder built from the working tree (no proxy has the
// version before it is tagged). The checksums of the set's own modules are
// then dropped from each go.sum: they hash an unpublished working tree, and
// builds in the workspace never read them.
// With dirs, only the modules in those folders are tidied.
func tidy(ctx context.Context, r *repo, dirs []string, log io.Writer) error {
	mods := r.modules
	if len(dirs) > 0 {
		mods = nil
		for _, d := range dirs {
			m, ok := r.moduleIn(filepath.ToSlash(filepath.Clean(d)))
			if !ok {
				return fmt.Errorf("release: %s is not a module folder of go.work", d)
			}
			mods = append(mods, m)
		}
	}
	tmp, err := os.MkdirTemp("", "postbus-tidy-")
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(tmp)
	defer exec.Command("chmod", "-R", "u+w", tmp).Run() // the module cache is read-only
	proxy := filepath.Join(tmp, "proxy")
	if err := buildProxy(r, proxy, log); err != nil {
		return err
	}
	env, err := userEnv(r, proxy, tmp, filepath.Join(tmp, "bin"))
	if err != nil {
		return err
	}
	env = append(env, "GOFLAGS=") // the last value of a variable wins
	for _, m := range mods {
		fmt.Fprintf(log, "== go mod tidy %s\n", m.dir)
		cmd := exec.CommandContext(ctx, "go", "mod", "tidy")
		cmd.Dir = filepath.Join(r.root, filepath.FromSlash(m.dir))
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("release: go mod tidy in %s: %w\n%s", m.dir, err, out)
		}
		if err := dropOwnSums(r, filepath.Join(cmd.Dir, "go.sum")); err != nil {
			return err
		}
	}
	return nil
}

// dropOwnSums removes the lines of the set's modules from a go.sum.
func dropOwnSums(r *repo, name string) error {
	data, err := os.ReadFile(name)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	var keep []string
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 0 && r.ours(f[0]) {
			continue
		}
		keep = append(keep, line)
	}
	out := strings.Join(keep, "")
	if out == "" {
		return os.Remove(name) // only the set's own sums: no go.sum, as before
	}
	if out != string(data) {
		return os.WriteFile(name, []byte(out), 0o644)
	}
	return nil
}
