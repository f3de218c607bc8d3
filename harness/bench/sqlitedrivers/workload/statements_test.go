package workload

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatementsMatchStore evaluates the write-path constants of
// store/sqlite (its source, two directories up) and compares them with
// this package's copies: a benchmark of other statements would measure
// nothing the store does.
func TestStatementsMatchStore(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "store", "sqlite")
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// Only the constants are wanted: errors about the imports (not
	// type-checked here) are ignored; constant expressions of local
	// constants still evaluate.
	conf := types.Config{Importer: fakeImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check("sqlite", fset, files, nil)
	for store, ours := range map[string]string{
		"getSQL": GetSQL, "clockSQL": ClockSQL, "updateSQL": UpdateSQL,
		"insertSQL": InsertSQL, "insertEventSQL": InsertEventSQL,
	} {
		c, ok := pkg.Scope().Lookup(store).(*types.Const)
		if !ok || c.Val().Kind() != constant.String {
			t.Errorf("store/sqlite has no string constant %s", store)
			continue
		}
		if got := constant.StringVal(c.Val()); got != ours {
			t.Errorf("store/sqlite's %s changed:\n%s\nthis package's copy:\n%s", store, got, ours)
		}
	}
}

// fakeImporter answers every import with an empty package, so that the
// store's source type-checks without its dependencies.
type fakeImporter struct{}

func (fakeImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}
