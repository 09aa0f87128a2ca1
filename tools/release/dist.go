package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// distTargets are the platforms the CLI is released for.
var distTargets = []struct{ goos, goarch string }{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// dist cross-compiles the postbus CLI from the working tree for every
// target, with the version and commit linked in, and writes one archive
// per target (.tar.gz, .zip for Windows) and checksums.txt into out.
func dist(ctx context.Context, r *repo, out string, log io.Writer) error {
	commit, err := gitOutput(r.root, "rev-parse", "--short=12", "HEAD")
	if err != nil {
		return err
	}
	commit = strings.TrimSpace(commit)
	if st, err := gitOutput(r.root, "status", "--porcelain"); err == nil && strings.TrimSpace(st) != "" {
		commit += "-dirty"
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	build, err := os.MkdirTemp("", "postbus-dist-")
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(build)
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", r.version, commit)
	var sums strings.Builder
	for _, t := range distTargets {
		name := fmt.Sprintf("postbus_%s_%s_%s", strings.TrimPrefix(r.version, "v"), t.goos, t.goarch)
		exe := "postbus"
		if t.goos == "windows" {
			exe += ".exe"
		}
		bin := filepath.Join(build, name, exe)
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, ".")
		cmd.Dir = filepath.Join(r.root, "cmd", "postbus")
		cmd.Env = append(os.Environ(), "GOOS="+t.goos, "GOARCH="+t.goarch, "CGO_ENABLED=0")
		if outp, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("release: build %s/%s: %w\n%s", t.goos, t.goarch, err, outp)
		}
		files := map[string]string{exe: bin, "LICENSE": filepath.Join(r.root, "LICENSE")}
		archive := filepath.Join(out, name+".tar.gz")
		if t.goos == "windows" {
			archive = filepath.Join(out, name+".zip")
			err = writeZip(archive, name, files)
		} else {
			err = writeTarGz(archive, name, files)
		}
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		sum, err := sha256File(archive)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, filepath.Base(archive))
		fmt.Fprintf(log, "dist: %s (%.0fs)\n", archive, time.Since(start).Seconds())
	}
	return os.WriteFile(filepath.Join(out, "checksums.txt"), []byte(sums.String()), 0o644)
}

// archiveNames lists the archive's entries in a fixed order.
func archiveNames(files map[string]string) []string {
	var names []string
	for _, n := range []string{"postbus", "postbus.exe", "LICENSE"} {
		if _, ok := files[n]; ok {
			names = append(names, n)
		}
	}
	return names
}

func writeTarGz(name, dir string, files map[string]string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, n := range archiveNames(files) {
		data, err := os.ReadFile(files[n])
		if err != nil {
			return err
		}
		mode := int64(0o644)
		if n == "postbus" {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: dir + "/" + n, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return f.Close()
}

func writeZip(name, dir string, files map[string]string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, n := range archiveNames(files) {
		data, err := os.ReadFile(files[n])
		if err != nil {
			return err
		}
		w, err := zw.Create(dir + "/" + n)
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func sha256File(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
