package main

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"

	"golang.org/x/exp/apidiff"
)

// world type-checks packages given as path -> source, in order, each able
// to import those before it.
func world(t *testing.T, srcs ...[2]string) []*types.Package {
	t.Helper()
	fset := token.NewFileSet()
	done := map[string]*types.Package{}
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p := done[path]; p != nil {
			return p, nil
		}
		return importer.Default().Import(path)
	})
	var out []*types.Package
	for _, s := range srcs {
		f, err := parser.ParseFile(fset, s[0]+".go", s[1], 0)
		if err != nil {
			t.Fatal(err)
		}
		p, err := (&types.Config{Importer: imp}).Check(s[0], fset, []*ast.File{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		done[s[0]] = p
		out = append(out, p)
	}
	return out
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// report is what apiDiff prints for the core module m/core and a driver
// module m/driver that uses it.
func report(oldPkgs, newPkgs []*types.Package) string {
	var b strings.Builder
	var known []move
	split := func(ps []*types.Package, driver bool) []*types.Package {
		var out []*types.Package
		for _, p := range ps {
			if strings.HasPrefix(p.Path(), "m/driver") == driver {
				out = append(out, p)
			}
		}
		return out
	}
	for _, driver := range []bool{false, true} {
		o, n := split(oldPkgs, driver), split(newPkgs, driver)
		path := "m"
		if driver {
			path = "m/driver"
		}
		r := apidiff.ModuleChanges(&apidiff.Module{Path: path, Packages: o}, &apidiff.Module{Path: path, Packages: n})
		moves := findMoves(o, n)
		known = append(known, moves...)
		for _, c := range applyMoves(r, o, moves, known).Changes {
			mark := "+"
			if !c.Compatible {
				mark = "!"
			}
			fmt.Fprintf(&b, "%s %s\n", mark, c.Message)
		}
	}
	return b.String()
}

const (
	oldCore   = `package core; type Envelope struct{ ID string; Body []byte }; func (e *Envelope) Clone() *Envelope { return e }; type Transport interface{ Send(*Envelope) error }; func Use(t Transport) {}`
	oldDriver = `package driver; import "m/core"; type T struct{}; func (T) Send(*core.Envelope) error { return nil }; var _ core.Transport = T{}`
	aliases   = `package core; import "m/core/backend"; type Envelope = backend.Envelope; type Transport = backend.Transport; func Use(t Transport) {}`
)

func TestApidiffMovedAndAliasedIsCompatible(t *testing.T) {
	oldPkgs := world(t, [2]string{"m/core", oldCore}, [2]string{"m/driver", oldDriver})
	newPkgs := world(t,
		[2]string{"m/core/backend", `package backend; type Envelope struct{ ID string; Body []byte }; func (e *Envelope) Clone() *Envelope { return e }; type Transport interface{ Send(*Envelope) error }`},
		[2]string{"m/core", aliases},
		[2]string{"m/driver", oldDriver})
	got := report(oldPkgs, newPkgs)
	if strings.Contains(got, "! ") {
		t.Errorf("a type moved and aliased was reported incompatible:\n%s", got)
	}
	for _, want := range []string{"+ Envelope: moved to m/core/backend.Envelope", "+ Transport: moved to m/core/backend.Transport"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report does not say %q:\n%s", want, got)
		}
	}
}

func TestApidiffMovedTypeThatChangedIsIncompatible(t *testing.T) {
	oldPkgs := world(t, [2]string{"m/core", oldCore}, [2]string{"m/driver", oldDriver})
	newPkgs := world(t,
		// The moved Envelope lost Body and Clone.
		[2]string{"m/core/backend", `package backend; type Envelope struct{ ID string }; type Transport interface{ Send(*Envelope) error }`},
		[2]string{"m/core", aliases},
		[2]string{"m/driver", oldDriver})
	got := report(oldPkgs, newPkgs)
	for _, want := range []string{"! Envelope.Body: removed", "! (*Envelope).Clone: removed"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report does not say %q:\n%s", want, got)
		}
	}
}
