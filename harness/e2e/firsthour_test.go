//go:build linux

package e2e

// A new user's first hour: each test here runs a command the README or the
// manual tells a user to run, as written (only the addresses and the
// database file are the test's own, given by the documented OPJOURNAL_*
// variables or substituted for localhost:8080), against the real binaries.
// Each failed or misled a new user once.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// repoRoot is the repository's root, where the README's commands run.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// readDoc returns a file of the repository, by its path from the root.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// markedBlock returns the fenced block that follows `<!-- test: NAME -->`
// in a document: the commands a test runs as written.
func markedBlock(t *testing.T, doc, path, name string) string {
	t.Helper()
	_, after, ok := strings.Cut(doc, "<!-- test: "+name+" -->\n")
	if !ok {
		t.Fatalf("%s has no <!-- test: %s --> block", path, name)
	}
	after, ok = strings.CutPrefix(after, "```sh\n")
	if !ok {
		t.Fatalf("%s: the block after <!-- test: %s --> is not ```sh", path, name)
	}
	block, _, ok := strings.Cut(after, "\n```\n")
	if !ok {
		t.Fatalf("%s: the block after <!-- test: %s --> does not end", path, name)
	}
	return block + "\n"
}

// commandAt returns the command of a document that starts with prefix,
// with its continuation lines (after a trailing backslash, or inside a
// single-quoted string), as a shell reads it.
func commandAt(t *testing.T, doc, path, prefix string) string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		cmd := l
		for (strings.HasSuffix(strings.TrimSpace(cmd), "\\") || inQuotes(cmd)) && i+1 < len(lines) {
			i++
			cmd += "\n" + lines[i]
		}
		return cmd
	}
	t.Fatalf("%s no longer has a command starting %q", path, prefix)
	return ""
}

// inQuotes reports whether a shell reading cmd is still inside a quoted
// string at its end (a payload written over several lines).
func inQuotes(cmd string) bool {
	var quote rune
	for _, r := range cmd {
		switch {
		case quote == 0 && (r == '\'' || r == '"'):
			quote = r
		case r == quote:
			quote = 0
		}
	}
	return quote != 0
}

// shellResult is what a documented command did.
type shellResult struct {
	code           int
	stdout, stderr string
}

