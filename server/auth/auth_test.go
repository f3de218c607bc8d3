package auth_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opjournal/opjournal/server/auth"
)

func file(entries ...string) []byte {
	return []byte("tokens:\n" + strings.Join(entries, ""))
}

func entry(name, token, tenant, roles string) string {
	return fmt.Sprintf("  - name: %s\n    sha256: %s\n    tenant: %s\n    roles: [%s]\n", name, auth.Digest(token), tenant, roles)
}

func TestAuthenticateAndRoles(t *testing.T) {
	t.Parallel()
	a, err := auth.Parse(file(
		entry("pay-agent", "tok-agent-0123456789abcdef", "payments", "agent"),
		entry("pay-rec", "tok-rec-0123456789abcdef", "payments", "reconciler"),
		entry("alice", "tok-op-0123456789abcdef", "payments", "operator"),
		entry("root", "tok-admin-0123456789abcdef", "payments", "admin"),
	), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate("tok-agent-0123456789abcdef")
	if err != nil || p.Name != "pay-agent" || p.Tenant != "payments" {
		t.Fatalf("agent: %+v %v", p, err)
	}
	if _, err := a.Authenticate(""); !errors.Is(err, auth.ErrNoToken) {
		t.Fatalf("empty token: %v", err)
	}
	if _, err := a.Authenticate("tok-agent-0123456789abcdeF"); !errors.Is(err, auth.ErrBadToken) {
		t.Fatalf("wrong token: %v", err)
	}
	allowed := map[string][]string{
		"pay-agent": {"Register", "Claim", "MarkSucceeded", "MarkUnknown", "MarkFailedFinal", "Lookup"},
		"pay-rec":   {"MarkSucceeded", "Lookup", "ListOperations", "ReleaseForRetry", "RecordCheck", "Escalate", "ListEvents"},
		"alice":     {"Lookup", "ListOperations", "ReleaseForRetry", "Escalate", "Resolve", "ListEvents"},
		"root":      {"Register", "Claim", "MarkSucceeded", "MarkUnknown", "MarkFailedFinal", "Lookup", "ListOperations", "ReleaseForRetry", "RecordCheck", "Escalate", "Resolve", "ListEvents"},
	}
	all := allowed["root"]
	for _, tok := range []string{"tok-agent-0123456789abcdef", "tok-rec-0123456789abcdef", "tok-op-0123456789abcdef", "tok-admin-0123456789abcdef"} {
		p, _ := a.Authenticate(tok)
		for _, m := range all {
			want := false
			for _, ok := range allowed[p.Name] {
				want = want || ok == m
			}
			if got := p.Allowed(m); got != want {
				t.Errorf("%s may call %s: %v, want %v", p.Name, m, got, want)
			}
		}
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "abc": "", "": ""} {
		if got := auth.BearerToken(in); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRefusesBadFiles(t *testing.T) {
	t.Parallel()
	good := entry("a", "tok-0123456789abcdef0123", "t", "agent")
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"empty":          {"", "EOF"},
		"no tokens":      {"tokens: []\n", "no tokens"},
		"unknown field":  {"tokens:\n  - name: a\n    token: secret\n", "field token not found"},
		"plain token":    {"tokens:\n  - name: a\n    sha256: my-secret-token\n    roles: [agent]\n", "never the token itself"},
		"uppercase hex":  {"tokens:\n  - name: a\n    sha256: " + strings.ToUpper(auth.Digest("x")) + "\n    roles: [agent]\n", "lowercase hex"},
		"no roles":       {"tokens:\n  - name: a\n    sha256: " + auth.Digest("x") + "\n", "roles"},
		"unknown role":   {strings.Replace(string(file(good)), "[agent]", "[root]", 1), `unknown role "root"`},
		"duplicate name": {string(file(good, strings.Replace(good, auth.Digest("tok-0123456789abcdef0123"), auth.Digest("other"), 1))), "duplicate name"},
		"same digest":    {string(file(good, strings.Replace(good, "name: a", "name: b", 1))), "listed twice"},
		"bad name":       {"tokens:\n  - name: 'a b'\n    sha256: " + auth.Digest("x") + "\n    roles: [agent]\n", "name must be"},
	} {
		_, err := auth.Parse([]byte(tc.data), "tokens.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tokens.yaml") {
			t.Errorf("%s: got %v, want an error naming the file and %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "my-secret-token") {
			t.Errorf("%s: the error repeats the secret: %v", name, err)
		}
	}
}

// FuzzParse: a tokens file is untrusted input to the server's start;
// parsing never panics, and an accepted file authenticates its own tokens
// only by digest.
func FuzzParse(f *testing.F) {
	f.Add(file(entry("a", "tok-0123456789abcdef0123", "t", "agent,operator")))
	f.Add([]byte("tokens:\n  - {name: x, sha256: " + auth.Digest("y") + ", roles: [admin]}\n"))
	f.Add([]byte("tokens: [&a {name: x}, *a]"))
	f.Add([]byte("tokens:\n  - name: a\n    sha256: 0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := auth.Parse(data, "fuzz.yaml")
		if err != nil {
			return
		}
		if _, err := a.Authenticate(""); !errors.Is(err, auth.ErrNoToken) {
			t.Fatalf("empty token accepted: %v", err)
		}
	})
}

func TestTenantsListsEveryTokensTenantOnce(t *testing.T) {
	t.Parallel()
	a, err := auth.Parse(file(
		entry("pay-agent", "tok-agent-0123456789abcdef", "payments", "agent"),
		entry("pay-op", "tok-op-0123456789abcdef", "payments", "operator"),
		entry("mail-agent", "tok-mail-0123456789abcdef", "mail", "agent"),
	), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(a.Tenants(), ","); got != "mail,payments" {
		t.Errorf("Tenants = %q, want mail,payments", got)
	}
}
