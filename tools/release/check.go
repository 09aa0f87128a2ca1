package main

import (
	"fmt"
	"path"
	"strings"
)

// problemsError lists every reason the module set cannot be released.
type problemsError struct {
	problems []string
}

func (e *problemsError) Error() string {
	return "release: the modules cannot be released as they are:\n  " + strings.Join(e.problems, "\n  ")
}

// checkModules reports every go.mod of the set that a user's build would
// not accept as released: a replace directive (ignored in a user's build,
// and it makes `go install pkg@version` refuse the module), a requirement of
// another module of the set at a version other than VERSION, or a module
// path that does not match its folder (the Go command finds a nested module
// of a tag only at prefix/folder).
func checkModules(r *repo) error {
	var problems []string
	add := func(m module, format string, args ...any) {
		problems = append(problems, m.dir+"/go.mod: "+fmt.Sprintf(format, args...))
	}
	for _, m := range r.modules {
		want := r.prefix
		if m.dir != "." {
			want = r.prefix + "/" + m.dir
		}
		if m.path != want {
			add(m, "module %s, but a module in %s/ must be %s", m.path, m.dir, want)
		}
		for _, rep := range m.file.Replace {
			target := rep.New.Path
			if rep.New.Version != "" {
				target += " " + rep.New.Version
			}
			old := rep.Old.Path
			if rep.Old.Version != "" {
				old += " " + rep.Old.Version
			}
			add(m, "replace %s => %s: remove it (users' builds ignore replace directives and `go install` refuses them; go.work joins the modules for development)", old, target)
		}
		for _, req := range m.file.Require {
			if !r.ours(req.Mod.Path) {
				continue
			}
			if _, ok := r.module(req.Mod.Path); !ok {
				add(m, "requires %s, which is not a module of go.work", req.Mod.Path)
				continue
			}
			if req.Mod.Version != r.version {
				add(m, "requires %s %s, not VERSION %s (run: make release VERSION=%s)", req.Mod.Path, req.Mod.Version, r.version, r.version)
			}
		}
	}
	// In workspace mode the Go command still reads the go.mod of a
	// required version of a workspace module; a replace of that exact
	// version in go.work points it at the folder, so development never
	// asks a proxy for a version that is not published yet.
	for _, m := range r.modules {
		found := false
		for _, rep := range r.work.Replace {
			if rep.Old.Path == m.path && rep.Old.Version == r.version && rep.New.Version == "" &&
				path.Clean(rep.New.Path) == path.Clean(m.workDir()) {
				found = true
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("go.work: no replace %s %s => %s (run: make release VERSION=%s)", m.path, r.version, m.workDir(), r.version))
		}
	}
	for _, rep := range r.work.Replace {
		if r.ours(rep.Old.Path) && rep.Old.Version != r.version {
			problems = append(problems, fmt.Sprintf("go.work: replace %s %s is not at VERSION %s", rep.Old.Path, rep.Old.Version, r.version))
		}
	}
	if len(problems) > 0 {
		return &problemsError{problems: problems}
	}
	return nil
}
