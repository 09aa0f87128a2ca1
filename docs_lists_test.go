package bus_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The docs name the stores and transports in many places: "the in-memory
// store, PostgreSQL, SQLite, MongoDB and MySQL/MariaDB do". Such lists go
// stale when a driver is added. TestDocsListsNameEveryBackend keeps them
// whole, against the code:
//
//   - A block (lines up to a blank line: a paragraph, a list, a table)
//     preceded by a marker comment is a checked list.
//     <!-- stores: Cap1 Cap2 --> means the block names every store whose
//     persistence asserts bus.Cap1 and bus.Cap2 at compile time
//     (var _ bus.SagaStore = (*Persistence)(nil)); <!-- stores --> every
//     store; <!-- transports: Cap --> and <!-- transports --> the same for
//     transports. The capability "drivers" keeps those with a module of
//     their own: every one but the core's in-memory store or transport.
//   - An unmarked block that names all the stores but one, or all the
//     brokers (the transports other than the in-memory and PostgreSQL
//     ones) but one, is taken for a list that misses one, and fails. A
//     block that only mentions them, and is no list of them, says so with
//     <!-- unlisted -->.
//
// The set of stores and transports comes from the modules of go.work, so
// a new driver makes every marked list that should name it fail until it
// does.

// backendSpelling is how the docs name a store or transport, by the folder
// of its module ("memory": the core's).
var backendSpelling = map[string]*regexp.Regexp{
	"memory":   regexp.MustCompile(`(?i)in-memory|\bin memory\b|\bmemory\b|NewMemory(Persistence|Transport)`),
	"postgres": regexp.MustCompile(`PostgreSQL|Postgres\b|\bpostgres[./]`),
	"sqlite":   regexp.MustCompile(`SQLite|\bsqlite[./]`),
	"mongodb":  regexp.MustCompile(`MongoDB|\bmongodb[./]`),
	"mysql":    regexp.MustCompile(`MySQL|MariaDB|\bmysql[./]`),
	"rabbitmq": regexp.MustCompile(`RabbitMQ|\brabbitmq[./]`),
	"nats":     regexp.MustCompile(`NATS|\bnats[./]`),
	"redis":    regexp.MustCompile(`Redis|\bredis[./]`),
	"kafka":    regexp.MustCompile(`Kafka|\bkafka[./]`),
	"sqs":      regexp.MustCompile(`SQS|\bsqs[./]`),
}

// unlistedFiles hold dated records, kept as they were written.
var unlistedFiles = []string{"docs/benchmarks-log.md"}

// backend is a store or a transport and the capabilities it asserts.
type backend struct {
	name string
	caps map[string]bool
}

var (
	driverAssertion = regexp.MustCompile(`_\s+(?:bus|sqlstore)\.(\w+)\s*=\s*\(\*(Persistence|Transport)\)\(nil\)`)
	memoryAssertion = regexp.MustCompile(`_\s+(\w+)\s*=\s*\(\*(MemoryPersistence|MemoryTransport)\)\(nil\)`)
	listMarker      = regexp.MustCompile(`^\s*<!--\s*(stores|transports|unlisted)\s*(?::\s*([^>]*?))?\s*-->\s*$`)
)

