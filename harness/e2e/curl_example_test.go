package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/canonjson"
)

// TestCurlExample runs examples/curl.sh (the REST walk-through for users)
// against a real server with the shipped policy: the documented protocol
// is the one that runs. The README's walk-through ("The protocol with
// curl") is the script's first calls, request for request, and every
// answer it shows is checked against what the server answered in this
// run (readmeAnswer says how the shown text is read).
func TestCurlExample(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("examples/curl.sh needs %s (apt-get install %s)", tool, tool)
		}
	}
	srv := startServer(t, "--database-url", sqliteURL(t))
	transcript := filepath.Join(t.TempDir(), "transcript.jsonl")
	cmd := exec.Command("bash", "../../examples/curl.sh", srv.BaseURL)
	// The README's key, so that the answers are the README's.
	cmd.Env = childEnv([]string{"KEY=payment:order-817:intent-01", "OPJOURNAL_TRANSCRIPT=" + transcript})
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "all steps answered as expected") {
		t.Fatalf("examples/curl.sh: %v\n%s", err, out)
	}
	calls := readTranscript(t, transcript)

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := curlWalkthrough(t, string(readme))
	if len(shown) < 6 || len(shown) > len(calls) {
		t.Fatalf("the README's walk-through has %d calls, examples/curl.sh made %d", len(shown), len(calls))
	}
	for i, s := range shown {
		c := calls[i]
		where := fmt.Sprintf("README.md line %d (%s %s)", s.line, s.method, s.path)
		if s.method != c.Method || s.path != c.Path {
			t.Errorf("%s: examples/curl.sh's call %d is %s %s", where, i+1, c.Method, c.Path)
			continue
		}
		var req any
		if err := json.Unmarshal([]byte(s.body), &req); err != nil {
			t.Errorf("%s: the request body is not JSON: %v", where, err)
			continue
		}
		if !reflect.DeepEqual(req, c.Request) {
			t.Errorf("%s: the README sends %s, examples/curl.sh sends %s", where, compact(req), compact(c.Request))
		}
		if s.status != c.Status {
			t.Errorf("%s: the README shows HTTP %d, the server answered %d: %s", where, s.status, c.Status, compact(c.Response))
		}
		want, err := readmeAnswer(s.answer)
		if err != nil {
			t.Errorf("%s: the shown answer %s: %v", where, s.answer, err)
			continue
		}
		if problems := matchAnswer("", want, c.Response); len(problems) > 0 {
			t.Errorf("%s: the shown answer differs from the server's:\n  %s\nshown:  %s\nserver: %s", where, strings.Join(problems, "\n  "), s.answer, compact(c.Response))
		}
	}

	// The hash the README shows is the shipped policy's keyed one: the
	// server's differs from the plain SHA-256 of the request, and so must
	// the shown one (the README once showed the plain hash).
	first := calls[0].Request.(map[string]any)
	payload, _ := json.Marshal(first["payload"])
	plain, _, err := canonjson.RequestHash("create_payment", payload, canonjson.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := calls[0].Response.(map[string]any)["operation"].(map[string]any)["request_hash"].(string)
	if got == plain {
		t.Errorf("the server's request_hash %s is the plain SHA-256: the shipped create_payment policy keys it", got)
	}
	if m := regexp.MustCompile(`"request_hash":"([0-9a-f]+)…([0-9a-f]+)"`).FindStringSubmatch(shown[0].answer); m == nil {
		t.Errorf("the README's first answer shows no abbreviated request_hash: %s", shown[0].answer)
	} else if strings.HasPrefix(plain, m[1]) && strings.HasSuffix(plain, m[2]) {
		t.Errorf("the README shows the plain SHA-256 (%s…%s) as the request hash; the shipped policy's is keyed", m[1], m[2])
	}
}

// TestProtocolPageNamesEveryNextStep: the list of `next` values in
// docs/protocol.md is the server's enum, every value but UNSPECIFIED, by
// its wire name, and no page of the manual (README.md, docs/) names a
// `NEXT_STEP_…` the server does not have.
func TestProtocolPageNamesEveryNextStep(t *testing.T) {
	page, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for v, name := range pb.NextStep_name {
		if v == 0 {
			continue
		}
		if !strings.Contains(string(page), "`"+name+"`") {
			t.Errorf("docs/protocol.md never names `%s`", name)
		}
	}
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append([]string{"../../README.md"}, docs...) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("`(NEXT_STEP_[A-Z_]+)`").FindAllStringSubmatch(string(text), -1) {
			if _, ok := pb.NextStep_value[m[1]]; !ok {
				t.Errorf("%s names `%s`, which is no NextStep", strings.TrimPrefix(path, "../../"), m[1])
			}
		}
	}
}

