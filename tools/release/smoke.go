package main

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed testdata/smokeapp/main.go
var smokeApp []byte

// notLibrary tells the modules of the set that users do not import: the
// smoke app needs no import of them.
func notLibrary(m module) bool {
	switch {
	case m.dir == "bench", m.dir == "e2e", m.dir == "cmd/postbus", m.dir == "tools/release":
		return true
	}
	return strings.HasPrefix(m.dir, "examples/")
}

// smokeImports lists the import paths of the smoke app.
func smokeImports() ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", smokeApp, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// releaseCheck builds the proxy folder in a temporary folder outside the
// repository and uses it as a user would: a fresh app gets the core and
// every library module at VERSION, builds, vets and runs a program that
// uses each of them, and `go install` installs the CLI, whose help and
// version run.
func releaseCheck(ctx context.Context, r *repo, log io.Writer) error {
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(log, "release-check: %5.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	tmp, err := os.MkdirTemp("", "postbus-release-check-")
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(tmp)
	defer exec.Command("chmod", "-R", "u+w", tmp).Run() // the module cache is read-only
	proxy, app, bin := filepath.Join(tmp, "proxy"), filepath.Join(tmp, "app"), filepath.Join(tmp, "bin")
	for _, d := range []string{proxy, app, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("release: %w", err)
		}
	}
	if err := buildProxy(r, proxy, log); err != nil {
		return err
	}
	step("module proxy folder with %d modules at %s", len(r.modules), r.version)

	env, err := userEnv(r, proxy, tmp, bin)
	if err != nil {
		return err
	}
	goCmd := func(dir string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("release-check: go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	imports, err := smokeImports()
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	get := []string{"get"}
	for _, m := range r.modules {
		if !notLibrary(m) {
			get = append(get, m.path+"@"+r.version)
		}
	}
	if _, err := goCmd(app, "mod", "init", "example.com/postbusapp"); err != nil {
		return err
	}
	if err := seedSums(r, filepath.Join(app, "go.sum")); err != nil {
		return err
	}
	if _, err := goCmd(app, get...); err != nil {
		return err
	}
	step("go get %d modules at %s into a fresh app", len(get)-1, r.version)
	if err := os.WriteFile(filepath.Join(app, "main.go"), smokeApp, 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if _, err := goCmd(app, "mod", "tidy"); err != nil {
		return err
	}
	if _, err := goCmd(app, "build", "-o", filepath.Join(bin, "postbusapp"), "."); err != nil {
		return err
	}
	if _, err := goCmd(app, "vet", "./..."); err != nil {
		return err
	}
	step("built and vetted an app importing %d packages", len(imports))
	out, err := goCmd(app, "run", ".") // run through go: same env, same build
	if err != nil {
		return err
	}
	if !strings.Contains(out, "delivered: ") {
		return fmt.Errorf("release-check: the app delivered nothing:\n%s", out)
	}
	step("the app ran: %s", lastLine(out, "delivered: "))

	if _, err := goCmd(tmp, "install", r.prefix+"/cmd/postbus@"+r.version); err != nil {
		return err
	}
	cli := filepath.Join(bin, "postbus")
	help, err := runOut(ctx, env, cli, "help")
	if err != nil || !strings.Contains(help, "Usage:") {
		return fmt.Errorf("release-check: the installed postbus help: %v\n%s", err, help)
	}
	version, err := runOut(ctx, env, cli, "version")
	if err != nil || !strings.Contains(version, r.version) {
		return fmt.Errorf("release-check: the installed postbus version does not say %s: %v\n%s", r.version, err, version)
	}
	step("go install %s/cmd/postbus@%s: %s", r.prefix, r.version, strings.TrimSpace(version))
	step("passed")
	return nil
}

// userEnv is the environment of a user outside the repository whose proxy
// serves the set from the proxy folder: no workspace, a module cache of its
// own (a shared cache would keep an earlier build of the same version),
// the set exempt from the checksum database, which has never seen it.
// Third-party modules come from the developer's module cache when it has
// them, else from the configured proxy.
func userEnv(r *repo, proxy, tmp, bin string) ([]string, error) {
	goproxy, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("release: go env GOPROXY: %w", err)
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("release: go env GOMODCACHE: %w", err)
	}
	chain := []string{"file://" + filepath.ToSlash(proxy)}
	if cache := filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download"); dirExists(cache) {
		chain = append(chain, "file://"+filepath.ToSlash(cache))
		// The checksum database's tiles the developer already has: each
		// lookup through the proxy otherwise costs a round trip.
		if sumdb := filepath.Join(cache, "sumdb"); dirExists(sumdb) {
			_ = os.CopyFS(filepath.Join(tmp, "modcache", "cache", "download", "sumdb"), os.DirFS(sumdb))
		}
	}
	if p := strings.TrimSpace(string(goproxy)); p != "" && p != "off" {
		chain = append(chain, p)
	}
	set := map[string]string{
		"GOWORK":      "off",
		"GOFLAGS":     "-mod=mod",
		"GOPROXY":     strings.Join(chain, ","),
		"GONOSUMDB":   r.prefix,
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOMODCACHE":  filepath.Join(tmp, "modcache"),
		"GOPATH":      filepath.Join(tmp, "gopath"),
		"GOBIN":       bin,
		"GOTOOLCHAIN": "local",
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env, nil
}

// seedSums starts the app's go.sum with the third-party checksums the
// repository already holds (its go.sum files and go.work.sum): they were
// checked when they were added, and each one the Go command finds there
// saves a checksum-database lookup. go mod tidy drops the ones the app
// does not need.
func seedSums(r *repo, name string) error {
	seen := map[string]bool{}
	var lines []string
	sums := []string{filepath.Join(r.root, "go.work.sum")}
	for _, m := range r.modules {
		sums = append(sums, filepath.Join(filepath.Dir(m.gomod), "go.sum"))
	}
	for _, f := range sums {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if fields := strings.Fields(line); len(fields) == 3 && !r.ours(fields[0]) && !seen[line] {
				seen[line] = true
				lines = append(lines, line)
			}
		}
	}
	slices.Sort(lines)
	if err := os.WriteFile(name, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

func runOut(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func lastLine(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}