// sqlComplete returns the capabilities sqlstore.Complete embeds, which a
// SQL store asserts in one line.
func sqlComplete(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("backend", "sqlstore", "store.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "type Complete interface {")
	body, _, _ = strings.Cut(body, "}")
	if !ok {
		t.Fatal("backend/sqlstore/store.go: no Complete interface")
	}
	var caps []string
	for _, m := range regexp.MustCompile(`backend\.(\w+)`).FindAllStringSubmatch(body, -1) {
		caps = append(caps, m[1])
	}
	return caps
}

// backends finds the stores and transports: the core's in-memory ones and
// every module of go.work whose package asserts bus.Persistence or
// bus.Transport at compile time.
func backends(t *testing.T) (stores, transports []backend) {
	t.Helper()
	scan := func(dir string, re *regexp.Regexp) (persistence, transport map[string]bool) {
		persistence, transport = map[string]bool{}, map[string]bool{}
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				if m[1] == "Complete" { // sqlstore.Complete: every capability it embeds
					for _, c := range sqlComplete(t) {
						persistence[c] = true
					}
					continue
				}
				if strings.HasSuffix(m[2], "Persistence") {
					persistence[m[1]] = true
				} else {
					transport[m[1]] = true
				}
			}
		}
		return persistence, transport
	}
	add := func(name string, persistence, transport map[string]bool) {
		if persistence["Persistence"] {
			stores = append(stores, backend{name, persistence})
		}
		if transport["Transport"] {
			transports = append(transports, backend{name, transport})
		}
	}
	p, tr := scan(".", memoryAssertion)
	tr["Transport"] = true // bus.NewMemoryTransport returns the concrete type
	add("memory", p, tr)
	for _, dir := range workModules(t) {
		if strings.Contains(dir, "/") {
			continue // examples and tools
		}
		p, tr := scan(dir, driverAssertion)
		add(dir, p, tr)
	}
	for _, b := range append(slices.Clone(stores), transports...) {
		if backendSpelling[b.name] == nil {
			t.Errorf("docs_lists_test.go: backendSpelling has no entry for %s: say how the docs name it", b.name)
		}
	}
	if len(stores) < 2 || len(transports) < 2 {
		t.Fatalf("found %d stores and %d transports: the assertions this test looks for have changed", len(stores), len(transports))
	}
	return stores, transports
}

// block is a run of non-blank lines and the markers before it.
type block struct {
	line    int // of its first line, from 1
	text    string
	markers [][2]string // kind, capabilities
}

// blocks splits a Markdown file into blocks, attaching each marker line to
// the block it starts or precedes.
func blocks(src string) []block {
	var out []block
	var cur *block
	var pending [][2]string
	for i, line := range strings.Split(src, "\n") {
		if m := listMarker.FindStringSubmatch(line); m != nil {
			pending = append(pending, [2]string{m[1], m[2]})
			continue
		}
		if strings.TrimSpace(line) == "" {
			cur = nil
			continue
		}
		if cur == nil {
			out = append(out, block{line: i + 1, markers: pending})
			cur, pending = &out[len(out)-1], nil
		}
		cur.text += line + "\n"
	}
	return out
}

// expected returns the backends that have every capability of caps (a
// space- or comma-separated list of bus interface names, or "drivers").
func expected(all []backend, caps string) ([]backend, error) {
	var out []backend
	fields := strings.FieldsFunc(caps, func(r rune) bool { return r == ' ' || r == ',' })
next:
	for _, b := range all {
		for _, c := range fields {
			c = strings.TrimPrefix(c, "bus.")
			if c == "drivers" {
				if b.name == "memory" {
					continue next
				}
				continue
			}
			if !b.caps[c] {
				continue next
			}
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no backend has the capabilities %q", caps)
	}
	return out, nil
}

func names(bs []backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.name)
	}
	return out
}

// namedIn returns the backends of bs that text names.
func namedIn(text string, bs []backend) (in, out []backend) {
	for _, b := range bs {
		if re := backendSpelling[b.name]; re != nil && re.MatchString(text) {
			in = append(in, b)
		} else {
			out = append(out, b)
		}
	}
	return in, out
}

