package demo

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/server/auth"
)

// GatewayTenant is the tenant of the gateway scenarios' callers.
const GatewayTenant = "demo"

// GatewayCallers are the credentials of the gateway scenarios: two agents
// (A with two tokens of one principal, as in a rotation), the reconciler,
// an admin that reads the journal for the narration, and an operator who
// decides approvals.
type GatewayCallers struct {
	AgentA, AgentARotated, AgentB, Reconciler, Admin, Operator string
	// TokensFile is the journal's --auth-file listing them.
	TokensFile string
}

// ScopeA and ScopeB are the agents' key scopes at the gateway.
func (c GatewayCallers) ScopeA() string { return gateway.ScopeOfPrincipal(GatewayTenant, "agent-a") }

// ScopeB is agent B's key scope at the gateway.
func (c GatewayCallers) ScopeB() string { return gateway.ScopeOfPrincipal(GatewayTenant, "agent-b") }

// WriteGatewayCallers makes random tokens for the gateway scenarios and
// writes the tokens file (digests only) into dir.
func WriteGatewayCallers(dir string) (GatewayCallers, error) {
	tok := func() string {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		return "oj_" + hex.EncodeToString(b)
	}
	c := GatewayCallers{AgentA: tok(), AgentARotated: tok(), AgentB: tok(), Reconciler: tok(), Admin: tok(), Operator: tok(),
		TokensFile: filepath.Join(dir, "tokens.yaml")}
	entries := []auth.Entry{
		{Name: "agent-a-2026-11", Principal: "agent-a", SHA256: auth.Digest(c.AgentA), Tenant: GatewayTenant, Roles: []auth.Role{auth.RoleAgent}},
		{Name: "agent-a-2026-12", Principal: "agent-a", SHA256: auth.Digest(c.AgentARotated), Tenant: GatewayTenant, Roles: []auth.Role{auth.RoleAgent}},
		auth.NewEntry("agent-b", c.AgentB, GatewayTenant, []auth.Role{auth.RoleAgent}),
		auth.NewEntry("demo-reconciler", c.Reconciler, GatewayTenant, []auth.Role{auth.RoleReconciler}),
		auth.NewEntry("demo-admin", c.Admin, GatewayTenant, []auth.Role{auth.RoleAdmin}),
		auth.NewEntry("demo-operator", c.Operator, GatewayTenant, []auth.Role{auth.RoleOperator}),
	}
	src := auth.FileHeader
	for _, e := range entries {
		src += e.YAML()
	}
	if err := os.WriteFile(c.TokensFile, []byte(src), 0o600); err != nil {
		return c, fmt.Errorf("tokens file: %w", err)
	}
	return c, nil
}
