package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/server/auth"
)

// TestBareListIsExplained: a tokens file that is only the list of entries
// (what an older `opjournal token` printed) is refused with the shape the
// file must have.
func TestBareListIsExplained(t *testing.T) {
	t.Parallel()
	bare := "- name: a\n  sha256: " + auth.Digest("x") + "\n  tenant: t\n  roles: [agent]\n"
	for name, data := range map[string]string{"bare list": bare, "scalar": "opj_abc\n", "other key": "token:\n" + bare} {
		_, err := auth.Parse([]byte(data), "tokens.yaml")
		if err == nil || !strings.Contains(err.Error(), "tokens.yaml: the file must have a top-level tokens: list (see opjournal token --help)") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFileExampleParses(t *testing.T) {
	t.Parallel()
	if _, err := auth.Parse([]byte(auth.FileExample), "example"); err != nil {
		t.Fatal(err)
	}
}

func TestAppendEntry(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	alice := auth.NewEntry("alice", "tok-alice-0123456789abcdef", "team-a", []auth.Role{auth.RoleOperator})
	created, err := auth.AppendEntry(path, alice)
	if err != nil || !created {
		t.Fatalf("first append: created %v, %v", created, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", st.Mode(), err)
	}
	// An existing file keeps its comments; the entry joins the list.
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append([]byte("# team A's tokens\n"), b...), 0o600); err != nil {
		t.Fatal(err)
	}
	bob := auth.NewEntry("bob", "tok-bob-0123456789abcdef01", "team-a", []auth.Role{auth.RoleAgent, auth.RoleReconciler})
	if created, err := auth.AppendEntry(path, bob); err != nil || created {
		t.Fatalf("second append: created %v, %v", created, err)
	}
	b, _ = os.ReadFile(path)
	a, err := auth.Parse(b, path)
	if err != nil || !strings.HasPrefix(string(b), "# team A's tokens\ntokens:\n") {
		t.Fatalf("%v\n%s", err, b)
	}
	if p, err := a.Authenticate("tok-bob-0123456789abcdef01"); err != nil || p.Name != "bob" || len(p.Roles) != 2 {
		t.Fatalf("bob: %+v %v", p, err)
	}
	if _, err := a.Authenticate("tok-alice-0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.AppendEntry(path, alice); !errors.Is(err, auth.ErrDuplicateName) || !strings.Contains(err.Error(), `"alice"`) {
		t.Fatalf("duplicate: %v", err)
	}
	if c, _ := os.ReadFile(path); string(c) != string(b) {
		t.Fatal("a refused append changed the file")
	}

	// A file indented differently, without a final newline.
	other := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(other, []byte("tokens:\n- name: a\n  sha256: "+auth.Digest("zz")+"\n  roles: [admin]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.AppendEntry(other, bob); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(other)
	if _, err := auth.Parse(b, other); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}

	// A bare list is refused, with the shape explained, and not touched.
	bare := filepath.Join(t.TempDir(), "tokens.yaml")
	content := []byte("- name: a\n  sha256: " + auth.Digest("zz") + "\n  roles: [admin]\n")
	_ = os.WriteFile(bare, content, 0o600)
	if _, err := auth.AppendEntry(bare, bob); err == nil || !strings.Contains(err.Error(), "top-level tokens: list") {
		t.Fatalf("bare list: %v", err)
	}
	if c, _ := os.ReadFile(bare); string(c) != string(content) {
		t.Fatal("the bare list was changed")
	}

	// An invalid entry is refused before anything is written.
	if _, err := auth.AppendEntry(filepath.Join(t.TempDir(), "t.yaml"), auth.NewEntry("a b", "x", "t", []auth.Role{auth.RoleAgent})); err == nil {
		t.Fatal("a bad name was accepted")
	}
}

func TestParseRoles(t *testing.T) {
	t.Parallel()
	if r, err := auth.ParseRoles("agent, operator"); err != nil || len(r) != 2 {
		t.Fatalf("%v %v", r, err)
	}
	if _, err := auth.ParseRoles("root"); err == nil || !strings.Contains(err.Error(), `"root"`) {
		t.Fatal(err)
	}
	if _, err := auth.ParseRoles(""); err == nil {
		t.Fatal("no roles accepted")
	}
}

// TestSecurityPageShowsTheFile: docs/security.md shows FileExample, the
// file `opjournal token --help` shows.
func TestSecurityPageShowsTheFile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```yaml\n"+auth.FileExample+"```\n") {
		t.Fatal("docs/security.md does not show auth.FileExample as a yaml block")
	}
}
