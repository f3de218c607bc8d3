// Command mcp-server is an MCP server, written with the MCP Go SDK, that
// protects its own tool with opjournal's middleware (docs/integrations/go-mcp-server.md).
// Its create_payment charges the test provider; over stdio, one local agent.
//
// Its defaults are the local stack of docs/gateway.md ("Try it locally"):
// the journal of `opjournal serve` (127.0.0.1:9090), the test provider of
// `opjournal-fakeprovider` (127.0.0.1:8099) and the shipped policy, whose
// create_payment protects the tool; with flags:
//
//	mcp-server --journal 127.0.0.1:9090 --provider http://127.0.0.1:8099 --policy policy.yaml
package main

import (
	"context"
	"flag"
	"log"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opjournal/opjournal/client"
	"github.com/opjournal/opjournal/gateway"
	"github.com/opjournal/opjournal/internal/testkit/fakeprovider"
	"github.com/opjournal/opjournal/protocol/policy"
)

func main() {
	journalAddr := flag.String("journal", "127.0.0.1:9090", "the journal's gRPC address")
	providerURL := flag.String("provider", "http://127.0.0.1:8099", "the payment provider's base URL (the test provider's)")
	policyPath := flag.String("policy", "", "the policy: create_payment's gateway.mcp names the tool and its key_fields (default: the shipped policy)")
	flag.Parse()
	pol := policy.Default()
	if *policyPath != "" {
		var err error
		if pol, err = policy.Load(*policyPath); err != nil {
			log.Fatal(err)
		}
	}
	conn, err := grpc.NewClient(*journalAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Journal: client.New(conn), Policy: pol, OwnToken: os.Getenv("OPJOURNAL_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	srv := fakeprovider.NewMCPServer(*providerURL, nil) // your server (the test kit's here): its create_payment POSTs /payments
	srv.AddReceivingMiddleware(g.MCPMiddleware())       // every call of a protected tool through the journal
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
