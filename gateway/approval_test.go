package gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDecisionRouteEverySpelling: the journal's Approve and Reject routes
// are recognised in every spelling an upstream router might fold onto
// them, and nothing else is.
func TestDecisionRouteEverySpelling(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"/v1/operations:approve",
		"/v1/operations:reject",
		"/V1/Operations:Approve",
		"/v1/operations%3Aapprove",
		"/v1/operations%253Areject",
		"/v1//operations:approve",
		"/v1/operations:approve/",
		"/v1/./operations:approve",
		"/v1/x/../operations:approve",
		"/v1/operations:approve;x=1",
		`/v1\operations:approve`,
		"/v1/%6Fperations:approve",
		"/v1%2Foperations:reject",
		"//v1/operations:approve",
		"/opjournal.v1.JournalService/Approve",
		"/opjournal.v1.JournalService/Reject",
	} {
		u, err := url.Parse("http://gw" + raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if !decisionRoute(u) {
			t.Errorf("%s is not recognised as a decision route", raw)
		}
	}
	for _, raw := range []string{
		"/v1/operations:resolve",
		"/v1/operations:approved",
		"/v1/operations",
		"/payments",
		"/v1/orders/1:approve",
		"/v2/operations:approve",
		"/opjournal.v1.JournalService/Register",
	} {
		u, _ := url.Parse("http://gw" + raw)
		if decisionRoute(u) {
			t.Errorf("%s is taken for a decision route", raw)
		}
	}
}

// TestTheGatewayNeverDecides: no code of the gateway (this package and its
// command) names the journal's Approve or Reject, so no door of it can
// decide an approval with the credentials it holds.
func TestTheGatewayNeverDecides(t *testing.T) {
	t.Parallel()
	forbidden := map[string]bool{"Approve": true, "Reject": true, "ApproveRequest": true, "RejectRequest": true,
		"JournalService_Approve_FullMethodName": true, "JournalService_Reject_FullMethodName": true}
	for _, dir := range []string{".", "../cmd/opjournal-gateway"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v (%d files)", dir, err, len(files))
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && forbidden[sel.Sel.Name] {
					t.Errorf("%s names %s: the gateway must never decide an approval", f, sel.Sel.Name)
				}
				return true
			})
		}
	}
}
