package opjournal_test

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/opjournal/opjournal"

// linked returns, for each package pattern, the packages its non-test
// code links (go list's Deps: the transitive imports), by import path.
func linked(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	return linkedIn(t, ".", patterns...)
}

// linkedIn is linked for the packages of the module in dir (harness/ is
// a module of its own).
func linkedIn(t *testing.T, dir string, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			deps[f[0]] = f[1:]
		}
	}
	return deps
}

// forbidden reports the packages of deps that are pkg or below it.
func forbidden(deps []string, pkgs ...string) []string {
	var bad []string
	for _, d := range deps {
		for _, p := range pkgs {
			if d == p || strings.HasPrefix(d, p+"/") {
				bad = append(bad, d)
			}
		}
	}
	return bad
}

// TestClientBinariesDoNotLinkTheJournal: the gateway and the reconciler
// talk to the journal over gRPC only. Linking the service, the stores, the
// migrations or the hash keys would put the database drivers and the key
// handling into binaries that never open a database (and did, through a
// purge printer in the commands' shared flag package).
func TestClientBinariesDoNotLinkTheJournal(t *testing.T) {
	deps := linked(t, "./cmd/opjournal-gateway", "./cmd/opjournal-reconciler")
	for _, bin := range []string{"opjournal-gateway", "opjournal-reconciler"} {
		pkg := module + "/cmd/" + bin
		got, ok := deps[pkg]
		if !ok {
			t.Fatalf("go list did not list %s", pkg)
		}
		if bad := forbidden(got, module+"/journal", module+"/store", module+"/store/migrations", module+"/protocol/hashkey", module+"/server"); len(bad) > 0 {
			t.Errorf("%s links %v; it is a client of the journal and must reach it over gRPC only", bin, bad)
		}
	}
}

// TestProductDoesNotLinkHarnesses: no package of the product (what the
// images ship and users import) links a harness, a test helper or the
// testing package; the arrows run from the harnesses to the product.
func TestProductDoesNotLinkHarnesses(t *testing.T) {
	product := []string{".", "./protocol/...", "./client", "./gateway", "./journal/...", "./reconciler",
		"./server/...", "./store", "./store/postgres", "./store/sqlite", "./store/migrations",
		"./internal/cli/...", "./internal/ops", "./internal/groupq", "./internal/hostcheck", "./internal/httpheader",
		"./internal/tracing", "./internal/adaptiveprocs", "./internal/protocodec", "./internal/protojsonrt", "./proto/...",
		"./cmd/opjournal", "./cmd/opjournal-gateway", "./cmd/opjournal-reconciler"}
	harness := []string{module + "/harness", module + "/deploy", module + "/store/storetest",
		module + "/internal/testkit", module + "/protocol/cmd"}
	for pkg, deps := range linked(t, product...) {
		if bad := forbidden(deps, harness...); len(bad) > 0 {
			t.Errorf("%s links the harness packages %v", pkg, bad)
		}
		if slices.Contains(deps, "testing") {
			t.Errorf("%s links the testing package", pkg)
		}
	}
}

// TestSoakLinksNeitherTheDemoNorTestHelpers: the soak harnesses are
// binaries of their own; they share the agent's tool function with the demo
// (internal/testkit/fakeprovider/agenttool) rather than importing the demo, and default to
// the test database (internal/testkit/pgenv) without linking the testing package.
func TestSoakLinksNeitherTheDemoNorTestHelpers(t *testing.T) {
	for pkg, deps := range linkedIn(t, "harness", "./cmd/opjournal-soak", "./cmd/opjournal-soak-failover") {
		if bad := forbidden(deps, module+"/harness/demo", module+"/internal/testkit/pgtest"); len(bad) > 0 {
			t.Errorf("%s links %v", pkg, bad)
		}
		if slices.Contains(deps, "testing") {
			t.Errorf("%s links the testing package", pkg)
		}
	}
}

// TestServerImportsTheConsoleOnlyToMountIt: the server hosts the console
// (http.go mounts it), and that is the one place it may name it; a type
// both use belongs to the package below them both (journal), not to the
// console.
func TestServerImportsTheConsoleOnlyToMountIt(t *testing.T) {
	files, err := filepath.Glob("server/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no server sources: %v", err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == module+"/server/console" && filepath.Base(f) != "http.go" {
				t.Errorf("%s imports the console; only http.go, which mounts it, may", f)
			}
		}
	}
}