// runShell runs script with bash -e in dir, the e2e binaries first on the
// PATH and env added, to completion.
func runShell(t *testing.T, dir, script string, env ...string) shellResult {
	t.Helper()
	cmd := exec.CommandContext(ctxFor(t), "bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = childEnv(append([]string{"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH")}, env...))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("bash -c %q: %v", script, err)
	}
	return shellResult{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// events returns the history of an operation.
func events(t *testing.T, ctx context.Context, c pb.JournalServiceClient, key string) []*pb.Event {
	t.Helper()
	res, err := c.ListEvents(ctx, &pb.ListEventsRequest{OperationKey: key})
	if err != nil {
		t.Fatalf("ListEvents %q: %v", key, err)
	}
	return res.GetEvents()
}

// TestManualIndexLinksEveryPage: every page of the manual (docs/ and its
// folders) is linked from the index, docs/README.md, and the README links
// every integration page, so that a page added later (the TypeScript
// adapters once were) is not one nobody can find.
func TestManualIndexLinksEveryPage(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	linked := func(path string) map[string]bool {
		out := map[string]bool{}
		for _, m := range mdLink.FindAllStringSubmatch(readDoc(t, path), -1) {
			target, _, _ := strings.Cut(m[1]+m[2], "#")
			if target == "" || strings.Contains(target, "://") {
				continue
			}
			rel, err := filepath.Rel(root, filepath.Join(root, filepath.Dir(path), target))
			if err == nil {
				out[filepath.ToSlash(rel)] = true
			}
		}
		return out
	}
	index, readme := linked("docs/README.md"), linked("README.md")
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	sub, _ := filepath.Glob(filepath.Join(root, "docs", "*", "*.md"))
	if len(pages) < 10 || len(sub) < 6 {
		t.Fatalf("found %d pages and %d in folders: not the manual", len(pages), len(sub))
	}
	for _, p := range append(pages, sub...) {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "docs/README.md" {
			continue
		}
		if !index[rel] {
			t.Errorf("docs/README.md does not link %s", rel)
		}
		if strings.HasPrefix(rel, "docs/integrations/") && !readme[rel] {
			t.Errorf("README.md does not link %s", rel)
		}
	}
}

// mdLink is a Markdown link's target or an HTML href/src.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)|(?:href|src)="([^"]+)"`)

// TestOpsResolveAsDocumented: docs/operating.md's `opjournal ops resolve
// KEY --succeeded …`, copied as written, works on the quick start's journal
// (no --auth-file), where the journal knows no one: the history records
// local-admin, the name WhoAmI and the console give an unauthenticated
// caller. With a token the principal is the actor and the command states
// nothing. A refusal of --actor names the flag.
func TestOpsResolveAsDocumented(t *testing.T) {
	t.Parallel()
	doc := readDoc(t, "docs/operating.md")
	resolve := commandAt(t, doc, "docs/operating.md", "opjournal ops resolve payment:order-817:intent-01 --succeeded")
	if strings.Contains(resolve, "--actor") {
		t.Fatalf("the documented command gives --actor; this test is of the command without it:\n%s", resolve)
	}
	const key = "payment:order-817:intent-01"
	unknown := func(t *testing.T, ctx context.Context, c pb.JournalServiceClient, key string) {
		t.Helper()
		if _, err := c.Register(ctx, &pb.RegisterRequest{OperationKey: key, ActionType: "create_payment",
			Payload: mustStruct(t, `{"order_id": "817", "amount_minor": 490000, "currency": "RUB"}`), Claim: &pb.ClaimOptions{WorkerId: "agent-1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.MarkUnknown(ctx, &pb.MarkUnknownRequest{OperationKey: key, Attempt: 1, ErrorCode: "timeout"}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("quick start journal", func(t *testing.T) {
		t.Parallel()
		srv := startServer(t, "--database-url", sqliteURL(t))
		ctx := ctxFor(t)
		unknown(t, ctx, srv.Client, key)
		r := runShell(t, t.TempDir(), resolve, "OPJOURNAL_JOURNAL_ADDR="+srv.GRPCAddr)
		if r.code != 0 || r.stdout != key+" resolved as succeeded\n" {
			t.Fatalf("%s\nexit %d\nstdout:\n%s\nstderr:\n%s", resolve, r.code, r.stdout, r.stderr)
		}
		op := lookup(t, ctx, srv.Client, key)
		evs := events(t, ctx, srv.Client, key)
		last := evs[len(evs)-1]
		if op.GetStatus() != pb.Status_STATUS_SUCCEEDED || op.GetExternalId() != "pay_42" ||
			last.GetActor() != "local-admin" || !strings.HasSuffix(last.GetReason(), ": seen in the provider's dashboard") {
			t.Fatalf("after the documented resolve: %v %q; last event %v", op.GetStatus(), op.GetExternalId(), last)
		}

		// A refused --actor is named as the flag, and changes nothing.
		unknown(t, ctx, srv.Client, "payment:order-818:intent-01")
		long := strings.Repeat("a", 201)
		r = runShell(t, t.TempDir(), "opjournal ops resolve payment:order-818:intent-01 --failed-final --reason declined --actor "+long,
			"OPJOURNAL_JOURNAL_ADDR="+srv.GRPCAddr)
		want := "opjournal: ops resolve: INVALID_ARGUMENT: --actor: is 201 characters; the limit is 200"
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Fatalf("resolve with a 201-character --actor: exit %d, stderr:\n%s\nwant %q", r.code, r.stderr, want)
		}
		if st := lookup(t, ctx, srv.Client, "payment:order-818:intent-01").GetStatus(); st != pb.Status_STATUS_UNKNOWN {
			t.Fatalf("a refused resolve changed the operation: %v", st)
		}
	})

	t.Run("with a token", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		file := filepath.Join(dir, "tokens.yaml")
		mint := func(args ...string) string {
			code, out, errOut := runSplit(t, nil, "opjournal", append([]string{"token", "--append", file}, args...)...)
			if code != 0 {
				t.Fatalf("opjournal token %v: exit %d\n%s", args, code, errOut)
			}
			return strings.TrimSpace(out)
		}
		agent, alice := mint("--name", "agent-1"), mint("--name", "alice", "--roles", "operator")
		srv := startServer(t, "--database-url", sqliteURL(t), "--auth-file", file)
		ctx := ctxFor(t)
		unknown(t, metadataWithToken(ctx, agent), srv.Client, key)
		r := runShell(t, t.TempDir(), resolve, "OPJOURNAL_JOURNAL_ADDR="+srv.GRPCAddr, "OPJOURNAL_TOKEN="+alice)
		if r.code != 0 {
			t.Fatalf("%s\nexit %d\n%s", resolve, r.code, r.stderr)
		}
		evs := events(t, metadataWithToken(ctx, alice), srv.Client, key)
		last := evs[len(evs)-1]
		if last.GetActorLabel() != "alice" || last.GetActor() == "local-admin" || last.GetStatedActor() != "" {
			t.Fatalf("with a token the principal is the actor and nothing is stated; last event %v", last)
		}
	})
}

// TestServeAsTheReadmeSays: the README's commands that start the server
// (go run, go run -v, go install -v then the binary) start it as written,
// from the repository's root. The addresses and the database are the
// test's own, through the OPJOURNAL_* variables every flag reads; GOBIN is a
// temporary folder first on the PATH, as $(go env GOPATH)/bin is on the
// user's. The build cache is the test run's, so no command here compiles
// from scratch (the README's minutes are those of an empty cache).
func TestServeAsTheReadmeSays(t *testing.T) {
	t.Parallel()
	readme := readDoc(t, "README.md")
	quick, _, _ := strings.Cut(readme[strings.Index(readme, "## Quick start"):], "### The protocol with curl")
	var commands []string
	for l := range strings.Lines(quick) {
		if strings.HasPrefix(l, "go run ") || strings.HasPrefix(l, "go install -v ./cmd/opjournal") {
			commands = append(commands, strings.TrimSpace(l))
		}
	}
	if len(commands) != 3 {
		t.Fatalf("the README's quick start has %d commands that start the server, want go run, go run -v and go install -v: %q", len(commands), commands)
	}
	for _, command := range commands {
		name, _, _ := strings.Cut(command, " ./cmd/")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			gobin := t.TempDir()
			cmd := exec.Command("bash", "-c", command)
			cmd.Dir = repoRoot(t)
			cmd.Env = childEnv([]string{"OPJOURNAL_DATABASE_URL=" + sqliteURL(t), "OPJOURNAL_GRPC_ADDR=127.0.0.1:0",
				"OPJOURNAL_HTTP_ADDR=127.0.0.1:0", "GOBIN=" + gobin, "PATH=" + gobin + string(os.PathListSeparator) + os.Getenv("PATH")})
			// Its own process group: go run's child is the server.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Wait()
			})
			serving := make(chan servingLine, 1)
			var log strings.Builder
			go func() {
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					log.WriteString(sc.Text() + "\n")
					var l servingLine
					if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "serving" && l.HTTPAddr != "" {
						serving <- l
					}
				}
				close(serving)
			}()
			// Bounded by a build from a warm cache on two busy cores; the
			// line comes as soon as the server listens.
			var line servingLine
			select {
			case l, ok := <-serving:
				if !ok {
					t.Fatalf("%s exited before serving", command)
				}
				line = l
			case <-time.After(5 * time.Minute):
				t.Fatalf("%s: no serving line after 5 minutes", command)
			}
			t.Logf("%s: serving after %v", command, time.Since(start).Round(time.Millisecond))
			res, err := http.Get("http://" + line.HTTPAddr + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || line.Store != "sqlite" || !slices.Contains(line.Actions, "create_payment") {
				t.Fatalf("%s: /healthz %d, serving line %+v", command, res.StatusCode, line)
			}
		})
	}
}

