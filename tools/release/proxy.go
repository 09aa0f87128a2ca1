package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	modpkg "golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// The zips are built from the working tree, not from a commit, so the check
// runs before anything is committed or tagged: each module's files are the
// ones git would commit (tracked files still present, and untracked files
// that no .gitignore excludes), which keeps build outputs out. What the
// module zip format itself leaves out of that list is reported: files in
// another module of the set are expected; files in a nested module that is
// not released are a note; files in vendor/, symbolic links, irregular
// files and invalid names fail the build, as they would be missing from
// the release without anyone noticing.

// buildProxy checks the set and writes a module proxy folder with every
// module of the set at VERSION: <path>/@v/list, VERSION.info, .mod, .zip.
// Notes (what is not in a zip, uncommitted changes) go to log.
func buildProxy(r *repo, dir string, log io.Writer) error {
	if err := checkModules(r); err != nil {
		return err
	}
	when, err := commitTime(r.root)
	if err != nil {
		return err
	}
	var problems []string
	for _, m := range r.modules {
		files, err := moduleFiles(r.root, m.dir)
		if err != nil {
			return err
		}
		cf, err := zip.CheckFiles(files)
		if err != nil {
			return fmt.Errorf("release: %s: %w", m.dir, err)
		}
		problems = append(problems, r.reportOmitted(m, cf, log)...)
		if len(problems) > 0 {
			continue
		}
		if err := writeModule(dir, m, r.version, when, files); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return &problemsError{problems: problems}
	}
	if changed, err := gitOutput(r.root, "status", "--porcelain", "--untracked-files=all"); err == nil && strings.TrimSpace(changed) != "" {
		n := len(strings.Split(strings.TrimSpace(changed), "\n"))
		fmt.Fprintf(log, "release: note: the zips hold the working tree, which differs from the last commit in %d files; commit them before tagging\n", n)
	}
	return nil
}

// reportOmitted notes or refuses the files of m that its zip leaves out.
func (r *repo) reportOmitted(m module, cf zip.CheckedFiles, log io.Writer) []string {
	var problems []string
	nested := map[string]int{} // nested module folders not in the set: files left out
	for _, fe := range cf.Omitted {
		if fe.Err.Error() == "file is in another module" {
			if sub := r.nestedModule(m, fe.Path); sub != "" {
				nested[sub]++
			}
			continue
		}
		problems = append(problems, fmt.Sprintf("%s: %s is left out of the module zip: %v", m.dir, fe.Path, fe.Err))
	}
	for _, fe := range cf.Invalid {
		problems = append(problems, fmt.Sprintf("%s: %s cannot be in a module zip: %v", m.dir, fe.Path, fe.Err))
	}
	if cf.SizeError != nil {
		problems = append(problems, fmt.Sprintf("%s: %v", m.dir, cf.SizeError))
	}
	subs := make([]string, 0, len(nested))
	for sub := range nested {
		subs = append(subs, sub)
	}
	sort.Strings(subs)
	for _, sub := range subs {
		fmt.Fprintf(log, "release: note: %s holds the module %s, which is not in go.work: its %d files are in no release\n", m.dir, sub, nested[sub])
	}
	return problems
}

// nestedModule is the folder (from the repository root) of the module
// nested in m that holds file, or "" when that module is one of the set.
// The outermost nested module is the one that takes the file out of m.
func (r *repo) nestedModule(m module, file string) string {
	outer := ""
	for dir := path.Dir(file); dir != "."; dir = path.Dir(dir) {
		full := path.Join(m.dir, dir)
		if _, err := os.Stat(filepath.Join(r.root, filepath.FromSlash(full), "go.mod")); err == nil {
			outer = full
		}
	}
	if _, ok := r.moduleIn(outer); ok || outer == "" {
		return ""
	}
	return outer
}

// diskFile is a file of the working tree, as zip.Create takes it.
type diskFile struct {
	rel  string // slash path inside the module
	abs  string
	info fs.FileInfo
}

func (f diskFile) Path() string                 { return f.rel }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

// moduleFiles lists the files git would commit under the module folder.
func moduleFiles(root, dir string) ([]zip.File, error) {
	out, err := gitOutput(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", dir)
	if err != nil {
		return nil, err
	}
	var files []zip.File
	seen := map[string]bool{}
	for _, p := range strings.Split(out, "\x00") {
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		abs := filepath.Join(root, filepath.FromSlash(p))
		info, err := os.Lstat(abs)
		if err != nil {
			continue // deleted in the working tree: not part of it
		}
		rel := p
		if dir != "." {
			rel = strings.TrimPrefix(p, dir+"/")
		}
		files = append(files, diskFile{rel: rel, abs: abs, info: info})
	}
	return files, nil
}

// writeModule writes one module's files into the proxy folder.
func writeModule(dir string, m module, version string, when time.Time, files []zip.File) error {
	esc, err := modpkg.EscapePath(m.path)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	var zbuf bytes.Buffer
	if err := zip.Create(&zbuf, modpkg.Version{Path: m.path, Version: version}, files); err != nil {
		return fmt.Errorf("release: %s: %w", m.dir, err)
	}
	gomod, err := os.ReadFile(m.gomod)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when.UTC()})
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	for name, data := range map[string][]byte{
		version + ".zip":  zbuf.Bytes(),
		version + ".mod":  gomod,
		version + ".info": info,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return fmt.Errorf("release: %w", err)
		}
	}
	return nil
}

// commitTime is the time of the last commit, the modules' release time.
func commitTime(root string) (time.Time, error) {
	out, err := gitOutput(root, "log", "-1", "--format=%cI")
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(out))
	if err != nil {
		return time.Time{}, fmt.Errorf("release: commit time: %w", err)
	}
	return t, nil
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("release: git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func modVersion(path, version string) modpkg.Version {
	return modpkg.Version{Path: path, Version: version}
}
