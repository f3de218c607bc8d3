// An agent written with the official TypeScript MCP client of the
// 2026-07-28 revision (@modelcontextprotocol/client 2.x) against
// opjournal-gateway's MCP door: TestGatewayMCPTypeScriptStateless
// (harness/e2e/gateway_mcp_ts_test.go) runs it.
//
//   node agent.mjs URL TOKEN ARGS_JSON CALLS [MODE]
//
// MODE is "auto" (the client probes with server/discover and picks the
// revision; the default) or "legacy" (the 2025 initialize handshake).
// It connects, lists the tools, calls create_payment CALLS times with
// the same arguments (each call is a request of its own) and prints one
// JSON line: the negotiated revision, the session id (none without
// sessions), the journal extension the door announces, the tool's
// description and input schema, and each result.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, token, argsJSON, calls, mode = 'auto'] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client(
  { name: 'ts-agent', version: '1.0.0' },
  { versionNegotiation: { mode } },
);
await client.connect(transport);
const { tools } = await client.listTools();
const tool = tools.find((t) => t.name === 'create_payment');
const results = [];
for (let i = 0; i < Number(calls); i++) {
  const r = await client.callTool({ name: 'create_payment', arguments: JSON.parse(argsJSON) });
  results.push({
    isError: r.isError === true,
    meta: r._meta?.['opjournal/operation'] ?? null,
    text: r.content.filter((c) => c.type === 'text').map((c) => c.text).join(' '),
  });
}
const caps = client.getServerCapabilities() ?? {};
console.log(JSON.stringify({
  version: client.getNegotiatedProtocolVersion() ?? null,
  sessionId: transport.sessionId ?? null,
  extension: caps.extensions?.['io.opjournal/journal'] ?? null,
  description: tool?.description ?? null,
  inputSchema: tool?.inputSchema ?? null,
  results,
}));
await client.close();