// TestApprovalsWalkthrough: docs/approvals.md's "Try it", as written, on
// the real binary started with the example policy it names: the agent's
// registration waits for a person; a wrong hash is refused and says so,
// naming --hash, and changes nothing; the person (local-admin, not the
// agent) approves the exact request; the agent's next call wins the one
// attempt, and another worker's does not.
func TestApprovalsWalkthrough(t *testing.T) {
	t.Parallel()
	const path = "docs/approvals.md"
	doc := readDoc(t, path)
	serve := commandAt(t, doc, path, "opjournal serve --policy ")
	args := strings.Fields(strings.TrimSpace(strings.SplitN(serve, "#", 2)[0]))
	if len(args) != 4 || args[2] != "--policy" {
		t.Fatalf("%s: the start command is %q", path, serve)
	}
	srv := startServerOpts(t, serverOpts{Dir: repoRoot(t)}, append(args[2:], "--database-url", sqliteURL(t))...)
	ctx := ctxFor(t)
	block := markedBlock(t, doc, path, "approvals walkthrough")
	if !strings.Contains(block, "localhost:8080") {
		t.Fatalf("%s: the walkthrough no longer calls localhost:8080", path)
	}
	const key = "payment:order-900:intent-01"

	// First the registration alone: the request waits, a wrong hash changes nothing.
	register := commandAt(t, block, path, "curl -s -XPOST localhost:8080/v1/operations:register")
	register = strings.ReplaceAll(register, "localhost:8080", srv.HTTPAddr)
	r := runShell(t, t.TempDir(), register)
	var answer struct {
		Operation struct{ Status string }
		Claimed   bool
		Next      string
	}
	if err := json.Unmarshal([]byte(r.stdout), &answer); err != nil || answer.Operation.Status != "STATUS_AWAITING_APPROVAL" ||
		answer.Claimed || answer.Next != "NEXT_STEP_AWAIT_APPROVAL" {
		t.Fatalf("the walkthrough's registration: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	held := lookup(t, ctx, srv.Client, key)
	wrong := strings.Repeat("0", 64)
	r = runShell(t, t.TempDir(), fmt.Sprintf("opjournal ops approve %s --hash %s --reason ok", key, wrong), "OPJOURNAL_JOURNAL_ADDR="+srv.GRPCAddr)
	want := fmt.Sprintf("opjournal: ops approve: PAYLOAD_MISMATCH: --hash: is not the request hash of operation %q", key)
	if r.code != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "AlreadyExists") {
		t.Fatalf("approve with another hash: exit %d\n%s\nwant %q", r.code, r.stderr, want)
	}
	if op := lookup(t, ctx, srv.Client, key); op.GetStatus() != pb.Status_STATUS_AWAITING_APPROVAL || !op.GetUpdatedAt().AsTime().Equal(held.GetUpdatedAt().AsTime()) ||
		len(events(t, ctx, srv.Client, key)) != 1 {
		t.Fatalf("a refused approval changed the operation: %v", op)
	}

	// Then the whole block as written (its registration again is a replay
	// of the same request: still waiting).
	script := strings.ReplaceAll(block, "localhost:8080", srv.HTTPAddr)
	r = runShell(t, t.TempDir(), script, "OPJOURNAL_JOURNAL_ADDR="+srv.GRPCAddr)
	if r.code != 0 {
		t.Fatalf("the walkthrough exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		`"status":"STATUS_AWAITING_APPROVAL"`, `"next":"NEXT_STEP_AWAIT_APPROVAL"`, // the first curl
		key + "  create_payment  awaiting_approval",                                             // ops list
		"required (payload.amount_minor > 100000); by operator or admin", held.GetRequestHash(), // ops show
		key + " approved: now pending\n",                                    // ops approve
		`"claimed":true`, `"attempt":1`, `"next":"NEXT_STEP_CALL_PROVIDER"`, // the agent's next call
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the walkthrough's output lacks %q:\n%s", want, r.stdout)
		}
	}
	// Once: another worker gets no attempt, and the history says who did what.
	res, err := srv.Client.Claim(ctx, &pb.ClaimRequest{OperationKey: key, WorkerId: "agent-2"})
	if err != nil || res.GetClaimed() {
		t.Fatalf("a second worker's claim: %v %v", res, err)
	}
	op := lookup(t, ctx, srv.Client, key)
	if op.GetStatus() != pb.Status_STATUS_IN_PROGRESS || op.GetAttemptCount() != 1 || op.GetLeaseOwner() != "agent-1" {
		t.Fatalf("after the walkthrough: %v attempt %d owner %q", op.GetStatus(), op.GetAttemptCount(), op.GetLeaseOwner())
	}
	var who []string
	for _, e := range events(t, ctx, srv.Client, key) {
		who = append(who, strings.ToLower(strings.TrimPrefix(e.GetToStatus().String(), "STATUS_"))+" by "+e.GetActor())
	}
	if !slices.Equal(who, []string{"awaiting_approval by agent-1", "pending by local-admin", "in_progress by agent-1"}) {
		t.Fatalf("history: %q", who)
	}
}

// TestApprovalExamplePolicyIsTheShippedOne: examples/policies/approvals.yaml
// is the shipped policy's create_payment (its settings; the comments are
// each file's own) and an approval block, nothing else, so trying
// approvals with it behaves as the quick start does.
func TestApprovalExamplePolicyIsTheShippedOne(t *testing.T) {
	t.Parallel()
	action := func(text, name string) string {
		_, after, ok := strings.Cut(text, "\n  "+name+":\n")
		if !ok {
			t.Fatalf("no action %s", name)
		}
		var lines []string
		for l := range strings.Lines(after) {
			if !strings.HasPrefix(l, "    ") && strings.TrimSpace(l) != "" {
				break
			}
			// The settings, not their comments: each file explains itself.
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				lines = append(lines, l)
			}
		}
		return strings.TrimRight(strings.Join(lines, ""), "\n")
	}
	example := action(readDoc(t, "examples/policies/approvals.yaml"), "create_payment")
	shipped := action(readDoc(t, "protocol/policy/default.yaml"), "create_payment")
	// The example's approval block, cut out.
	start := strings.Index(example, "    approval:\n")
	end := strings.Index(example, "    integer_fields:")
	if start < 0 || end < start || !strings.HasPrefix(example[start:end], "    approval:\n      when: ") {
		t.Fatalf("the example's create_payment has no approval block where expected:\n%s", example)
	}
	if rest := example[:start] + example[end:]; rest != shipped {
		t.Fatalf("the example's create_payment, without its approval block, is not the shipped one:\n%s\n---\n%s", rest, shipped)
	}
}

