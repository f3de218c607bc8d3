package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCurlExample runs examples/curl.sh (the REST walk-through for users)
// against a real server: the documented protocol is the one that runs.
func TestCurlExample(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("examples/curl.sh needs %s (apt-get install %s)", tool, tool)
		}
	}
	srv := startServer(t, "--database-url", sqliteURL(t))
	cmd := exec.Command("bash", "../examples/curl.sh", srv.BaseURL)
	cmd.Env = childEnv(nil)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "all steps answered as expected") {
		t.Fatalf("examples/curl.sh: %v\n%s", err, out)
	}
}
