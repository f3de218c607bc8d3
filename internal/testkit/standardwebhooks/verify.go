// Package standardwebhooks verifies a webhook delivery with the Standard
// Webhooks project's own JavaScript library (npm package standardwebhooks,
// pinned in harness/e2e/standardwebhooks-node and installed by scripts/deps.sh):
// the tests' independent check of the journal's signatures, which shares
// no code with package webhook.
package standardwebhooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Verify runs harness/e2e/standardwebhooks-node/verify.mjs on one delivery, the
// headers and body as a receiver got them, with one whsec_ secret. It
// returns the payload the library verified, or its refusal as an error;
// it fails the test when the library is not installed.
func Verify(t testing.TB, secret string, h http.Header, body []byte) (map[string]any, error) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "harness", "e2e", "standardwebhooks-node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks")); err != nil {
		t.Fatalf("standardwebhooks is not installed: run scripts/deps.sh (npm ci in harness/e2e/standardwebhooks-node): %v", err)
	}
	in, err := json.Marshal(map[string]any{"secret": secret, "body": string(body), "headers": map[string]string{
		"webhook-id": h.Get("webhook-id"), "webhook-timestamp": h.Get("webhook-timestamp"),
		"webhook-signature": h.Get("webhook-signature")}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "verify.mjs")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		t.Fatalf("node verify.mjs: %v", err)
	}
	var payload map[string]any
	if err := json.Unmarshal(out, &payload); err != nil {
		t.Fatalf("verify.mjs printed %q: %v", out, err)
	}
	return payload, nil
}
