package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opjournal/opjournal/internal/testkit/bench"
	"github.com/opjournal/opjournal/internal/testkit/procs"
)

// gatewayRows starts the test provider (with its MCP server) and
// opjournal-gateway (both doors, on the bench's journal) as their own
// processes, and measures a new payment per call straight to the provider
// and through the gateway, over HTTP and over MCP, at each of
// c.gatewayLevels, in alternating rounds. The gateway rows' server CPU is
// the gateway's, the direct rows' the provider's. The difference of a
// gateway row and its direct row is what the gateway adds: register and
// claim before the call, the record after it, and its own proxying. ref
// is the fused SDK path that the one-caller targets compare that with: it
// joins the rounds, so that both sides of the comparison are measured
// minutes apart at most.
func gatewayRows(ctx context.Context, c config, grpcAddr string, k keyer, ref step) ([]bench.Row, error) {
	dir := filepath.Dir(c.bin)
	prov, err := procs.Start(ctx, procs.Spec{Name: "provider", Path: filepath.Join(dir, "opjournal-fakeprovider"), Ready: "serving",
		Args: []string{"--addr", "127.0.0.1:0", "--mcp"}}, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("start opjournal-fakeprovider (make bench-build builds it): %w", err)
	}
	defer func() { _ = prov.Stop(10 * time.Second) }()
	provURL := "http://" + prov.Field("addr")
	// The bench's journal runs without authentication, so the gateway
	// treats every caller as one (--anonymous, on loopback listeners).
	args := []string{"--journal-addr", grpcAddr, "--http-addr", "127.0.0.1:0", "--mcp-addr", "127.0.0.1:0",
		"--mcp-upstream", provURL + "/mcp", "--worker-id", "bench-gateway", "--anonymous"}
	if a := os.Getenv("BENCH_GATEWAY_PPROF"); a != "" {
		args = append(args, "--pprof-addr", a) // to profile the gateway during the run
	}
	env := []string{"PROVIDER_URL=" + provURL}
	if e := os.Getenv("BENCH_GATEWAY_ENV"); e != "" {
		env = append(env, strings.Fields(e)...) // e.g. GOMAXPROCS=1, for an A/B of the gateway alone
	}
	gw, err := procs.Start(ctx, procs.Spec{Name: "gateway", Path: filepath.Join(dir, "opjournal-gateway"), Ready: "serving",
		Env: env, Args: args}, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("start opjournal-gateway (make bench-build builds it): %w", err)
	}
	defer func() { _ = gw.Stop(10 * time.Second) }()
	gwHTTP, gwMCP := "http://"+gw.Field("http_addr"), "http://"+gw.Field("mcp_addr")+"/mcp"
	fmt.Printf("gateway: provider pid %d at %s, gateway pid %d (HTTP %s, MCP %s)\n", prov.Pid(), provURL, gw.Pid(), gwHTTP, gwMCP)

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var rows []bench.Row
	for _, cc := range c.gatewayLevels {
		direct, err := mcpSessions(ctx, provURL+"/mcp", cc)
		if err != nil {
			return rows, err
		}
		through, err := mcpSessions(ctx, gwMCP, cc)
		if err != nil {
			return rows, err
		}
		steps := []step{
			{system: "gateway", scenario: "direct-http", op: func(k keyer, cc int) bench.Op { return httpPayment(hc, provURL, k, "direct-http", cc) }, pid: prov.Pid()},
			{system: "gateway", scenario: "gateway-http", op: func(k keyer, cc int) bench.Op { return httpPayment(hc, gwHTTP, k, "gateway-http", cc) }, pid: gw.Pid()},
			{system: "gateway", scenario: "direct-mcp", op: func(k keyer, cc int) bench.Op { return mcpPayment(direct, k, "direct-mcp", cc, true) }, pid: prov.Pid()},
			{system: "gateway", scenario: "gateway-mcp", op: func(k keyer, cc int) bench.Op { return mcpPayment(through, k, "gateway-mcp", cc, false) }, pid: gw.Pid()},
		}
		steps = append(steps, ref)
		rows = append(rows, runRounds(ctx, c, cc, 0, k, "postgres", steps)...)
		for _, s := range append(direct, through...) {
			s.Close()
		}
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

// httpPayment POSTs a new payment (its own Idempotency-Key) to base.
func httpPayment(hc *http.Client, base string, k keyer, scenario string, c int) bench.Op {
	body, _ := json.Marshal(map[string]any{"order_id": "817", "amount_minor": 490000, "currency": "RUB"})
	return func(ctx context.Context, _ int, seq int64) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/payments", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", k.key(scenario, c, seq))
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		if res.StatusCode != http.StatusCreated {
			return fmt.Errorf("POST %s/payments: %d", base, res.StatusCode)
		}
		return nil
	}
}

// mcpSessions opens n client sessions to an MCP endpoint (one per caller).
func mcpSessions(ctx context.Context, endpoint string, n int) ([]*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "opjournal-bench", Version: "1"}, nil)
	var out []*mcp.ClientSession
	for range n {
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, DisableStandaloneSSE: true}, nil)
		if err != nil {
			return out, fmt.Errorf("MCP %s: %w", endpoint, err)
		}
		out = append(out, cs)
	}
	return out, nil
}

// mcpPayment calls the create_payment tool for a new order each time; the
// direct call gives its own idempotency key, as a careful agent would.
func mcpPayment(sessions []*mcp.ClientSession, k keyer, scenario string, c int, direct bool) bench.Op {
	return func(ctx context.Context, w int, seq int64) error {
		key := k.key(scenario, c, seq)
		args := map[string]any{"order_id": key, "amount_minor": 490000, "currency": "RUB"}
		if direct {
			args["idempotency_key"] = key
		}
		res, err := sessions[w%len(sessions)].CallTool(ctx, &mcp.CallToolParams{Name: "create_payment", Arguments: args})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("create_payment: tool error")
		}
		return nil
	}
}
