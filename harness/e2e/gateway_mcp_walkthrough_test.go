package e2e

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/internal/testkit/procs"
)

// docBlock returns the lines of the first ```sh block after marker in
// page, a command continued (a trailing backslash, an open quote) joined
// into one line, the lines that only show an answer ("# …") left out.
func docBlock(t *testing.T, page, marker string) []string {
	t.Helper()
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("no %q in the page", marker)
	}
	rest := page[i:]
	start := strings.Index(rest, "```sh\n")
	end := strings.Index(rest[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatalf("no sh block after %q", marker)
	}
	var lines []string
	cont := false
	for line := range strings.Lines(rest[start+6 : start+6+end]) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "# ") {
			continue
		}
		if cont {
			lines[len(lines)-1] += "\n" + line
		} else {
			lines = append(lines, line)
		}
		// A command goes on after a trailing backslash or inside a quote.
		cont = strings.HasSuffix(line, "\\") || strings.Count(lines[len(lines)-1], "'")%2 == 1
	}
	return lines
}

// asBinary turns a documented `go run ./cmd/NAME ARGS  # comment` (or
// `go -C harness run ./cmd/NAME …`, `go run ./examples/NAME …`) into the
// binary the harness built from the same source and the arguments as
// written.
func asBinary(t *testing.T, line string) (name string, args []string) {
	t.Helper()
	if i := strings.Index(line, "  #"); i >= 0 {
		line = line[:i]
	}
	f := strings.Fields(line)
	if len(f) >= 3 && f[0] == "go" && f[1] == "-C" && f[2] == "harness" {
		f = append([]string{"go"}, f[3:]...)
	}
	if len(f) < 3 || f[0] != "go" || f[1] != "run" || !(strings.HasPrefix(f[2], "./cmd/") || strings.HasPrefix(f[2], "./examples/")) {
		t.Fatalf("not a go run command: %q", line)
	}
	return filepath.Base(f[2]), f[3:]
}

// TestGatewayLocalWalkthrough runs docs/gateway.md's "Try it locally" as
// written, on the ports it names (the quick start's): the journal of
// `opjournal serve`, the test provider with --mcp, the gateway, whose
// command is the MCP example of `opjournal-gateway --help` (exactly), and
// the reconciler without flags. The page's curl call, run twice, makes
// one payment and is replayed the second time. Then
// examples/mcp-server runs with no flags against the same journal and
// provider (docs/integrations/go-mcp-server.md) and protects its call.
func TestGatewayLocalWalkthrough(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:9090", "127.0.0.1:8080", "127.0.0.1:8099", "127.0.0.1:8082"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the walkthrough needs %s, the quick start's port, and it is taken: %v", addr, err)
		}
		ln.Close()
	}
	page, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := docBlock(t, string(page), "<!-- local walkthrough: run as written")
	if len(cmds) != 3 {
		t.Fatalf("the walkthrough has %d commands, want 3: %q", len(cmds), cmds)
	}
	dir := t.TempDir() // the journal's ./opjournal.db
	start := func(name string, args []string, ready string) *procs.Proc {
		t.Helper()
		p, err := procs.Start(ctxFor(t), procs.Spec{Name: name, Path: filepath.Join(binDir, name), Args: args, Dir: dir, Env: childEnv(nil), Ready: ready}, startTimeout)
		if err != nil {
			t.Fatalf("%s %q: %v", name, args, err)
		}
		t.Cleanup(func() {
			_ = p.Stop(stopTimeout)
			if t.Failed() {
				t.Logf("%s output:\n%s", name, p.Output())
			}
		})
		return p
	}
	var gatewayArgs []string
	for _, c := range cmds {
		name, args := asBinary(t, c)
		if name == "opjournal-gateway" {
			gatewayArgs = args
		}
		start(name, args, "serving")
	}

	// `opjournal-gateway --help` shows this very command as its MCP example.
	help, err := exec.Command(filepath.Join(binDir, "opjournal-gateway"), "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "opjournal-gateway " + strings.Join(gatewayArgs, " ")
	if !strings.Contains(string(help), "\n  "+want+"\n") {
		t.Fatalf("the help's MCP example is not the walkthrough's command %q:\n%s", want, help)
	}
	name, args := asBinary(t, "go run ./cmd/opjournal-reconciler")
	start(name, args, "reconciling")

	call := docBlock(t, string(page), "<!-- local walkthrough call -->")
	if len(call) != 1 {
		t.Fatalf("the walkthrough's call: %q", call)
	}
	type answer struct {
		Result struct {
			IsError bool `json:"isError"`
			Meta    map[string]struct {
				Key      string `json:"operation_key"`
				Replayed bool   `json:"replayed"`
				Outcome  string `json:"outcome"`
			} `json:"_meta"`
		} `json:"result"`
	}
	var outs []string
	curl := func() answer {
		t.Helper()
		out, err := exec.CommandContext(ctxFor(t), "bash", "-c", call[0]).Output()
		var a answer
		if err != nil || json.Unmarshal(out, &a) != nil {
			t.Fatalf("the walkthrough's curl: %v: %s", err, out)
		}
		outs = append(outs, string(out))
		return a
	}
	first, again := curl(), curl()
	// The answer the page shows is the first one's, "…" standing for
	// what differs from run to run or is left out.
	_, shown, _ := strings.Cut(string(page)[strings.Index(string(page), "<!-- local walkthrough call -->"):], "\n# ")
	shown, _, _ = strings.Cut(shown, "\n")
	if !strings.HasPrefix(shown, `{"jsonrpc":"2.0"`) {
		t.Fatalf("the page shows no answer after its call: %q", shown)
	}
	rest := outs[0]
	for _, part := range strings.Split(shown, "…") {
		i := strings.Index(rest, part)
		if i < 0 {
			t.Fatalf("the page shows %q, the gateway answered %s (from %q on)", shown, outs[0], part)
		}
		rest = rest[i+len(part):]
	}
	m1, m2 := first.Result.Meta["opjournal/operation"], again.Result.Meta["opjournal/operation"]
	if first.Result.IsError || m1.Outcome != "succeeded" || m1.Replayed || !strings.HasPrefix(m1.Key, "mcp:create_payment:anon:f:") {
		t.Fatalf("first call: %+v", first)
	}
	if again.Result.IsError || !m2.Replayed || m2.Key != m1.Key {
		t.Fatalf("second call: %+v", again)
	}
	prov := fakeprovider.NewControlClient("http://127.0.0.1:8099", nil)
	if n, err := prov.Count(ctxFor(t), m1.Key); err != nil || n != 1 {
		t.Fatalf("the provider holds %d payments under %s (%v), want 1", n, m1.Key, err)
	}

	t.Run("examples/mcp-server without flags", func(t *testing.T) {
		name, args := asBinary(t, "go run ./examples/mcp-server")
		cmd := exec.Command(filepath.Join(binDir, name), args...)
		cmd.Env = childEnv(nil)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "local-agent", Version: "1"}, nil).Connect(ctxFor(t), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctxFor(t), &mcp.CallToolParams{Name: "create_payment", Arguments: map[string]any{"order_id": "walk-2", "amount_minor": 300, "currency": "EUR"}})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := res.Meta["opjournal/operation"].(map[string]any)
		key, _ := m["operation_key"].(string)
		if res.IsError || !strings.HasPrefix(key, "mcp:create_payment:stdio:f:") {
			t.Fatalf("create_payment through examples/mcp-server: %+v", res)
		}
		if n, err := prov.Count(ctxFor(t), key); err != nil || n != 1 {
			t.Fatalf("the provider holds %d payments under %s (%v), want 1", n, key, err)
		}
	})
}