// TestAPIDocListsEveryRPC: docs/api.md's table of RPCs and routes has one
// row per RPC of journal.proto, WhoAmI included, with its HTTP mapping.
func TestAPIDocListsEveryRPC(t *testing.T) {
	t.Parallel()
	var rpcs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*rpc (\w+)\(`).FindAllStringSubmatch(readDoc(t, "proto/opjournal/v1/journal.proto"), -1) {
		rpcs = append(rpcs, m[1])
	}
	routes := map[string]string{}
	mapping := readDoc(t, "proto/opjournal/v1/journal_http.yaml")
	for _, m := range regexp.MustCompile(`selector: opjournal\.v1\.JournalService\.(\w+)\n\s+(get|post): (\S+)`).FindAllStringSubmatch(mapping, -1) {
		routes[m[1]] = strings.ToUpper(m[2]) + " " + m[3]
	}
	table := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(\\w+)` \\| `(GET|POST) ([^` ?]+)").FindAllStringSubmatch(readDoc(t, "docs/api.md"), -1) {
		table[m[1]] = m[2] + " " + m[3]
	}
	if len(rpcs) < 15 {
		t.Fatalf("journal.proto has %d RPCs: not the service", len(rpcs))
	}
	for _, rpc := range rpcs {
		switch got, ok := table[rpc]; {
		case !ok:
			t.Errorf("docs/api.md's table has no row for %s (%s)", rpc, routes[rpc])
		case got != routes[rpc]:
			t.Errorf("docs/api.md maps %s to %q; journal_http.yaml to %q", rpc, got, routes[rpc])
		}
	}
	for name := range table {
		if !slices.Contains(rpcs, name) {
			t.Errorf("docs/api.md's table lists %s, which journal.proto does not have", name)
		}
	}
}

