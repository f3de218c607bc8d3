package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/store/sqlite"
)

// TestSessionEndsWhenTheTokenIsNoLongerListed: a session checks on every
// request that the tokens file still lists its token under the same name;
// with a tokens file that does not (as a reload would bring), it ends.
func TestSessionEndsWhenTheTokenIsNoLongerListed(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tokens := func(name string) *auth.Authenticator {
		a, err := auth.Parse([]byte("tokens:\n  - name: "+name+"\n    sha256: "+auth.Digest("tok-session-oper")+"\n    tenant: team-a\n    roles: [operator]\n"), "tokens.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	c, err := New(Config{Service: journal.New(st, policy.Default(), journal.Limits{}), Auth: tokens("alice"),
		HTTPStatus: func(opjournal.Code) int { return http.StatusBadRequest }})
	if err != nil {
		t.Fatal(err)
	}
	queues := func(id string) int {
		r := httptest.NewRequest(http.MethodGet, Prefix+"queues", nil)
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: id})
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w.Code
	}
	for _, swap := range []struct {
		what string
		auth *auth.Authenticator
	}{
		{"a tokens file without the token", nil},
		{"a tokens file listing the token under another name", tokens("mallory")},
	} {
		c.cfg.Auth = tokens("alice")
		id, err := c.sessions.create(auth.DigestOf("tok-session-oper"), "alice")
		if err != nil {
			t.Fatal(err)
		}
		if code := queues(id); code != http.StatusOK {
			t.Fatalf("a live session: %d", code)
		}
		if swap.auth == nil {
			swap.auth, _ = auth.Parse([]byte("tokens:\n  - name: bob\n    sha256: "+auth.Digest("tok-other")+"\n    tenant: team-a\n    roles: [operator]\n"), "tokens.yaml")
		}
		c.cfg.Auth = swap.auth
		if code := queues(id); code != http.StatusSeeOther {
			t.Fatalf("with %s: %d, want the sign-in page", swap.what, code)
		}
		if c.sessions.get(id) != nil {
			t.Fatalf("with %s the session is still held", swap.what)
		}
	}
}