// transcriptCall is one line of examples/curl.sh's OPJOURNAL_TRANSCRIPT.
type transcriptCall struct {
	Method   string `json:"method"`
	Path     string `json:"path"`
	Request  any    `json:"request"`
	Status   int    `json:"status"`
	Response any    `json:"response"`
}

func readTranscript(t *testing.T, path string) []transcriptCall {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var calls []transcriptCall
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var c transcriptCall
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("transcript line %q: %v", line, err)
		}
		calls = append(calls, c)
	}
	return calls
}

// shownCall is one curl command of the README's walk-through and the
// answer shown under it.
type shownCall struct {
	line         int
	method, path string
	body         string // the -d '…' JSON
	status       int    // "# HTTP 422" under the command; else 200
	answer       string // the "# {…}" lines, continuations ("#   …") joined by a space
}

// curlWalkthrough reads the curl commands of the README's section "The
// protocol with curl" and the answers shown under them: `# {` starts an
// answer, `#   ` continues it, `# HTTP nnn` gives its status. Every
// command must show its answer.
func curlWalkthrough(t *testing.T, readme string) []shownCall {
	t.Helper()
	start := strings.Index(readme, "\n### The protocol with curl\n")
	if start < 0 {
		t.Fatal(`README.md has no section "### The protocol with curl"`)
	}
	end := strings.Index(readme[start+1:], "\n## ")
	if end < 0 {
		t.Fatal(`README.md: nothing follows "The protocol with curl"`)
	}
	firstLine := strings.Count(readme[:start+1], "\n") + 1
	sc := bufio.NewScanner(strings.NewReader(readme[start+1 : start+1+end]))
	var (
		calls   []shownCall
		inBlock bool
		cur     *shownCall
		cmd     strings.Builder
		inCmd   bool
		n       = firstLine - 1
	)
	flushCmd := func() {
		text := cmd.String()
		cmd.Reset()
		inCmd = false
		m := regexp.MustCompile(`(?s)^curl -s (?:-X(\w+) )?localhost:8080(\S+?)\s*(?:\\\s*)?(?:-d '(.*)')?\s*$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("README.md line %d: a curl command this test cannot read: %s", cur.line, text)
		}
		cur.method, cur.path, cur.body = m[1], strings.Trim(m[2], "'"), m[3]
		if cur.method == "" {
			cur.method = "GET"
		}
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case line == "```sh" && !inBlock:
			inBlock = true
			continue
		case line == "```" && inBlock:
			inBlock = false
			continue
		case !inBlock:
			continue
		}
		switch {
		case strings.HasPrefix(line, "curl "):
			calls = append(calls, shownCall{line: n, status: 200})
			cur = &calls[len(calls)-1]
			cmd.WriteString(line)
			inCmd = true
		case inCmd:
			cmd.WriteString("\n" + line)
		case cur != nil && strings.HasPrefix(line, "# HTTP "):
			st, err := strconv.Atoi(strings.TrimPrefix(line, "# HTTP "))
			if err != nil {
				t.Fatalf("README.md line %d: %q", n, line)
			}
			cur.status = st
		case cur != nil && strings.HasPrefix(line, "# {"):
			cur.answer = strings.TrimPrefix(line, "# ")
		case cur != nil && cur.answer != "" && strings.HasPrefix(line, "#   "):
			cur.answer += " " + strings.TrimSpace(strings.TrimPrefix(line, "#"))
		}
		// A command ends with its line unless the line continues it (a
		// trailing backslash, or an open -d '…' string).
		if inCmd && !strings.HasSuffix(line, "\\") && strings.Count(cmd.String(), "'")%2 == 0 {
			flushCmd()
		}
	}
	for _, c := range calls {
		if c.answer == "" {
			t.Errorf("README.md line %d: the curl command shows no answer (# {…} under it)", c.line)
		}
	}
	return calls
}

// moreMembers is the member readmeAnswer puts where the README wrote
// "...": the object may have members it does not show.
const moreMembers = "(members not shown)"

