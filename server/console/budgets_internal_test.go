package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/journal"
	"github.com/opjournal/opjournal/protocol/policy"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/store/sqlite"
)

// TestBudgetsPageChecksListBudgetsRole: the page asks the principal's
// roles for ListBudgets itself rather than relying on who may sign in: a
// session whose roles lack it (no such token signs in today; a role
// table that changes must not open the counters) gets 403, nothing of
// the counters and no link in the navigation.
func TestBudgetsPageChecksListBudgetsRole(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pol, err := policy.Parse([]byte("actions:\n  create_payment:\n    integer_fields: [amount_minor]\n    budgets:\n      - {name: daily-spend, sum: amount_minor, per: [principal], window: 24h, limit: 100, on_exceed: reject}\n"), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc := journal.New(st, pol, journal.Limits{})
	if _, err := svc.Register(context.Background(), journal.RegisterRequest{Caller: journal.Caller{Tenant: "team-a", Principal: "agent-a"},
		Key: "pay-1", Action: "create_payment", Payload: []byte(`{"amount_minor": 40}`)}); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Service: svc, HTTPStatus: func(opjournal.Code) int { return http.StatusBadRequest }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, roles := range [][]auth.Role{{auth.RoleAgent}, {auth.RoleMetrics}, nil} {
		s := &session{Principal: auth.Principal{ID: "p", Name: "p", Tenant: "team-a", Roles: roles}}
		w := httptest.NewRecorder()
		c.budgets(w, httptest.NewRequest(http.MethodGet, Prefix+"budgets", nil), s)
		if body := w.Body.String(); w.Code != http.StatusForbidden || strings.Contains(body, "agent-a") || strings.Contains(body, `href="/console/budgets"`) {
			t.Fatalf("roles %v: %d %.300s", roles, w.Code, body)
		}
	}
	s := &session{Principal: auth.Principal{ID: "r", Name: "r", Tenant: "team-a", Roles: []auth.Role{auth.RoleReconciler}}}
	w := httptest.NewRecorder()
	c.budgets(w, httptest.NewRequest(http.MethodGet, Prefix+"budgets", nil), s)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "agent-a") {
		t.Fatalf("a reconciler: %d", w.Code)
	}
}

func TestScopeOfReadsTheCanonicalScope(t *testing.T) {
	for _, c := range []struct {
		scope string
		per   []string
		want  string
	}{
		{`{"payload.currency":"EUR","principal":"agent-1"}`, []string{"principal", "payload.currency"}, "principal=agent-1 payload.currency=EUR"},
		{`{"payload.n":12,"payload.o":{"a":[1]},"refs.x":"a b"}`, nil, `payload.n=12 payload.o={"a":[1]} refs.x=a b`},
		{`{}`, []string{"principal"}, ""},
		{``, nil, ""},
		{`not json`, nil, "scope=not json"},
		{`{"principal":"` + strings.Repeat("p", 300) + `"}`, nil, "principal=" + strings.Repeat("p", maxScopeValue-1) + "…"},
	} {
		var parts []string
		for _, p := range scopeOf(c.scope, c.per) {
			parts = append(parts, p.Name+"="+p.Value)
		}
		if got := strings.Join(parts, " "); got != c.want {
			t.Errorf("scopeOf(%s) = %q, want %q", c.scope, got, c.want)
		}
	}
}

func TestBudgetFiguresInWords(t *testing.T) {
	// The bar: the known part, then the unknown part; never wider than
	// the limit; past the limit outlined in red.
	bar := string(usageBar(11000, 5000, 10000))
	if !strings.Contains(bar, `class="known" x="0" y="0" width="120.00"`) || !strings.Contains(bar, `class="unknown" x="120.00" y="0" width="80.00"`) || !strings.Contains(bar, barOver) {
		t.Fatalf("bar past the limit: %s", bar)
	}
	if bar := string(usageBar(0, 0, 5)); strings.Contains(bar, `class="known"`) || strings.Contains(bar, `class="unknown"`) {
		t.Fatalf("an empty bar: %s", bar)
	}
}
