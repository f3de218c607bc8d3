package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/opjournal/opjournal/internal/testkit/pgtest"
	"github.com/opjournal/opjournal/protocol/hashkey"
	"github.com/opjournal/opjournal/server/auth"
)

// The image's binaries live here (Dockerfile, COPY … /usr/local/bin/).
const imageBinDir = "/usr/local/bin/"

// imageName is the repository every manifest pulls.
const imageName = "ghcr.io/opjournal/opjournal"

var (
	buildOnce sync.Once
	buildDir  string // the built binaries, by name
	buildErr  error
	tmpRoot   string // removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tmpRoot != "" {
		os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// ---- the Dockerfile ---------------------------------------------------------

type instruction struct {
	line  int
	stage string // the stage it belongs to
	cmd   string // FROM, RUN, … (upper case)
	args  string
}

type dockerfile struct {
	instructions []instruction
	parents      map[string]string // stage → the stage it is FROM ("" for an image)
	images       map[string]string // stage → its base image
	order        []string          // stages, in order
}

// parseDockerfile reads the Dockerfile: continuation lines joined, comment
// lines dropped (as Docker does, inside continuations too).
func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := dockerfile{parents: map[string]string{}, images: map[string]string{}}
	var cur strings.Builder
	start, stage := 0, ""
	for i, raw := range strings.Split(string(b), "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		cont := strings.HasSuffix(line, `\`)
		cur.WriteString(strings.TrimSuffix(line, `\`))
		cur.WriteString(" ")
		if cont {
			continue
		}
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			continue
		}
		cmd, args, _ := strings.Cut(text, " ")
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		if cmd == "FROM" {
			f := strings.Fields(args)
			var image string
			for _, w := range f {
				if !strings.HasPrefix(w, "--") {
					image = w
					break
				}
			}
			stage = fmt.Sprintf("#%d", len(df.order))
			if n := len(f); n >= 3 && strings.EqualFold(f[n-2], "AS") {
				stage = strings.ToLower(f[n-1])
			}
			df.order = append(df.order, stage)
			if slices.Contains(df.order, strings.ToLower(image)) {
				df.parents[stage] = strings.ToLower(image)
			} else {
				df.images[stage] = image
			}
		}
		df.instructions = append(df.instructions, instruction{line: start, stage: stage, cmd: cmd, args: args})
	}
	if len(df.order) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	return df
}

// lineage is the stage and those it is built FROM, oldest first.
func (df dockerfile) lineage(stage string) []string {
	var l []string
	for s := stage; s != ""; s = df.parents[s] {
		l = append([]string{s}, l...)
	}
	return l
}

// find returns the instructions cmd of stage and its parents.
func (df dockerfile) find(stage, cmd string) []instruction {
	var out []instruction
	for _, s := range df.lineage(stage) {
		for _, in := range df.instructions {
			if in.stage == s && in.cmd == cmd {
				out = append(out, in)
			}
		}
	}
	return out
}

// binaries are the names of the binaries stage copies from the build stage
// into /usr/local/bin/ (its parents' included).
func (df dockerfile) binaries(t *testing.T, stage string) []string {
	t.Helper()
	var bins []string
	for _, in := range df.find(stage, "COPY") {
		words := shellWords(t, in.args)
		var paths []string
		for _, w := range words {
			if !strings.HasPrefix(w, "--") {
				paths = append(paths, w)
			}
		}
		if len(paths) < 2 || paths[len(paths)-1] != imageBinDir {
			continue
		}
		for _, p := range paths[:len(paths)-1] {
			bins = append(bins, path.Base(p))
		}
	}
	return bins
}

// jsonArray parses an exec-form ENTRYPOINT or CMD.
func (df dockerfile) jsonArray(t *testing.T, stage, cmd string) []string {
	t.Helper()
	ins := df.find(stage, cmd)
	if len(ins) == 0 {
		return nil
	}
	var v []string
	if err := json.Unmarshal([]byte(ins[len(ins)-1].args), &v); err != nil {
		t.Fatalf("Dockerfile:%d: %s must be in exec form (a JSON array): %v", ins[len(ins)-1].line, cmd, err)
	}
	return v
}

// env is what the ENV instructions of stage (and its parents) set.
func (df dockerfile) env(t *testing.T, stage string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, in := range df.find(stage, "ENV") {
		for _, w := range shellWords(t, in.args) {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				t.Fatalf("Dockerfile:%d: ENV %q: use the KEY=VALUE form", in.line, w)
			}
			env[k] = v
		}
	}
	return env
}

// shellWords splits s as a shell would, for the Dockerfile's simple lines:
// blanks separate words; single and double quotes group and are removed.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// goBuild is one of the Dockerfile's `go build` lines: the environment it
// sets, the module folder it builds in (`go -C DIR build`: the product at the
// root, the test provider in the harness module) and the arguments from
// `build` on.
type goBuild struct {
	env  map[string]string
	dir  string
	args []string
}

// goBuilds are the Dockerfile's `go build` lines, in order: the first builds
// the product's binaries at the root.
func (df dockerfile) goBuilds(t *testing.T) []goBuild {
	t.Helper()
	var found []goBuild
	for _, in := range df.instructions {
		if in.cmd != "RUN" || !strings.Contains(in.args, " build ") {
			continue
		}
		words := shellWords(t, in.args)
		gb := goBuild{env: map[string]string{}, dir: "."}
		i := 0
		for ; i < len(words) && words[i] != "go"; i++ {
			w := words[i]
			if strings.HasPrefix(w, "--mount=") {
				continue
			}
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				t.Fatalf("Dockerfile:%d: the go build line runs %q before go; keep it to VAR=value go build …", in.line, w)
			}
			gb.env[k] = v
		}
		if i+2 < len(words) && words[i+1] == "-C" {
			gb.dir = words[i+2]
			i += 2
		}
		if i+1 >= len(words) || words[i+1] != "build" {
			t.Fatalf("Dockerfile:%d: expected `go build` or `go -C DIR build` in %q", in.line, in.args)
		}
		for _, w := range words[i+1:] {
			if w == "&&" || w == ";" || w == "|" {
				t.Fatalf("Dockerfile:%d: keep the go build line a single command", in.line)
			}
		}
		gb.args = words[i+1:]
		found = append(found, gb)
	}
	if len(found) == 0 || found[0].dir != "." {
		t.Fatalf("Dockerfile: want the product's RUN … go build line first, found %d go build lines", len(found))
	}
	return found
}

// packages are the ./cmd/… packages a go build line names, from the root.
func (gb goBuild) packages() []string {
	var pkgs []string
	for _, a := range gb.args {
		if strings.HasPrefix(a, "./") {
			pkgs = append(pkgs, "./"+path.Join(gb.dir, a))
		}
	}
	return pkgs
}

// ---- the build context -------------------------------------------------------

// dockerignore matches paths as Docker does for the patterns this
// repository uses: relative to the context root, `**` for any number of
// directories, and a directory's pattern excluding what is inside it.
type dockerignore [][]string

func loadDockerignore(t *testing.T, root string) dockerignore {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var ig dockerignore
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore: %q: exceptions are not understood by this test's matcher; extend it", line)
		}
		p := path.Clean(strings.TrimPrefix(line, "/"))
		ig = append(ig, strings.Split(p, "/"))
	}
	return ig
}

func (ig dockerignore) ignored(rel string) bool {
	segs := strings.Split(filepath.ToSlash(rel), "/")
	for _, p := range ig {
		for n := 1; n <= len(segs); n++ {
			if matchSegments(p, segs[:n]) {
				return true
			}
		}
	}
	return false
}

func matchSegments(p, s []string) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	if p[0] == "**" {
		for i := 0; i <= len(s); i++ {
			if matchSegments(p[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	if len(s) == 0 {
		return false
	}
	ok, err := path.Match(p[0], s[0])
	return err == nil && ok && matchSegments(p[1:], s[1:])
}

// copyContext copies the files of root that the .dockerignore lets into
// the build context to dst, and returns how many bytes that was.
func copyContext(t *testing.T, root, dst string) int64 {
	t.Helper()
	ig := loadDockerignore(t, root)
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if ig.ignored(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil // symlinks and others: none are needed to build
	})
	if err != nil {
		t.Fatalf("copying the build context: %v", err)
	}
	return total
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// buildEnv is the environment of a go command run as the Dockerfile runs
// it: the build line's variables, no workspace, no GOFLAGS of this shell.
func buildEnv(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "GOFLAGS" || k == "GOWORK" || k == "CGO_ENABLED" || k == "GOOS" || k == "GOARCH" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// built builds the Dockerfile's binaries once, from a copy of the build
// context, with its go build line, and returns their directory.
func built(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { buildDir, buildErr = buildImageBinaries(t) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// contextDir is the copy of the build context (the binaries must not
// contain its path: -trimpath).
var contextDir string

func buildImageBinaries(t *testing.T) (string, error) {
	root := repoRoot(t)
	df := parseDockerfile(t)
	var err error
	if tmpRoot, err = os.MkdirTemp("", "opjournal-deploy-"); err != nil {
		return "", err
	}
	contextDir = filepath.Join(tmpRoot, "src")
	out := filepath.Join(tmpRoot, "out") + string(filepath.Separator)
	if err := os.MkdirAll(contextDir, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	size := copyContext(t, root, contextDir)
	t.Logf("build context: %.1f MiB (what .dockerignore lets in), copied in %s", float64(size)/(1<<20), time.Since(start).Round(time.Millisecond))

	for _, gb := range df.goBuilds(t) {
		env := map[string]string{}
		for k, v := range gb.env {
			v = strings.ReplaceAll(v, "$TARGETOS", "linux")
			v = strings.ReplaceAll(v, "$TARGETARCH", runtime.GOARCH)
			env[k] = v
		}
		args := slices.Clone(gb.args)
		for i, a := range args {
			if a == "-o" && i+1 < len(args) {
				args[i+1] = out
			}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join(contextDir, filepath.FromSlash(gb.dir))
		cmd.Env = buildEnv(env)
		start = time.Now()
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %s (the Dockerfile's build line, in a copy of the build context): %v\n%s", strings.Join(args, " "), err, b)
		}
		t.Logf("go %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	}
	return out, nil
}

// ---- the tests: the image ---------------------------------------------------

// TestDockerfile checks the image's shape: a pinned Go builder matching
// go.mod, a static build, a distroless or scratch runtime as a non-root
// user, the listeners exposed, an entrypoint that exists.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	df := parseDockerfile(t)
	last := df.order[len(df.order)-1]
	if last != "runtime" {
		t.Errorf("the last stage (docker build's default target) is %q, want runtime", last)
	}
	for _, stage := range []string{"build", "base", "demo", "runtime"} {
		if !slices.Contains(df.order, stage) {
			t.Errorf("no stage %q (compose.yaml builds the targets runtime and demo)", stage)
		}
	}

	// The builder's Go is go.mod's minor version.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod: no go line")
	}
	var goVersion string
	for _, in := range df.instructions {
		if in.cmd == "ARG" && strings.HasPrefix(in.args, "GO_VERSION=") {
			goVersion = strings.TrimPrefix(in.args, "GO_VERSION=")
		}
	}
	if goVersion != string(m[1]) {
		t.Errorf("Dockerfile ARG GO_VERSION=%s, go.mod says go %s: keep them in step", goVersion, m[1])
	}
	if img := df.images["build"]; !strings.HasPrefix(img, "golang:") {
		t.Errorf("build stage FROM %q, want the golang image", img)
	}

	// What the image holds is what the build lines build, from a cmd/
	// folder: the product's binaries at the root, the test provider (the
	// demo target's) in the harness module.
	built := map[string]string{}
	for _, gb := range df.goBuilds(t) {
		if gb.env["CGO_ENABLED"] != "0" {
			t.Errorf("the go build line in %s sets CGO_ENABLED=%q, want 0 (static binaries)", gb.dir, gb.env["CGO_ENABLED"])
		}
		for _, flag := range []string{"-trimpath", "-ldflags=-s -w"} {
			if !slices.Contains(gb.args, flag) {
				t.Errorf("the go build line in %s lacks %s: %q", gb.dir, flag, gb.args)
			}
		}
		for _, p := range gb.packages() {
			built[path.Base(p)] = gb.dir
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p), "main.go")); err != nil {
				t.Errorf("the go build line builds %s: %v", p, err)
			}
		}
	}
	rt := df.binaries(t, "runtime")
	for _, want := range []string{"opjournal", "opjournal-reconciler", "opjournal-gateway"} {
		if !slices.Contains(rt, want) {
			t.Errorf("the runtime image lacks %s (has %v)", want, rt)
		}
	}
	if slices.Contains(rt, "opjournal-fakeprovider") {
		t.Error("the test provider is in the runtime image; it belongs in the demo target only")
	}
	if !slices.Contains(df.binaries(t, "demo"), "opjournal-fakeprovider") {
		t.Error("the demo target lacks opjournal-fakeprovider")
	}
	for _, stage := range []string{"runtime", "demo"} {
		for _, b := range df.binaries(t, stage) {
			dir, ok := built[b]
			switch {
			case !ok:
				t.Errorf("stage %s copies %s, which no go build line builds", stage, b)
			case stage == "runtime" && dir != ".":
				t.Errorf("the runtime image's %s is built in %s; the product is the root module", b, dir)
			}
		}
	}
	ep := df.jsonArray(t, "runtime", "ENTRYPOINT")
	if len(ep) != 1 || ep[0] != imageBinDir+"opjournal" {
		t.Errorf("ENTRYPOINT %q, want [%q]", ep, imageBinDir+"opjournal")
	}
	if cmd := df.jsonArray(t, "runtime", "CMD"); len(cmd) == 0 || cmd[0] != "serve" {
		t.Errorf("CMD %q, want serve", cmd)
	}

	// Secure by default: the image listens on every interface, so it must
	// require the tokens file (TestImageDefaults runs it).
	env := df.env(t, "runtime")
	for k, want := range map[string]string{"OPJOURNAL_GRPC_ADDR": ":9090", "OPJOURNAL_HTTP_ADDR": ":8080"} {
		if !strings.HasSuffix(env[k], want) {
			t.Errorf("ENV %s=%q, want …%s (the EXPOSEd port)", k, env[k], want)
		}
	}
	if env["OPJOURNAL_AUTH_FILE"] == "" {
		t.Error("the image sets no OPJOURNAL_AUTH_FILE: a container would serve every interface only with --insecure, or without authentication")
	}
	if _, ok := env["OPJOURNAL_INSECURE"]; ok {
		t.Error("the image sets OPJOURNAL_INSECURE")
	}
	if !strings.HasPrefix(env["OPJOURNAL_DATABASE_URL"], "sqlite:///var/lib/opjournal/") {
		t.Errorf("ENV OPJOURNAL_DATABASE_URL=%q, want SQLite in the volume /var/lib/opjournal", env["OPJOURNAL_DATABASE_URL"])
	}
}

// TestDockerignore: the build context leaves out what the build does not
// need (and what must never reach an image: secrets, databases, .git), and
// keeps what it does.
func TestDockerignore(t *testing.T) {
	ig := loadDockerignore(t, repoRoot(t))
	for _, p := range []string{".git/config", "bin/opjournal", "deploy/compose/secrets/database.env",
		"opjournal.db", "opjournal.db-wal", "opjournal.db.hashkeys", "deploy/compose/secrets/hashkeys.env", "client/typescript/node_modules/x/index.js",
		"harness/e2e/process_test.go", "server/server_test.go", "harness/soak/run.go", "harness/bench/ANALYSIS.md"} {
		if !ig.ignored(p) {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/opjournal/main.go", "server/console/static/console.css",
		"store/migrations/postgres/0001_init.up.sql", "protocol/policy/default.yaml", "proto/openapi/opjournal.swagger.json",
		"harness/go.mod", "harness/go.sum", "harness/cmd/opjournal-fakeprovider/main.go"} {
		if ig.ignored(p) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", p)
		}
	}
}

// TestStaticBinaries builds the binaries with the Dockerfile's own go build
// line, from a copy of what .dockerignore lets into the build context, and
// checks that each is a static, stripped ELF without the build's paths.
func TestStaticBinaries(t *testing.T) {
	dir := built(t)
	df := parseDockerfile(t)
	names := df.binaries(t, "demo")
	if len(names) == 0 {
		t.Fatal("the Dockerfile copies no binaries")
	}
	for _, name := range names {
		p := filepath.Join(dir, name)
		f, err := elf.Open(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		failed := t.Failed()
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
				t.Errorf("%s has a %v program header: it is dynamically linked and would not run on distroless/static or scratch", name, prog.Type)
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v (%v)", name, libs, err)
		}
		if f.Section(".interp") != nil || f.Section(".dynamic") != nil {
			t.Errorf("%s has an .interp or .dynamic section", name)
		}
		if f.Section(".symtab") != nil {
			t.Errorf("%s has a symbol table: -ldflags '-s -w' strips it", name)
		}
		f.Close()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(contextDir)) {
			t.Errorf("%s contains the build directory %s: build with -trimpath", name, contextDir)
		}
		if info, _ := os.Stat(p); !failed && !t.Failed() {
			t.Logf("%s: static, stripped, %.1f MiB", name, float64(info.Size())/(1<<20))
		}
	}
	out, err := exec.Command(filepath.Join(dir, "opjournal"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("opjournal version: %v\n%s", err, out)
	}
}

// ---- flags, from the binaries' own help -------------------------------------

var (
	helpMu    sync.Mutex
	helpCache = map[string]map[string]bool{}
)

var flagLine = regexp.MustCompile(`(?m)^\s+(?:-[A-Za-z], )?--?([a-z][a-z0-9-]*)`)

// flagsOf returns the flag names that `bin [sub] -h` lists.
func flagsOf(t *testing.T, bin, sub string) map[string]bool {
	t.Helper()
	key := bin + " " + sub
	helpMu.Lock()
	defer helpMu.Unlock()
	if f, ok := helpCache[key]; ok {
		return f
	}
	var args []string
	if sub != "" {
		args = append(args, sub)
	}
	cmd := exec.Command(filepath.Join(built(t), bin), append(args, "-h")...)
	cmd.Env = cleanEnv()
	out, _ := cmd.CombinedOutput() // -h may exit 0 or 2
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 2 {
		t.Fatalf("%s %s -h lists no flags:\n%s", bin, sub, out)
	}
	helpCache[key] = flags
	return flags
}

// cleanEnv is this process's environment without OPJOURNAL_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPJOURNAL_") {
			env = append(env, kv)
		}
	}
	return env
}

// directEnv are the variables a binary reads itself, not as a flag's
// default.
var directEnv = map[string][]string{
	"opjournal serve":      {"OPJOURNAL_HASH_KEYS"},
	"opjournal ops":        {"OPJOURNAL_TOKEN"},
	"opjournal-reconciler": {"OPJOURNAL_TOKEN"},
	"opjournal-gateway":    {"OPJOURNAL_TOKEN"},
}

// process is one container's command line: which binary, which
// subcommand, its arguments and environment, and where it was written.
type process struct {
	where string
	bin   string // opjournal, opjournal-reconciler, …
	sub   string // for opjournal: serve, migrate, …
	args  []string
	env   []string // the names of the variables it is given
}

func (p process) key() string { return strings.TrimSpace(p.bin + " " + p.sub) }

// checkProcess checks that the binary is in the image and every flag and
// OPJOURNAL_* variable of p is one the binary has.
func checkProcess(t *testing.T, p process, imageBins []string) {
	t.Helper()
	root := repoRoot(t)
	if !slices.Contains(imageBins, p.bin) {
		t.Errorf("%s runs %s, which the image does not hold (%v)", p.where, p.bin, imageBins)
		return
	}
	_, errProduct := os.Stat(filepath.Join(root, "cmd", p.bin))
	_, errHarness := os.Stat(filepath.Join(root, "harness", "cmd", p.bin))
	if errProduct != nil && errHarness != nil {
		t.Errorf("%s runs %s, not a command in cmd/ or harness/cmd/", p.where, p.bin)
	}
	if p.bin == "opjournal" && p.sub == "" {
		t.Errorf("%s runs opjournal without a command", p.where)
		return
	}
	flags := flagsOf(t, p.bin, p.sub)
	for _, a := range p.args {
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("%s: %s has no flag --%s", p.where, p.key(), name)
		}
	}
	bin, err := os.ReadFile(filepath.Join(built(t), p.bin))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range p.env {
		if !strings.HasPrefix(v, "OPJOURNAL_") {
			continue
		}
		if slices.Contains(directEnv[p.key()], v) {
			if !bytes.Contains(bin, []byte(v)) {
				t.Errorf("%s sets %s, which %s no longer reads", p.where, v, p.bin)
			}
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(v, "OPJOURNAL_"), "_", "-"))
		if !flags[flag] {
			t.Errorf("%s sets %s, but %s has no flag --%s", p.where, v, p.key(), flag)
		}
	}
}

// newProcess splits a container's command line (entrypoint + arguments).
func newProcess(where string, cmdline []string, env []string) process {
	p := process{where: where, env: env}
	if len(cmdline) == 0 {
		return p
	}
	p.bin = strings.TrimPrefix(cmdline[0], imageBinDir)
	if strings.Contains(p.bin, "/") {
		p.bin = "(not in " + imageBinDir + ") " + cmdline[0]
	}
	p.args = cmdline[1:]
	if p.bin == "opjournal" && len(p.args) > 0 && !strings.HasPrefix(p.args[0], "-") {
		p.sub, p.args = p.args[0], p.args[1:]
	}
	return p
}

// ---- YAML --------------------------------------------------------------------

// yamlDocs parses every document of a YAML file.
func yamlDocs(t *testing.T, file string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for i := 0; ; i++ {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i+1, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML document", file)
	}
	return docs
}

func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string {
	s, _ := get(v, keys...).(string)
	return s
}

func list(v any, keys ...string) []any {
	l, _ := get(v, keys...).([]any)
	return l
}

func strs(v any, keys ...string) []string {
	var out []string
	for _, x := range list(v, keys...) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func num(v any, keys ...string) (int, bool) {
	switch n := get(v, keys...).(type) {
	case int:
		return n, true
	case uint64:
		return int(n), true
	}
	return 0, false
}

func kubeDir(t *testing.T) string { return filepath.Join(repoRoot(t), "deploy", "kubernetes") }

type kubeDoc struct {
	file string
	doc  map[string]any
}

func (d kubeDoc) kind() string { return str(d.doc, "kind") }
func (d kubeDoc) name() string { return str(d.doc, "metadata", "name") }
func (d kubeDoc) String() string {
	return fmt.Sprintf("%s: %s %s", filepath.Base(d.file), d.kind(), d.name())
}

// kubeDocs returns every document of deploy/kubernetes/*.yaml.
func kubeDocs(t *testing.T) []kubeDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubeDir(t), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/kubernetes/*.yaml (%v)", err)
	}
	var docs []kubeDoc
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			docs = append(docs, kubeDoc{file: f, doc: d})
		}
	}
	return docs
}

// ---- the tests: Kubernetes ---------------------------------------------------

// TestKubernetesManifestsParse: every document parses, has apiVersion,
// kind and a name in the namespace opjournal, and kustomization.yaml lists
// every manifest but the Secret template.
func TestKubernetesManifestsParse(t *testing.T) {
	kinds := map[string]int{}
	for _, d := range kubeDocs(t) {
		if str(d.doc, "apiVersion") == "" || d.kind() == "" {
			t.Errorf("%s: a document without apiVersion or kind", d.file)
			continue
		}
		kinds[d.kind()]++
		if d.kind() == "Kustomization" {
			continue
		}
		if d.name() == "" {
			t.Errorf("%s: %s without metadata.name", d.file, d.kind())
		}
		if ns := str(d.doc, "metadata", "namespace"); d.kind() != "Namespace" && ns != "opjournal" {
			t.Errorf("%s: namespace %q, want opjournal", d, ns)
		}
	}
	for _, k := range []string{"Namespace", "Secret", "Job", "Deployment", "Service", "PodDisruptionBudget", "Kustomization"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests", k)
		}
	}
	if kinds["Deployment"] < 2 {
		t.Errorf("%d Deployments, want the journal's and the reconciler's", kinds["Deployment"])
	}

	k := yamlDocs(t, filepath.Join(kubeDir(t), "kustomization.yaml"))[0]
	res := strs(k, "resources")
	files, _ := filepath.Glob(filepath.Join(kubeDir(t), "*.yaml"))
	for _, f := range files {
		base := filepath.Base(f)
		switch {
		case base == "kustomization.yaml":
		case strings.HasSuffix(base, ".example.yaml"):
			if slices.Contains(res, base) {
				t.Errorf("kustomization.yaml lists %s: applying it would replace the real Secrets with placeholders", base)
			}
		case !slices.Contains(res, base):
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
	for _, r := range res {
		if _, err := os.Stat(filepath.Join(kubeDir(t), r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
	if str(k, "namespace") != "opjournal" {
		t.Errorf("kustomization.yaml namespace %q", str(k, "namespace"))
	}
	for _, img := range list(k, "images") {
		if str(img, "name") != imageName {
			t.Errorf("kustomization.yaml images: %q, want %s", str(img, "name"), imageName)
		}
	}

	// kubectl renders the kustomization, where kubectl is installed (it
	// needs no cluster for that).
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, kubectl, "kustomize", kubeDir(t)).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl kustomize deploy/kubernetes: %v\n%s", err, out)
		} else {
			want := 0
			for _, r := range res {
				want += len(yamlDocs(t, filepath.Join(kubeDir(t), r)))
			}
			if n := len(regexp.MustCompile(`(?m)^kind: `).FindAll(out, -1)); n != want {
				t.Errorf("kubectl kustomize rendered %d objects, want %d:\n%s", n, want, out)
			}
		}
	} else {
		t.Log("no kubectl here: the kustomization was checked by this test only")
	}
}

// secretKeys are the keys of the Secrets of secret.example.yaml.
func secretKeys(t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, d := range yamlDocs(t, filepath.Join(kubeDir(t), "secret.example.yaml")) {
		if str(d, "kind") != "Secret" {
			t.Errorf("secret.example.yaml holds a %s", str(d, "kind"))
			continue
		}
		keys := map[string]string{}
		data, _ := get(d, "stringData").(map[string]any)
		for k, v := range data {
			keys[k] = fmt.Sprint(v)
		}
		if get(d, "data") != nil {
			t.Errorf("secret.example.yaml: Secret %s has data: (base64); use stringData placeholders", str(d, "metadata", "name"))
		}
		out[str(d, "metadata", "name")] = keys
	}
	return out
}

// TestSecretTemplateHoldsNoSecret: the template's values are placeholders
// the journal refuses, so an unedited copy fails closed, and none of them
// is a real token, key or password.
func TestSecretTemplateHoldsNoSecret(t *testing.T) {
	token := regexp.MustCompile(`opj_[A-Za-z0-9_-]{40,}`)
	for name, keys := range secretKeys(t) {
		for k, v := range keys {
			if token.MatchString(v) {
				t.Errorf("Secret %s, %s holds a real-looking token", name, k)
			}
			if !strings.Contains(v, "REPLACE") {
				t.Errorf("Secret %s, %s = %q: not a placeholder (REPLACE_…)", name, k, v)
			}
		}
	}
	s := secretKeys(t)["opjournal"]
	if _, err := hashkey.FromEnv(s["hash-keys"]); err == nil {
		t.Error("the template's hash-keys is a usable key")
	}
	if _, err := auth.Parse([]byte(s["auth.yaml"]), "auth.yaml"); err == nil {
		t.Error("the template's auth.yaml is a usable tokens file; it should hold placeholders the server refuses")
	}
	if !strings.HasPrefix(s["database-url"], "postgres://") {
		t.Errorf("database-url %q is not a postgres:// URL", s["database-url"])
	}
}

type container struct {
	where string
	pod   map[string]any
	c     map[string]any
}

// workloads returns the containers of every Deployment and Job.
func workloads(t *testing.T) []container {
	t.Helper()
	var out []container
	for _, d := range kubeDocs(t) {
		if d.kind() != "Deployment" && d.kind() != "Job" {
			continue
		}
		pod, _ := get(d.doc, "spec", "template", "spec").(map[string]any)
		if pod == nil {
			t.Errorf("%s: no spec.template.spec", d)
			continue
		}
		for _, c := range list(pod, "containers") {
			cm, _ := c.(map[string]any)
			out = append(out, container{where: fmt.Sprintf("%s container %s", d, str(cm, "name")), pod: pod, c: cm})
		}
	}
	return out
}

// TestKubernetesWorkloads: every container runs a binary of the image with
// flags and variables it has, is hardened and bounded, probes ports it
// declares, and mounts and reads Secrets and keys the template defines.
func TestKubernetesWorkloads(t *testing.T) {
	df := parseDockerfile(t)
	imageBins := df.binaries(t, "runtime")
	secrets := secretKeys(t)
	cs := workloads(t)
	if len(cs) < 3 {
		t.Fatalf("%d containers, want the migration's, the journal's and the reconciler's", len(cs))
	}
	seen := map[string]bool{}
	for _, c := range cs {
		where := c.where
		img := str(c.c, "image")
		if !strings.HasPrefix(img, imageName+":") {
			t.Errorf("%s: image %q, want %s:<version>", where, img, imageName)
		}
		cmdline := append(strs(c.c, "command"), strs(c.c, "args")...)
		if len(strs(c.c, "command")) == 0 {
			cmdline = append(df.jsonArray(t, "runtime", "ENTRYPOINT"), strs(c.c, "args")...)
		}
		var envNames []string
		for _, e := range list(c.c, "env") {
			envNames = append(envNames, str(e, "name"))
			if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
				sname, key := str(ref, "name"), str(ref, "key")
				if _, ok := secrets[sname][key]; !ok {
					t.Errorf("%s: env %s reads Secret %s key %s, which secret.example.yaml does not define", where, str(e, "name"), sname, key)
				}
			}
			if v := str(e, "value"); strings.HasPrefix(str(e, "name"), "OPJOURNAL_") && (strings.Contains(v, "://") && strings.Contains(v, "@")) {
				t.Errorf("%s: env %s holds a URL with credentials in the manifest; read it from the Secret", where, str(e, "name"))
			}
		}
		p := newProcess(where, cmdline, envNames)
		checkProcess(t, p, imageBins)
		seen[p.key()] = true

		// Hardening.
		psc, csc := get(c.pod, "securityContext"), get(c.c, "securityContext")
		if get(psc, "runAsNonRoot") != true && get(csc, "runAsNonRoot") != true {
			t.Errorf("%s: runAsNonRoot is not set", where)
		}
		if str(psc, "seccompProfile", "type") != "RuntimeDefault" && str(csc, "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s: seccompProfile is not RuntimeDefault", where)
		}
		if get(csc, "readOnlyRootFilesystem") != true {
			t.Errorf("%s: readOnlyRootFilesystem is not true", where)
		}
		if get(csc, "allowPrivilegeEscalation") != false {
			t.Errorf("%s: allowPrivilegeEscalation is not false", where)
		}
		if !slices.Contains(strs(csc, "capabilities", "drop"), "ALL") {
			t.Errorf("%s: capabilities.drop lacks ALL", where)
		}
		if get(c.pod, "automountServiceAccountToken") != false {
			t.Errorf("%s: automountServiceAccountToken is not false", where)
		}
		if get(c.pod, "enableServiceLinks") != false {
			t.Errorf("%s: enableServiceLinks is not false: Kubernetes would add OPJOURNAL_*-named variables for the Service opjournal, and OPJOURNAL_* variables are flags", where)
		}
		for _, r := range []string{"requests.cpu", "requests.memory", "limits.memory"} {
			kind, res, _ := strings.Cut(r, ".")
			if get(c.c, "resources", kind, res) == nil {
				t.Errorf("%s: no resources.%s", where, r)
			}
		}

		// Ports and probes.
		names, numbers := map[string]int{}, map[int]bool{}
		for _, port := range list(c.c, "ports") {
			n, _ := num(port, "containerPort")
			names[str(port, "name")] = n
			numbers[n] = true
		}
		for _, a := range p.args { // listen addresses are declared ports
			name, val, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.HasSuffix(name, "-addr") || name == "journal-addr" {
				continue
			}
			host, port, err := net.SplitHostPort(val)
			n, _ := strconv.Atoi(port)
			if err != nil || !numbers[n] {
				t.Errorf("%s: --%s=%s listens on a port the container does not declare (%v)", where, name, val, numbers)
			}
			if host != "0.0.0.0" && host != "" {
				t.Errorf("%s: --%s=%s is not reachable from outside the pod", where, name, val)
			}
		}
		for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
			pr := get(c.c, probe)
			if pr == nil {
				continue
			}
			if g := get(pr, "grpc"); g != nil {
				n, ok := num(g, "port")
				if !ok || !numbers[n] {
					t.Errorf("%s: %s grpc port %v is not a declared containerPort (a grpc probe takes a number)", where, probe, get(g, "port"))
				}
			}
			for _, h := range []string{"httpGet", "tcpSocket"} {
				if get(pr, h) == nil {
					continue
				}
				switch port := get(pr, h, "port").(type) {
				case string:
					if _, ok := names[port]; !ok {
						t.Errorf("%s: %s %s port %q is not a declared port name", where, probe, h, port)
					}
				default:
					if n, ok := num(pr, h, "port"); !ok || !numbers[n] {
						t.Errorf("%s: %s %s port %v is not a declared containerPort", where, probe, h, port)
					}
				}
			}
		}

		// Volumes: mounts name volumes; Secret volumes name Secrets and keys
		// the template defines; file flags point into them.
		vols := map[string]any{}
		for _, v := range list(c.pod, "volumes") {
			vols[str(v, "name")] = v
		}
		mounts := map[string]any{} // mountPath → volume
		for _, m := range list(c.c, "volumeMounts") {
			v, ok := vols[str(m, "name")]
			if !ok {
				t.Errorf("%s: mounts volume %s, which the pod does not have", where, str(m, "name"))
				continue
			}
			mounts[str(m, "mountPath")] = v
		}
		for _, v := range vols {
			sn := str(v, "secret", "secretName")
			if sn == "" {
				continue
			}
			if _, ok := secrets[sn]; !ok {
				t.Errorf("%s: volume %s mounts Secret %s, which secret.example.yaml does not define", where, str(v, "name"), sn)
			}
			for _, it := range list(v, "secret", "items") {
				if _, ok := secrets[sn][str(it, "key")]; !ok {
					t.Errorf("%s: volume %s reads key %s of Secret %s, which the template does not define", where, str(v, "name"), str(it, "key"), sn)
				}
			}
		}
		for _, a := range p.args {
			name, val, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if name != "auth-file" && name != "token-file" && name != "policy" {
				continue
			}
			dir, file := path.Split(val)
			v, ok := mounts[strings.TrimSuffix(dir, "/")]
			if !ok {
				t.Errorf("%s: --%s=%s is not in a mounted volume", where, name, val)
				continue
			}
			if items := list(v, "secret", "items"); len(items) > 0 && !slices.ContainsFunc(items, func(it any) bool { return str(it, "path") == file }) {
				t.Errorf("%s: --%s=%s: the volume has no item %s", where, name, val, file)
			}
		}
	}
	for _, want := range []string{"opjournal migrate", "opjournal serve", "opjournal-reconciler"} {
		if !seen[want] {
			t.Errorf("no container runs %s", want)
		}
	}
}

// TestKubernetesJournal: the journal's Deployment probes the gRPC health
// service on its gRPC port, and its Service and PodDisruptionBudget select
// its pods and name its ports.
func TestKubernetesJournal(t *testing.T) {
	var dep map[string]any
	var services, pdbs []map[string]any
	for _, d := range kubeDocs(t) {
		switch {
		case d.kind() == "Deployment" && d.name() == "opjournal":
			dep = d.doc
		case d.kind() == "Service":
			services = append(services, d.doc)
		case d.kind() == "PodDisruptionBudget":
			pdbs = append(pdbs, d.doc)
		}
	}
	if dep == nil {
		t.Fatal("no Deployment opjournal")
	}
	if n, _ := num(dep, "spec", "replicas"); n < 2 {
		t.Errorf("the journal runs %d replicas; a PodDisruptionBudget needs at least 2", n)
	}
	labels, _ := get(dep, "spec", "template", "metadata", "labels").(map[string]any)
	c := list(dep, "spec", "template", "spec", "containers")[0]
	ports := map[string]int{}
	for _, p := range list(c, "ports") {
		ports[str(p, "name")], _ = num(p, "containerPort")
	}
	if ports["grpc"] != 9090 || ports["http"] != 8080 {
		t.Errorf("the journal's ports are %v, want grpc 9090 and http 8080", ports)
	}
	if n, ok := num(c, "readinessProbe", "grpc", "port"); !ok || n != 9090 {
		t.Errorf("the readiness probe is not the gRPC health service on 9090: %v", get(c, "readinessProbe"))
	}
	if get(c, "livenessProbe") == nil {
		t.Error("the journal has no liveness probe")
	}
	if str(c, "startupProbe", "httpGet", "path") != "/healthz" && get(c, "startupProbe", "grpc") == nil {
		t.Error("the journal's startup probe is neither /healthz nor the gRPC health service")
	}
	selects := func(sel any) bool {
		m, ok := sel.(map[string]any)
		if !ok || len(m) == 0 {
			return false
		}
		for k, v := range m {
			if labels[k] != v {
				return false
			}
		}
		return true
	}
	found := false
	for _, s := range services {
		if !selects(get(s, "spec", "selector")) {
			continue
		}
		found = true
		for _, p := range list(s, "spec", "ports") {
			switch tp := get(p, "targetPort").(type) {
			case string:
				if _, ok := ports[tp]; !ok {
					t.Errorf("Service %s: targetPort %q is not a port of the journal", str(s, "metadata", "name"), tp)
				}
			default:
				if n, _ := num(p, "targetPort"); !slices.Contains([]int{ports["grpc"], ports["http"]}, n) {
					t.Errorf("Service %s: targetPort %v is not a port of the journal", str(s, "metadata", "name"), tp)
				}
			}
		}
	}
	if !found {
		t.Error("no Service selects the journal's pods")
	}
	found = false
	for _, p := range pdbs {
		if selects(get(p, "spec", "selector", "matchLabels")) {
			found = true
			if n, ok := num(p, "spec", "minAvailable"); ok && n >= 2 {
				t.Errorf("PodDisruptionBudget minAvailable %d of 2 replicas blocks every drain", n)
			}
		}
	}
	if !found {
		t.Error("no PodDisruptionBudget selects the journal's pods")
	}
	// The reconciler calls the journal through the Service's gRPC port.
	for _, cn := range workloads(t) {
		for _, a := range strs(cn.c, "args") {
			if v, ok := strings.CutPrefix(a, "--journal-addr="); ok {
				host, port, _ := net.SplitHostPort(v)
				if !slices.ContainsFunc(services, func(s map[string]any) bool {
					return str(s, "metadata", "name") == host && slices.ContainsFunc(list(s, "spec", "ports"), func(p any) bool {
						n, _ := num(p, "port")
						return strconv.Itoa(n) == port && str(p, "name") == "grpc"
					})
				}) {
					t.Errorf("%s: --journal-addr=%s is not the gRPC port of a Service", cn.where, v)
				}
			}
		}
	}
}

// ---- the tests: compose -----------------------------------------------------

// makeSecrets runs deploy/compose/make-secrets.sh with the built opjournal
// and returns the directory it wrote.
func makeSecrets(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "secrets")
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "deploy", "compose", "make-secrets.sh"), dir)
	cmd.Env = append(cleanEnv(), "OPJOURNAL="+filepath.Join(built(t), "opjournal"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make-secrets.sh: %v\n%s", err, out)
	}
	return dir
}

// envFile reads KEY=VALUE lines.
func envFile(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", file, line)
		}
		env[k] = v
	}
	return env
}

// TestMakeSecrets: the script writes what compose.yaml reads, private to
// its owner, and the tokens, the key and the URL it writes are ones the
// journal accepts.
func TestMakeSecrets(t *testing.T) {
	dir := makeSecrets(t)
	for _, f := range []string{"auth.yaml", "tokens.txt", "database.env", "hashkeys.env", "postgres.env", "reconciler.env"} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		perm := info.Mode().Perm()
		if f == "auth.yaml" {
			if perm&0o044 != 0o044 || perm&0o022 != 0 {
				t.Errorf("auth.yaml is %04o: it must be readable (not writable) by the container's user", perm)
			}
		} else if perm&0o077 != 0 {
			t.Errorf("%s is %04o: others may read it", f, perm)
		}
	}
	a, err := auth.Load(filepath.Join(dir, "auth.yaml"))
	if err != nil {
		t.Fatalf("the tokens file make-secrets.sh wrote: %v", err)
	}
	recon := envFile(t, filepath.Join(dir, "reconciler.env"))["OPJOURNAL_TOKEN"]
	if p, err := a.Authenticate(recon); err != nil || !strings.Contains(fmt.Sprint(p.Roles), "reconciler") {
		t.Errorf("the reconciler's token: %v %v", p, err)
	}
	toks := map[string]string{}
	for _, line := range strings.Split(string(must(os.ReadFile(filepath.Join(dir, "tokens.txt")))), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(line, "#") {
			toks[f[0]] = f[1]
		}
	}
	for _, who := range []string{"agent", "operator"} {
		p, err := a.Authenticate(toks[who])
		if err != nil || !strings.Contains(fmt.Sprint(p.Roles), who) {
			t.Errorf("tokens.txt %s: %v %v", who, p, err)
		}
	}
	keys := envFile(t, filepath.Join(dir, "hashkeys.env"))["OPJOURNAL_HASH_KEYS"]
	if _, err := hashkey.FromEnv(keys); err != nil {
		t.Errorf("hashkeys.env: %v", err)
	}
	pw := envFile(t, filepath.Join(dir, "postgres.env"))["POSTGRES_PASSWORD"]
	if url := envFile(t, filepath.Join(dir, "database.env"))["OPJOURNAL_DATABASE_URL"]; len(pw) < 32 || !strings.Contains(url, ":"+pw+"@postgres:5432/") {
		t.Errorf("database.env's URL does not use postgres.env's password at postgres:5432")
	}
	// A second run replaces nothing.
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "deploy", "compose", "make-secrets.sh"), dir)
	cmd.Env = append(cleanEnv(), "OPJOURNAL="+filepath.Join(built(t), "opjournal"))
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("a second make-secrets.sh over existing secrets succeeded:\n%s", out)
	}
	if got := envFile(t, filepath.Join(dir, "hashkeys.env")); got["OPJOURNAL_HASH_KEYS"] != keys {
		t.Error("a second make-secrets.sh changed the hash key")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestCompose: compose.yaml parses; PostgreSQL has a healthcheck the
// migration waits for, the journal waits for the migration; every opjournal
// service runs a binary of its build target with flags and variables it
// has; secrets come from files make-secrets.sh writes; ports stay on
// loopback.
func TestCompose(t *testing.T) {
	root := repoRoot(t)
	df := parseDockerfile(t)
	doc := yamlDocs(t, filepath.Join(root, "compose.yaml"))[0]
	services, _ := get(doc, "services").(map[string]any)
	for _, s := range []string{"postgres", "migrate", "journal", "reconciler"} {
		if services[s] == nil {
			t.Errorf("compose.yaml has no service %s", s)
		}
	}
	if t.Failed() {
		return
	}
	pg := services["postgres"]
	if img := str(pg, "image"); !regexp.MustCompile(`^postgres:1[5-9]`).MatchString(img) {
		t.Errorf("postgres image %q, want postgres:15 or later", img)
	}
	if len(strs(pg, "healthcheck", "test")) == 0 {
		t.Error("postgres has no healthcheck")
	}
	wants := map[string]map[string]string{
		"migrate":    {"postgres": "service_healthy"},
		"journal":    {"migrate": "service_completed_successfully"},
		"reconciler": {"journal": ""},
	}
	for svc, deps := range wants {
		for dep, cond := range deps {
			d := get(services[svc], "depends_on", dep)
			if d == nil {
				t.Errorf("%s does not depend on %s", svc, dep)
			} else if cond != "" && str(d, "condition") != cond {
				t.Errorf("%s depends on %s with condition %q, want %s", svc, dep, str(d, "condition"), cond)
			}
		}
	}

	secretsDir := makeSecrets(t)
	made := func(where, file string) (string, bool) {
		rel := filepath.ToSlash(filepath.Clean(file))
		base, ok := strings.CutPrefix(rel, "deploy/compose/secrets/")
		if !ok {
			t.Errorf("%s: %s is not in deploy/compose/secrets/ (git-ignored; make-secrets.sh writes there)", where, file)
			return "", false
		}
		p := filepath.Join(secretsDir, base)
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %s is not a file make-secrets.sh writes", where, file)
			return "", false
		}
		return p, true
	}
	topSecrets := map[string]string{}
	topLevel, _ := get(doc, "secrets").(map[string]any)
	for name, s := range topLevel {
		if p, ok := made("secrets."+name, str(s, "file")); ok {
			topSecrets[name] = p
		}
	}

	var names []string
	for name := range services {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := services[name]
		img := str(s, "image")
		for _, port := range strs(s, "ports") {
			if !strings.HasPrefix(port, "127.0.0.1:") {
				t.Errorf("%s publishes %q beyond loopback", name, port)
			}
		}
		if !strings.Contains(img, imageName) {
			continue
		}
		where := "compose.yaml service " + name
		target := str(s, "build", "target")
		if target != "runtime" && target != "demo" {
			t.Errorf("%s builds target %q, want runtime or demo", where, target)
			continue
		}
		if get(s, "read_only") != true || !slices.Contains(strs(s, "cap_drop"), "ALL") {
			t.Errorf("%s: not read_only with cap_drop ALL", where)
		}
		ep := strs(s, "entrypoint")
		if len(ep) == 0 {
			ep = df.jsonArray(t, target, "ENTRYPOINT")
		}
		cmd := strs(s, "command")
		if get(s, "command") == nil {
			cmd = df.jsonArray(t, target, "CMD")
		}
		var envNames []string
		envMap, _ := get(s, "environment").(map[string]any)
		for k := range envMap {
			envNames = append(envNames, k)
		}
		var envFiles []string
		switch ef := get(s, "env_file").(type) {
		case string:
			envFiles = []string{ef}
		case []any:
			for _, f := range ef {
				envFiles = append(envFiles, fmt.Sprint(f))
			}
		}
		for _, f := range envFiles {
			if p, ok := made(where, f); ok {
				for k := range envFile(t, p) {
					envNames = append(envNames, k)
				}
			}
		}
		p := newProcess(where, append(slices.Clone(ep), cmd...), envNames)
		checkProcess(t, p, df.binaries(t, target))
		// The tokens file mounted where --auth-file (or the image's
		// default) says.
		if p.key() == "opjournal serve" {
			authPath := df.env(t, target)["OPJOURNAL_AUTH_FILE"]
			for _, a := range p.args {
				if v, ok := strings.CutPrefix(a, "--auth-file="); ok {
					authPath = v
				}
			}
			mounted := false
			for _, sec := range list(s, "secrets") {
				if str(sec, "target") == authPath && topSecrets[str(sec, "source")] != "" {
					mounted = true
				}
			}
			if !mounted {
				t.Errorf("%s: nothing is mounted at the tokens file %s", where, authPath)
			}
		}
	}

	// The secrets directory is git-ignored.
	gi, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "secrets", ".gitignore"))
	if err != nil || !regexp.MustCompile(`(?m)^\*$`).Match(gi) {
		t.Errorf("deploy/compose/secrets/.gitignore does not ignore everything: %v", err)
	}
}

// ---- the image's defaults, run --------------------------------------------

// serving starts cmd and waits for its {"msg":"serving",…} line, and
// returns the fields of that line.
func serving(t *testing.T, cmd *exec.Cmd) map[string]any {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan map[string]any, 1)
	var logMu sync.Mutex
	var logBuf bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			logMu.Lock()
			logBuf.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			var m map[string]any
			if !sent && json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "serving" {
				lines <- m
				sent = true
			}
		}
		close(lines)
	}()
	select {
	case m, ok := <-lines:
		if !ok {
			_ = cmd.Wait()
			logMu.Lock()
			defer logMu.Unlock()
			t.Fatalf("%s exited before serving: %v\n%s", cmd.Args, cmd.ProcessState, logBuf.String())
		}
		return m
	case <-time.After(20 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("%s did not serve within 20 s:\n%s", cmd.Args, logBuf.String())
	}
	return nil
}

// imageEnv is the runtime image's environment with its paths moved into
// dir and its listeners onto loopback port 0 (this machine must not listen
// on every interface, nor take the real ports).
func imageEnv(t *testing.T, dir string) map[string]string {
	t.Helper()
	env := parseDockerfile(t).env(t, "runtime")
	for k, v := range env {
		switch {
		case strings.HasSuffix(k, "_ADDR"):
			env[k] = "127.0.0.1:0"
		case strings.Contains(v, "/var/lib/opjournal/"):
			env[k] = strings.ReplaceAll(v, "/var/lib/opjournal/", dir+"/")
		}
	}
	return env
}

func withEnv(env map[string]string) []string {
	out := cleanEnv()
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// TestImageDefaults runs the built opjournal as the image's ENTRYPOINT and
// CMD would, with the image's environment (paths moved to a temporary
// directory, listeners to loopback): without the tokens file it refuses to
// start; with the file make-secrets.sh wrote it serves, the health service
// answers without a token, the API wants one, and the reconciler's token
// from reconciler.env is accepted.
func TestImageDefaults(t *testing.T) {
	df := parseDockerfile(t)
	bin := filepath.Join(built(t), "opjournal")
	cmdline := df.jsonArray(t, "runtime", "CMD")
	dir := t.TempDir()

	// Without the tokens file: refused, on the image's own addresses.
	env := parseDockerfile(t).env(t, "runtime")
	env["OPJOURNAL_DATABASE_URL"] = "sqlite://" + filepath.Join(dir, "refused.db")
	env["OPJOURNAL_AUTH_FILE"] = filepath.Join(dir, "missing-auth.yaml")
	for k := range env {
		if strings.HasSuffix(k, "_ADDR") {
			env[k] = "0.0.0.0:0"
		}
	}
	out, err := runFor(t, 15*time.Second, bin, cmdline, withEnv(env))
	if err == nil || !strings.Contains(string(out), "missing-auth.yaml") {
		t.Errorf("the image's serve without its tokens file: %v\n%s", err, out)
	}
	env["OPJOURNAL_AUTH_FILE"] = ""
	out, err = runFor(t, 15*time.Second, bin, cmdline, withEnv(env))
	if err == nil || !strings.Contains(string(out), "refusing") {
		t.Errorf("the image's serve with OPJOURNAL_AUTH_FILE= on 0.0.0.0: %v\n%s", err, out)
	}

	// With the tokens file.
	secrets := makeSecrets(t)
	env = imageEnv(t, dir)
	env["OPJOURNAL_AUTH_FILE"] = filepath.Join(secrets, "auth.yaml")
	if out, err := runFor(t, 30*time.Second, bin, []string{"migrate"}, withEnv(env)); err != nil {
		t.Fatalf("opjournal migrate with the image's environment: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, cmdline...)
	cmd.Env = withEnv(env)
	m := serving(t, cmd)
	grpcAddr, _ := m["grpc_addr"].(string)
	httpAddr, _ := m["http_addr"].(string)
	if m["auth"] != true {
		t.Errorf("serving with auth=%v", m["auth"])
	}
	if _, err := os.Stat(filepath.Join(dir, "opjournal.db")); err != nil {
		t.Errorf("the SQLite database is not where the image's volume is: %v", err)
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var status healthpb.HealthCheckResponse_ServingStatus
	for {
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && r.Status == healthpb.HealthCheckResponse_SERVING {
			status = r.Status
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("gRPC health (what the readiness probe asks): %v %v", r, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("grpc.health.v1 on %s: %v", grpcAddr, status)

	hc := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/healthz": 200, "/v1/operations:lookup?operation_key=k": 401, "/metrics": 401} {
		resp, err := hc.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if resp, err := hc.Get("http://" + httpAddr + "/console/"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode == http.StatusNotFound || resp.StatusCode >= 500 {
		t.Errorf("GET /console/: %d", resp.StatusCode)
	}

	// The reconciler, as compose runs it, with reconciler.env's token.
	renv := envFile(t, filepath.Join(secrets, "reconciler.env"))
	renv["OPJOURNAL_JOURNAL_ADDR"] = grpcAddr
	out, err = runFor(t, 20*time.Second, filepath.Join(built(t), "opjournal-reconciler"), []string{"--once"}, withEnv(renv))
	if err != nil {
		t.Errorf("opjournal-reconciler --once with reconciler.env: %v\n%s", err, out)
	}

	// SIGTERM (docker stop, a pod's deletion) stops it cleanly.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("serve did not stop within 15 s of SIGTERM")
	}
}

// runFor runs bin with args and env, for at most d, and returns its output.
func runFor(t *testing.T, d time.Duration, bin string, args, env []string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %s:\n%s", filepath.Base(bin), args, d, out)
	}
	return out, err
}

// composeCommand is a compose service's command line as the container
// runs it (entrypoint, else the image's, then command, else the image's).
func composeCommand(t *testing.T, df dockerfile, svc any) []string {
	t.Helper()
	target := str(svc, "build", "target")
	ep := strs(svc, "entrypoint")
	if len(ep) == 0 {
		ep = df.jsonArray(t, target, "ENTRYPOINT")
	}
	cmd := strs(svc, "command")
	if get(svc, "command") == nil {
		cmd = df.jsonArray(t, target, "CMD")
	}
	return append(slices.Clone(ep), cmd...)
}

// TestComposeServicesRun runs compose.yaml's migrate, journal and
// reconciler command lines, with the files make-secrets.sh writes, against
// the test PostgreSQL in place of the postgres service: listeners on
// loopback port 0, files where the test put them, everything else as
// written. The journal refuses to start without hashkeys.env.
func TestComposeServicesRun(t *testing.T) {
	root := repoRoot(t)
	df := parseDockerfile(t)
	doc := yamlDocs(t, filepath.Join(root, "compose.yaml"))[0]
	services, _ := get(doc, "services").(map[string]any)
	secrets := makeSecrets(t)
	dbURL := pgtest.NewSchema(t)

	// The files a service reads, by the path the container sees them at.
	files := map[string]string{}
	top, _ := get(doc, "secrets").(map[string]any)
	for _, name := range []string{"journal", "reconciler"} {
		for _, sec := range list(services[name], "secrets") {
			file := str(top[str(sec, "source")], "file")
			files[str(sec, "target")] = filepath.Join(secrets, path.Base(file))
		}
	}
	journalAddr := ""
	run := func(name string, envFiles ...string) *exec.Cmd {
		t.Helper()
		svc := services[name]
		cmdline := composeCommand(t, df, svc)
		env := map[string]string{}
		for k, v := range df.env(t, str(svc, "build", "target")) {
			env[k] = v
		}
		senv, _ := get(svc, "environment").(map[string]any)
		for k, v := range senv {
			env[k] = fmt.Sprint(v)
		}
		for _, f := range envFiles {
			for k, v := range envFile(t, filepath.Join(secrets, f)) {
				env[k] = v
			}
		}
		for k, v := range env {
			switch {
			case k == "OPJOURNAL_DATABASE_URL" && strings.HasPrefix(v, "postgres://"):
				env[k] = dbURL // the postgres service
			case strings.HasSuffix(k, "_ADDR"):
				env[k] = "127.0.0.1:0"
			case files[v] != "":
				env[k] = files[v]
			}
		}
		cmd := exec.Command(filepath.Join(built(t), strings.TrimPrefix(cmdline[0], imageBinDir)), localArgs(cmdline[1:], files, journalAddr)...)
		cmd.Env = withEnv(env)
		return cmd
	}
	envFilesOf := func(name string) []string {
		var out []string
		switch ef := get(services[name], "env_file").(type) {
		case string:
			out = append(out, path.Base(ef))
		case []any:
			for _, f := range ef {
				out = append(out, path.Base(fmt.Sprint(f)))
			}
		}
		return out
	}

	if out, err := runCmd(t, 30*time.Second, run("migrate", envFilesOf("migrate")...)); err != nil {
		t.Fatalf("compose's migrate: %v\n%s", err, out)
	}
	var noKeys []string
	for _, f := range envFilesOf("journal") {
		if f != "hashkeys.env" {
			noKeys = append(noKeys, f)
		}
	}
	if out, err := runCmd(t, 30*time.Second, run("journal", noKeys...)); err == nil || !strings.Contains(string(out), "OPJOURNAL_HASH_KEYS") {
		t.Errorf("compose's journal without hashkeys.env on PostgreSQL: %v\n%s", err, out)
	}
	journal := run("journal", envFilesOf("journal")...)
	m := serving(t, journal)
	if m["store"] != "postgres" || m["auth"] != true {
		t.Errorf("compose's journal serves store=%v auth=%v", m["store"], m["auth"])
	}
	journalAddr, _ = m["grpc_addr"].(string)
	rec := run("reconciler", envFilesOf("reconciler")...)
	rec.Args = append(rec.Args, "--once")
	if out, err := runCmd(t, 30*time.Second, rec); err != nil {
		t.Errorf("compose's reconciler (--once): %v\n%s", err, out)
	}
	_ = journal.Process.Signal(syscall.SIGTERM)
	if err := journal.Wait(); err != nil {
		t.Errorf("compose's journal after SIGTERM: %v", err)
	}
}

// runCmd runs cmd for at most d and returns its output.
func runCmd(t *testing.T, d time.Duration, cmd *exec.Cmd) ([]byte, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not finish within %s:\n%s", cmd.Args, d, out.String())
	}
	return nil, nil
}

// localArgs rewrites a container's arguments to run here: listeners on
// loopback port 0, --journal-addr to the journal the test started, and
// file paths the container sees to where the test put those files.
func localArgs(args []string, files map[string]string, journalAddr string) []string {
	args = slices.Clone(args)
	for i, a := range args {
		n, v, ok := strings.Cut(a, "=")
		switch {
		case !ok:
		case n == "--journal-addr":
			args[i] = n + "=" + journalAddr
		case strings.HasSuffix(n, "-addr"):
			args[i] = n + "=127.0.0.1:0"
		case files[v] != "":
			args[i] = n + "=" + files[v]
		}
	}
	return args
}

// TestKubernetesWorkloadsRun runs the migration Job's, the journal's and
// the reconciler's command lines as the manifests write them, with their
// Secrets' keys filled with what make-secrets.sh made (the database URL:
// the test PostgreSQL) and mounted where their volumes say.
func TestKubernetesWorkloadsRun(t *testing.T) {
	secrets := makeSecrets(t)
	dir := t.TempDir()
	values := map[string]map[string]string{
		"opjournal": {
			"database-url": pgtest.NewSchema(t),
			"hash-keys":    envFile(t, filepath.Join(secrets, "hashkeys.env"))["OPJOURNAL_HASH_KEYS"],
			"auth.yaml":    string(must(os.ReadFile(filepath.Join(secrets, "auth.yaml")))),
		},
		"opjournal-reconciler": {"token": envFile(t, filepath.Join(secrets, "reconciler.env"))["OPJOURNAL_TOKEN"] + "\n"},
	}
	for name, keys := range secretKeys(t) {
		for k := range keys {
			if _, ok := values[name][k]; !ok {
				t.Fatalf("Secret %s key %s: this test has no value for it", name, k)
			}
		}
	}
	byName := map[string]container{}
	for _, c := range workloads(t) {
		byName[str(c.c, "name")] = c
	}
	journalAddr := ""
	cmdOf := func(name string) *exec.Cmd {
		t.Helper()
		c, ok := byName[name]
		if !ok {
			t.Fatalf("no container %s", name)
		}
		files := map[string]string{}
		vols := map[string]any{}
		for _, v := range list(c.pod, "volumes") {
			vols[str(v, "name")] = v
		}
		for _, m := range list(c.c, "volumeMounts") {
			v := vols[str(m, "name")]
			sn := str(v, "secret", "secretName")
			for _, it := range list(v, "secret", "items") {
				local := filepath.Join(dir, name, str(it, "path"))
				if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(local, []byte(values[sn][str(it, "key")]), 0o440); err != nil {
					t.Fatal(err)
				}
				files[path.Join(str(m, "mountPath"), str(it, "path"))] = local
			}
		}
		env := map[string]string{}
		for _, e := range list(c.c, "env") {
			if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
				env[str(e, "name")] = values[str(ref, "name")][str(ref, "key")]
			} else {
				env[str(e, "name")] = str(e, "value")
			}
		}
		cmdline := append(strs(c.c, "command"), strs(c.c, "args")...)
		cmd := exec.Command(filepath.Join(built(t), strings.TrimPrefix(cmdline[0], imageBinDir)), localArgs(cmdline[1:], files, journalAddr)...)
		cmd.Env = withEnv(env)
		return cmd
	}

	if out, err := runCmd(t, 30*time.Second, cmdOf("migrate")); err != nil {
		t.Fatalf("the migration Job's command: %v\n%s", err, out)
	}
	journal := cmdOf("journal")
	m := serving(t, journal)
	if m["store"] != "postgres" || m["auth"] != true {
		t.Errorf("the journal serves store=%v auth=%v", m["store"], m["auth"])
	}
	journalAddr, _ = m["grpc_addr"].(string)
	rec := cmdOf("reconciler")
	rec.Args = append(rec.Args, "--once")
	if out, err := runCmd(t, 30*time.Second, rec); err != nil {
		t.Errorf("the reconciler's command (--once): %v\n%s", err, out)
	}
	_ = journal.Process.Signal(syscall.SIGTERM)
	if err := journal.Wait(); err != nil {
		t.Errorf("the journal after SIGTERM: %v", err)
	}
}

// ---- the image with podman (make container-test) ------------------------------

// argDefault is the default of the Dockerfile's ARG name ("" without one).
func (df dockerfile) argDefault(name string) string {
	for _, in := range df.instructions {
		if in.cmd == "ARG" {
			if v, ok := strings.CutPrefix(in.args, name+"="); ok {
				return v
			}
		}
	}
	return ""
}

// qualifiedImage is an image reference as Docker and podman complete a
// short one: "golang:1.26" is docker.io/library/golang:1.26, "org/x" is
// docker.io/org/x; a first part with a dot or a port, or localhost, is a
// registry already.
func qualifiedImage(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return ref
	default:
		return "docker.io/" + ref
	}
}

// TestContainerBaseImageNames checks that scripts/container-base-images.sh,
// which builds the base images locally where no registry is reachable
// (make container-test, in CI), builds the ones the Dockerfile's FROM lines
// name, under the names podman looks them up by; otherwise podman build
// would try to pull and fail only in CI's container step. And that
// deploy/podman/containers.conf keeps the settings this machine's cgroups
// need to run a container.
func TestContainerBaseImageNames(t *testing.T) {
	root := repoRoot(t)
	df := parseDockerfile(t)
	goVersion := df.argDefault("GO_VERSION")
	want := []string{
		qualifiedImage(strings.ReplaceAll(df.images["build"], "${GO_VERSION}", goVersion)),
		qualifiedImage(df.images["base"]),
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "container-base-images.sh"), "--print-names")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/container-base-images.sh --print-names: %v\n%s", err, stderr.Bytes())
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, want) {
		t.Errorf("scripts/container-base-images.sh builds %q, the Dockerfile's build and base stages are FROM %q", got, want)
	}

	conf, err := os.ReadFile(filepath.Join(root, "deploy", "podman", "containers.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, setting := range []string{`default_ulimits = []`, `cgroup_manager = "cgroupfs"`, `runtime = "runc"`} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(setting) + `\s*$`).Match(conf) {
			t.Errorf("deploy/podman/containers.conf: no line %q (scripts/podman.sh runs containers with it)", setting)
		}
	}
}
