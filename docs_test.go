package opjournal_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// manualPages are README.md and every page of the manual: the documents a
// clone of the repository must be able to read on its own.
func manualPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := filepath.Glob("docs/*/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]string{"README.md"}, pages...), sub...)
}

// mdLink is a Markdown link or image target, or an HTML href/src: the
// part a reader's browser follows.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)|(?:href|src)="([^"]+)"`)

// TestDocsLinkOnlyInsideTheRepository: no page of the manual (README.md,
// docs/) links to a file outside the repository, such as a sibling
// checkout's ../shared/SPEC.md or a path on one machine (/work/...): such a
// link is broken in every clone. Every relative link must name a file or
// folder the repository has, so a page that moves cannot leave links behind.
func TestDocsLinkOnlyInsideTheRepository(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	outside := regexp.MustCompile(`(?:^|[\s(\x60"'])(?:/work/|(?:\.\./)+shared/|shared/SPEC\.md|shared/seed)`)
	for _, page := range manualPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			where := page + ":" + strconv.Itoa(n+1)
			if outside.MatchString(line) {
				t.Errorf("%s names a path outside the repository: %s", where, strings.TrimSpace(line))
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1] + m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
					continue
				}
				path, _, _ := strings.Cut(target, "#")
				abs := filepath.Join(root, filepath.Dir(page), filepath.FromSlash(path))
				if strings.HasPrefix(path, "/") {
					t.Errorf("%s links to the absolute path %s: link relative to the page", where, target)
					continue
				}
				if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
					t.Errorf("%s links to %s, outside the repository", where, target)
					continue
				}
				if _, err := os.Stat(abs); err != nil {
					t.Errorf("%s links to %s, which the repository does not have", where, target)
				}
			}
		}
	}
}
