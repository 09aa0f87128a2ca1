package main

import (
	"fmt"
	"go/types"
	"sort"
	"strings"

	"golang.org/x/exp/apidiff"
)

// A move is a defined type that left package from for package to of the
// same module, and that from still names by an alias of the same name
// (type Envelope = backend.Envelope). Code that names it by its old name
// still builds, but apidiff, which compares package by package, reports
// the type and everything that mentions it as changed.
type move struct {
	from, to *types.Package // the new world's packages
	name     string
}

// findMoves returns the moves from the old packages to the new ones.
func findMoves(oldPkgs, newPkgs []*types.Package) []move {
	olds := map[string]*types.Package{}
	for _, p := range oldPkgs {
		olds[p.Path()] = p
	}
	news := map[string]*types.Package{}
	for _, p := range newPkgs {
		news[p.Path()] = p
	}
	var moves []move
	for _, p := range newPkgs {
		old := olds[p.Path()]
		if old == nil {
			continue
		}
		for _, name := range p.Scope().Names() {
			tn, ok := p.Scope().Lookup(name).(*types.TypeName)
			if !ok || !tn.Exported() || !tn.IsAlias() {
				continue
			}
			target, ok := types.Unalias(tn.Type()).(*types.Named)
			if !ok || target.Obj().Name() != name || target.Obj().Pkg() == nil || news[target.Obj().Pkg().Path()] == nil {
				continue
			}
			was, ok := old.Scope().Lookup(name).(*types.TypeName)
			if !ok || was.IsAlias() {
				continue
			}
			moves = append(moves, move{from: p, to: target.Obj().Pkg(), name: name})
		}
	}
	return moves
}

// checkMoves compares each moved type, as it was in its old package, with
// the type it became in its new one, and returns the incompatible changes
// found: a moved type must keep its fields and methods.
func checkMoves(oldPkgs []*types.Package, moves []move) []apidiff.Change {
	olds := map[string]*types.Package{}
	for _, p := range oldPkgs {
		olds[p.Path()] = p
	}
	type pair struct{ from, to string }
	names := map[pair]map[string]bool{}
	tos := map[pair]*types.Package{}
	for _, m := range moves {
		k := pair{m.from.Path(), m.to.Path()}
		if names[k] == nil {
			names[k] = map[string]bool{}
		}
		names[k][m.name] = true
		tos[k] = m.to
	}
	keys := make([]pair, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].from+keys[i].to < keys[j].from+keys[j].to })
	var bad []apidiff.Change
	for _, k := range keys {
		for _, c := range apidiff.Changes(olds[k.from], tos[k]).Changes {
			if !c.Compatible && names[k][subject(c.Message)] {
				c.Message = fmt.Sprintf("%s (moved from %s to %s)", c.Message, k.from, k.to)
				bad = append(bad, c)
			}
		}
	}
	return bad
}

// subject is the type an apidiff message is about: "Envelope" for
// "Envelope: changed", "Envelope.Body: removed" and "(*Envelope).Clone:
// removed".
func subject(msg string) string {
	s, _, _ := strings.Cut(msg, ":")
	s = strings.TrimPrefix(s, "(*")
	s = strings.TrimPrefix(s, "(")
	s, _, _ = strings.Cut(s, ".")
	s, _, _ = strings.Cut(s, ")")
	return s
}

// explainedByMoves reports whether an incompatible change of the report
// is only the work of the moves: its old and new forms read the same
// once each moved type is written by the name it had.
func explainedByMoves(msg string, moves []move) bool {
	_, change, ok := strings.Cut(msg, ": changed from ")
	if !ok {
		return false
	}
	for _, m := range moves {
		change = strings.ReplaceAll(change, m.to.Path()+"."+m.name, m.name)
		change = strings.ReplaceAll(change, m.from.Path()+"."+m.name, m.name)
	}
	before, after, ok := strings.Cut(change, " to ")
	return ok && before == after
}

// applyMoves rewrites a module's report for the moves: the changes that
// known, the moves of this module and of those before it (the core comes
// first, and its moves show in the drivers' signatures), alone explain are
// left out, each of this module's moves is one compatible change, and the
// incompatible differences of its moved types themselves are added.
func applyMoves(r apidiff.Report, oldPkgs []*types.Package, moves, known []move) apidiff.Report {
	if len(known) == 0 {
		return r
	}
	var out apidiff.Report
	for _, c := range r.Changes {
		if !c.Compatible && explainedByMoves(c.Message, known) {
			continue
		}
		out.Changes = append(out.Changes, c)
	}
	for _, m := range moves {
		out.Changes = append(out.Changes, apidiff.Change{
			Message:    fmt.Sprintf("%s: moved to %s.%s, aliased", m.name, m.to.Path(), m.name),
			Compatible: true,
		})
	}
	out.Changes = append(out.Changes, checkMoves(oldPkgs, moves)...)
	return out
}
