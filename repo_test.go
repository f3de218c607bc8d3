package opjournal_test

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTestingPageNamesEveryDependencyDepsInstalls: docs/testing.md's
// table of what the tests need (its `make test` row, and the list in
// "Tests") names every Debian package scripts/deps.sh installs, so a
// reader who installs by hand, without the script, gets everything the
// suite uses.
func TestTestingPageNamesEveryDependencyDepsInstalls(t *testing.T) {
	script, err := os.ReadFile("scripts/deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^debs="([^"]+)"`).FindSubmatch(script)
	if m == nil {
		t.Fatal(`scripts/deps.sh has no debs="…" line: this test reads the packages it installs from it`)
	}
	debs := strings.Fields(string(m[1]))
	if len(debs) < 5 {
		t.Fatalf("scripts/deps.sh installs only %q?", debs)
	}
	readme, err := os.ReadFile("docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.SplitSeq(string(readme), "\n") {
		if strings.HasPrefix(line, "| `make test` |") {
			row = line
			break
		}
	}
	if row == "" {
		t.Fatal("docs/testing.md has no dependency table row starting with | `make test` |")
	}
	tests := section(t, string(readme), "## Tests")
	for _, pkg := range debs {
		if !strings.Contains(row, "`"+pkg+"`") {
			t.Errorf("docs/testing.md's `make test` row does not name `%s`, which scripts/deps.sh installs", pkg)
		}
		if !strings.Contains(tests, "`"+pkg+"`") {
			t.Errorf("docs/testing.md's \"Tests\" section does not name `%s`, which scripts/deps.sh installs", pkg)
		}
	}
	// deps.sh also runs the TypeScript client's npm ci: the table says npm.
	if !strings.Contains(row, "npm ci") {
		t.Error("docs/testing.md's `make test` row does not say that the TypeScript client's `npm ci` needs npm")
	}
}

// section returns a page's text from the heading line to the next
// heading of the same level.
func section(t *testing.T, readme, heading string) string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/testing.md has no %q section", heading)
	}
	rest := readme[i+1+len(heading):]
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if j := strings.Index(rest, "\n"+level); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// TestGitIgnoresWhatServeCreates: `opjournal serve` with its defaults
// creates opjournal.db, its WAL files and opjournal.db.hashkeys, the
// request-hash key (a secret) beside it, in the working directory: none of
// them may end up in a commit by `git add .`.
func TestGitIgnoresWhatServeCreates(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("this test needs git (apt-get install git)")
	}
	for _, name := range []string{"opjournal.db", "opjournal.db-wal", "opjournal.db-shm", "opjournal.db.hashkeys"} {
		// --no-index: the answer of .gitignore alone, whatever is on disk.
		out, err := exec.Command("git", "check-ignore", "--no-index", "-v", name).CombinedOutput()
		if err != nil {
			t.Errorf("git does not ignore %s (add it to .gitignore): %v %s", name, err, out)
		}
	}
}

// TestTestScriptInstallsBeforeItTests runs scripts/test.sh (what `make
// test` runs) with a `go` and a deps script that only record that they
// ran: on a full run the dependencies are installed before `go test`
// starts (the suite needs PgBouncer, Chromium, ... on a fresh machine), and
// when the install fails no test runs and the script fails.
func TestTestScriptInstallsBeforeItTests(t *testing.T) {
	dir := t.TempDir()
	record := dir + "/calls"
	write := func(name, body string) string {
		path := dir + "/" + name
		if err := os.WriteFile(path, []byte("#!/usr/bin/env bash\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// `go run …pgping` answers (a reachable database); `go test` is recorded and fails,
	// which stops the script before the other languages' clients.
	write("npm", "exit 0\n")
	goStub := write("go", `case "$1" in run) exit 0;; test) echo "go test $*" >>"`+record+`"; exit 7;; esac; exit 0`+"\n")
	run := func(depsExit int, args ...string) (string, error) {
		os.Remove(record)
		deps := write("deps.sh", "echo deps >>\""+record+"\"\nexit "+strconv.Itoa(depsExit)+"\n")
		cmd := exec.Command("bash", append([]string{"scripts/test.sh"}, args...)...)
		// npm: the script's own npm ci of harness/e2e/stripe-node (when its node_modules is missing) does nothing here.
		cmd.Env = append(os.Environ(), "GO="+goStub, "DEPS="+deps, "TEST_DATABASE_URL=postgres://unused", "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		calls, _ := os.ReadFile(record)
		if err != nil {
			err = &scriptError{err: err, out: string(out)}
		}
		return strings.TrimSpace(string(calls)), err
	}

	calls, err := run(0)
	if err == nil || !strings.HasPrefix(calls, "deps\ngo test") || strings.Count(calls, "\n") != 1 {
		t.Errorf("a full run: calls %q (%v), want the deps script, then go test (failing, so the script fails)", calls, err)
	}
	calls, err = run(1)
	if err == nil || calls != "deps" {
		t.Errorf("a full run whose install fails: calls %q (%v), want the deps script alone and a failure", calls, err)
	}
	calls, _ = run(0, "-run", "X", "./protocol/canonjson/")
	if calls != "go test test -count=1 -timeout 12m -run X ./protocol/canonjson/" {
		t.Errorf("a targeted run: calls %q, want go test alone", calls)
	}
}

type scriptError struct {
	err error
	out string
}

func (e *scriptError) Error() string { return e.err.Error() + "\n" + e.out }