// checkDocLists returns the problems of the lists of one Markdown file.
func checkDocLists(name, src string, stores, transports []backend) []string {
	var brokers []backend
	for _, b := range transports {
		if b.name != "memory" && b.name != "postgres" {
			brokers = append(brokers, b)
		}
	}
	var problems []string
	for _, b := range blocks(src) {
		if len(b.markers) == 0 {
			for _, set := range []struct {
				what string
				all  []backend
			}{{"stores", stores}, {"brokers", brokers}} {
				if in, out := namedIn(b.text, set.all); len(out) == 1 && len(in) >= 2 {
					problems = append(problems, fmt.Sprintf("%s:%d: names the %s %v but not %s: name it, mark the list "+
						"(<!-- stores: Capability --> or <!-- transports: Capability -->), or mark the block <!-- unlisted --> if it lists none",
						name, b.line, set.what, names(in), out[0].name))
				}
			}
			continue
		}
		for _, m := range b.markers {
			all := stores
			switch m[0] {
			case "unlisted":
				continue
			case "transports":
				all = transports
			}
			want, err := expected(all, m[1])
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: <!-- %s: %s -->: %v", name, b.line, m[0], m[1], err))
				continue
			}
			if _, missing := namedIn(b.text, want); len(missing) > 0 {
				problems = append(problems, fmt.Sprintf("%s:%d: the list of %s (%s) misses %v",
					name, b.line, m[0], cmpOr(m[1], "all"), names(missing)))
			}
		}
	}
	return problems
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestDocsListsNameEveryBackend checks the lists of stores and transports
// in README.md and under docs/ (see the top of this file).
func TestDocsListsNameEveryBackend(t *testing.T) {
	t.Parallel()
	stores, transports := backends(t)
	files := []string{"README.md"}
	err := filepath.WalkDir("docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(p) == ".md" && !slices.Contains(unlistedFiles, filepath.ToSlash(p)) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range checkDocLists(filepath.ToSlash(f), string(src), stores, transports) {
			t.Error(p)
		}
	}
}

// TestDocsListsCheck shows the check on small documents: a marked list
// that misses a store fails, an unmarked list that misses one fails, and
// an unlisted mention passes.
func TestDocsListsCheck(t *testing.T) {
	t.Parallel()
	stores := []backend{
		{"memory", map[string]bool{"Persistence": true, "SagaStore": true}},
		{"postgres", map[string]bool{"Persistence": true, "SagaStore": true, "OutboxStore": true}},
		{"sqlite", map[string]bool{"Persistence": true, "SagaStore": true, "OutboxStore": true}},
		{"mysql", map[string]bool{"Persistence": true, "SagaStore": true, "OutboxStore": true}},
	}
	transports := []backend{{"memory", map[string]bool{"Transport": true}}, {"rabbitmq", map[string]bool{"Transport": true}},
		{"nats", map[string]bool{"Transport": true}}, {"kafka", map[string]bool{"Transport": true}}}
	for _, tc := range []struct {
		doc  string
		want int // problems
	}{
		{"<!-- stores: SagaStore -->\nThe in-memory store, PostgreSQL, SQLite and MySQL keep sagas.\n", 0},
		{"<!-- stores: SagaStore -->\nThe in-memory store, PostgreSQL and SQLite keep sagas.\n", 1},
		{"<!-- stores: OutboxStore -->\n\n- PostgreSQL\n- SQLite\n", 1},
		{"<!-- stores: drivers -->\nUse `postgres.New`, `sqlite.Open` or `mysql.New`.\n", 0},
		{"<!-- stores: NoSuchStore -->\nPostgreSQL\n", 1},
		{"Sagas live in the in-memory store, PostgreSQL or SQLite.\n", 1},
		{"<!-- unlisted -->\nSagas live in the in-memory store, PostgreSQL or SQLite.\n", 0},
		{"PostgreSQL and SQLite.\n\nThe in-memory one.\n", 0},
		{"<!-- transports -->\nRabbitMQ, NATS, Kafka or in memory.\n", 0},
		{"<!-- transports: drivers -->\nRabbitMQ and NATS.\n", 1},
		{"RabbitMQ and NATS.\n", 1},
	} {
		if got := checkDocLists("doc.md", tc.doc, stores, transports); len(got) != tc.want {
			t.Errorf("%q: %d problems, want %d: %q", tc.doc, len(got), tc.want, got)
		}
	}
}