// TestOpenAPILintsCleanInRedocly: the document a real server serves at
// /openapi.json passes Redocly CLI's default lint (its recommended rules)
// with no error and no warning, as docs/api.md says, run from the pinned
// copy in harness/e2e/redocly (npm ci from its lock file: scripts/deps.sh).
// Its servers entry is relative, so it names the server it came from.
func TestOpenAPILintsCleanInRedocly(t *testing.T) {
	t.Parallel()
	doc := readDoc(t, "docs/api.md")
	lint := "npx redocly lint http://127.0.0.1:8080/openapi.json"
	if !strings.Contains(doc, "`"+lint+"`") {
		t.Fatalf("docs/api.md no longer says `%s`", lint)
	}
	dir, err := filepath.Abs("redocly")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "redocly")); err != nil {
		t.Fatalf("Redocly CLI is not installed: run scripts/deps.sh (npm ci in harness/e2e/redocly): %v", err)
	}
	srv := startServer(t, "--database-url", sqliteURL(t))
	var served struct {
		Servers []struct{ URL string } `json:"servers"`
	}
	if err := json.Unmarshal(do(t, "GET", srv.BaseURL+"/openapi.json", nil).Body, &served); err != nil ||
		len(served.Servers) != 1 || served.Servers[0].URL != "/" {
		t.Fatalf("/openapi.json's servers: %+v %v", served.Servers, err)
	}
	// No telemetry and no update check: the test talks to nothing but the server.
	r := runShell(t, dir, strings.ReplaceAll(lint, "127.0.0.1:8080", srv.HTTPAddr),
		"REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out := r.stdout + r.stderr
	if r.code != 0 || !strings.Contains(out, "Your API description is valid") || strings.Contains(strings.ToLower(out), "warning was generated") ||
		regexp.MustCompile(`(?i)\d+ warnings?\b`).MatchString(out) {
		t.Fatalf("redocly lint: exit %d\n%s", r.code, out)
	}
}