// readmeAnswer reads a shown answer: JSON, except that "..." where a
// member would be stands for members left out. Without "...", an object
// shows all of its members.
func readmeAnswer(s string) (any, error) {
	text := strings.ReplaceAll(s, "...", `"`+moreMembers+`":true`)
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return nil, err
	}
	return v, nil
}

var (
	// digestAbbrev is how the README shows a SHA-256 or HMAC-SHA256: its
	// first and last hex digits around "…". It stands for any 64-digit hex
	// digest: a keyed hash differs with every server's key.
	digestAbbrev = regexp.MustCompile(`^[0-9a-f]+…[0-9a-f]+$`)
	digest       = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// matchAnswer compares the real value got with the shown want and says
// where they differ. Values are equal, except that a shown RFC 3339 time
// stands for any such time, an abbreviated digest (digestAbbrev) for any
// digest, and retry_after_seconds N for 1..N (the lease's remainder,
// rounded up, shrinks while a slow machine runs the script).
func matchAnswer(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: shown an object, the server's is %s", orRoot(path), compact(got))}
		}
		var problems []string
		_, more := w[moreMembers]
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if k == moreMembers {
				continue
			}
			gv, ok := g[k]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s.%s: shown, but not in the server's answer", path, k))
				continue
			}
			problems = append(problems, matchAnswer(path+"."+k, w[k], gv)...)
		}
		if !more {
			for _, k := range slices.Sorted(maps.Keys(g)) {
				if _, ok := w[k]; !ok {
					problems = append(problems, fmt.Sprintf("%s.%s: in the server's answer, not shown (and no \"...\")", path, k))
				}
			}
		}
		return problems
	case string:
		if g, ok := got.(string); ok {
			if _, err := time.Parse(time.RFC3339Nano, w); err == nil {
				if _, err := time.Parse(time.RFC3339Nano, g); err == nil {
					return nil
				}
			}
			if digestAbbrev.MatchString(w) && digest.MatchString(g) {
				return nil
			}
		}
	case float64:
		if g, ok := got.(float64); ok && strings.HasSuffix(path, ".retry_after_seconds") && g >= 1 && g <= w {
			return nil
		}
	}
	if !reflect.DeepEqual(want, got) {
		return []string{fmt.Sprintf("%s: shown %s, the server's is %s", orRoot(path), compact(want), compact(got))}
	}
	return nil
}

func orRoot(path string) string {
	if path == "" {
		return "the answer"
	}
	return path
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestQuickStartsHaveTheirOwnKeys: each quick start of docs/sdks.md (the
// blocks after <!-- test: quickstart -->, which scripts/fresh-clone.sh
// compares with the clients' READMEs and runs) uses an operation key of
// its own, never the README's curl walk-through's: run after the
// walk-through, a quick start on its key would replay the result typed in
// by hand instead of calling the provider.
func TestQuickStartsHaveTheirOwnKeys(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	sdks, err := os.ReadFile("../../docs/sdks.md")
	if err != nil {
		t.Fatal(err)
	}
	walk := curlWalkthrough(t, string(readme))
	var walkKey string
	if len(walk) > 0 {
		var req struct {
			Key string `json:"operation_key"`
		}
		if err := json.Unmarshal([]byte(walk[0].body), &req); err != nil || req.Key == "" {
			t.Fatalf("the walk-through's first request names no operation_key: %v", err)
		}
		walkKey = req.Key
	}
	blocks := regexp.MustCompile("(?s)<!-- test: quickstart -->\n```(\\w+)\n(.*?)```").FindAllStringSubmatch(string(sdks), -1)
	if len(blocks) < 2 {
		t.Fatalf("docs/sdks.md has %d quick start blocks, want the Python and the TypeScript one", len(blocks))
	}
	keyRE := regexp.MustCompile(`"(payment:[^"]+)"`)
	seen := map[string]string{}
	for _, b := range blocks {
		m := keyRE.FindAllStringSubmatch(b[2], -1)
		if len(m) != 1 {
			t.Errorf("the %s quick start has %d operation keys, want 1", b[1], len(m))
			continue
		}
		key := m[0][1]
		if key == walkKey {
			t.Errorf("the %s quick start uses the curl walk-through's key %s", b[1], key)
		}
		if other, ok := seen[key]; ok {
			t.Errorf("the %s and %s quick starts share the key %s", other, b[1], key)
		}
		seen[key] = b[1]
	}
}
