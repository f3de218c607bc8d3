package opjournal_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The map stays true: the package comment's Layout (doc.go) and the
// architecture page (docs/architecture.md) name the tree as it is. A path
// either names that does not exist fails, and so does a package that the
// Layout does not place.

// pathLike is a word that names a path of the tree: a folder ("store/"),
// a file ("protocol/table.go"), or a set of folders in braces
// ("internal/{pgtest,pgenv}/").
var pathLike = regexp.MustCompile(`[A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.{},-]*)+|[A-Za-z0-9_-]+\.(?:go|md|sql|yaml|json|sh)\b`)

// expand spells out the braces of a Layout word.
func expand(word string) []string {
	open := strings.IndexByte(word, '{')
	end := strings.IndexByte(word, '}')
	if open < 0 || end < open {
		return []string{word}
	}
	var out []string
	for _, alt := range strings.Split(word[open+1:end], ",") {
		out = append(out, expand(word[:open]+alt+word[end+1:])...)
	}
	return out
}

// layoutPaths returns the paths the Layout of doc.go names, by line.
func layoutPaths(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "// # Layout")
	if start < 0 {
		t.Fatal("doc.go has no Layout section")
	}
	var paths []string
	// The paths are the first words of the indented lines (a tab after
	// "//"), and the words of the continued lists that follow them.
	for line := range strings.Lines(text[start:]) {
		rest, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			continue
		}
		if strings.HasPrefix(rest, " ") {
			continue // a description continued
		}
		// The folder is the line's first word, or a list "a, b, c" that
		// fills the line up to the column of descriptions.
		head, _, _ := strings.Cut(rest, "  ")
		words := strings.Split(head, ", ")
		if len(words) == 1 || !strings.Contains(words[1], "/") {
			words = strings.Fields(head)[:1]
		}
		for _, w := range words {
			if w = strings.TrimSpace(w); w != "" && w != "." {
				paths = append(paths, expand(w)...)
			}
		}
	}
	return paths
}

func TestLayoutNamesOnlyWhatExists(t *testing.T) {
	paths := layoutPaths(t)
	if len(paths) < 20 {
		t.Fatalf("read only %d paths from doc.go's Layout: %v", len(paths), paths)
	}
	for _, p := range paths {
		if _, err := os.Stat(strings.TrimSuffix(p, "/")); err != nil {
			t.Errorf("doc.go's Layout names %q, which does not exist", p)
		}
	}
}

func TestLayoutPlacesEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var placed []string
	for _, p := range layoutPaths(t) {
		placed = append(placed, strings.TrimSuffix(p, "/"))
	}
	for dir := range strings.Lines(string(out)) {
		rel, err := filepath.Rel(root, strings.TrimSpace(dir))
		if err != nil || rel == "." {
			continue
		}
		rel = filepath.ToSlash(rel)
		if !slices.ContainsFunc(placed, func(p string) bool { return rel == p || strings.HasPrefix(rel, p+"/") }) {
			t.Errorf("package %s is not placed in doc.go's Layout (name it, or a folder above it, in its group)", rel)
		}
	}
}

func TestArchitecturePageNamesOnlyWhatExists(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`([^`\n]+)`")
	link := regexp.MustCompile(`\]\(([^)#\s]+)`)
	n := 0
	for _, m := range code.FindAllStringSubmatch(string(b), -1) {
		w := m[1]
		if strings.ContainsAny(w, " *$<>=()'\"") || strings.Contains(w, "...") || strings.HasPrefix(w, "/") || strings.Contains(w, "://") || !pathLike.MatchString(w) || pathLike.FindString(w) != w {
			continue // code, a URL path, a pattern: not a path of the tree
		}
		if !strings.Contains(w, "/") {
			continue // a bare file name, named beside its folder in the text
		}
		if first, _, _ := strings.Cut(w, "/"); strings.Count(first, ".") > 1 {
			continue // an RPC's full name (opjournal.v1.JournalService/Register)
		}
		n++
		if _, err := os.Stat(strings.TrimSuffix(w, "/")); err != nil {
			t.Errorf("docs/architecture.md names %q, which does not exist", w)
		}
	}
	for _, m := range link.FindAllStringSubmatch(string(b), -1) {
		target := m[1]
		if strings.Contains(target, "://") {
			continue
		}
		n++
		if _, err := os.Stat(filepath.Join("docs", target)); err != nil {
			t.Errorf("docs/architecture.md links %q, which does not exist", target)
		}
	}
	if n < 20 {
		t.Fatalf("found only %d paths in docs/architecture.md", n)
	}
}
