// Test harness: the real opjournal binary on free ports, and a counting
// HTTP provider. (Kept outside test/ so that `node --test dist/test/` does
// not take it for a test file.)

import { spawn, execFile, type ChildProcess } from "node:child_process";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

/** The repository root: the nearest directory above this file holding go.mod. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(join(dir, "go.mod"))) return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("go.mod not found above " + fileURLToPath(import.meta.url));
    dir = up;
  }
}

/** A temporary directory removed by the returned cleanup. */
export function tempDir(prefix = "opjournal-ts-"): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

let built: Promise<string> | undefined;

/**
 * The opjournal binary: $OPJOURNAL_BIN if set, else built once per process
 * with `go build -o <tmp>/opjournal ./cmd/opjournal` from the repo root.
 */
export function opjournalBinary(): Promise<string> {
  const fromEnv = process.env["OPJOURNAL_BIN"];
  if (fromEnv) return Promise.resolve(resolve(fromEnv));
  built ??= (async () => {
    const { dir, cleanup } = tempDir("opjournal-bin-");
    process.once("exit", cleanup);
    const out = join(dir, "opjournal");
    const go = process.env["GO"] || "go";
    try {
      await execFileP(go, ["build", "-o", out, "./cmd/opjournal"], { cwd: repoRoot(), maxBuffer: 16 << 20 });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new Error(`go build ./cmd/opjournal failed: ${err.stderr || err.message}`);
    }
    return out;
  })();
  return built;
}

/** A running opjournal server. */
export interface JournalServer {
  grpcAddr: string;
  httpAddr: string;
  baseUrl: string;
  /** Every stderr line so far (structured logs), for diagnostics. */
  logs: string[];
  stop(): Promise<void>;
}

/**
 * Starts `opjournal serve` on a fresh SQLite file and free ports, and
 * resolves once it logs {"msg":"serving",…} (read from stderr, no sleeps).
 * With policy (YAML text), the server enforces it (--policy) instead of the
 * shipped one.
 */
export async function startJournal(opts: { args?: string[]; tls?: boolean; policy?: string } = {}): Promise<JournalServer> {
  const bin = await opjournalBinary();
  const { dir, cleanup } = tempDir("opjournal-db-");
  const policyArgs: string[] = [];
  if (opts.policy !== undefined) {
    const path = join(dir, "policy.yaml");
    writeFileSync(path, opts.policy);
    policyArgs.push("--policy", path);
  }
  const args = ["serve", "--database-url", `sqlite://${join(dir, "j.db")}`,
    "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", ...policyArgs, ...(opts.args ?? [])];
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
  const logs: string[] = [];
  const exited = new Promise<void>((res) => proc.once("exit", () => res()));
  // Never leave a server behind, even if the test process dies mid-way.
  const reap = () => { if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL"); };
  process.once("exit", reap);
  void exited.then(() => process.off("exit", reap));
  const readyP = new Promise<{ grpc: string; http: string }>((res, rej) => {
    const rl = createInterface({ input: proc.stderr! });
    const timer = setTimeout(() => rej(new Error("opjournal did not log \"serving\" within 30 s:\n" + logs.join("\n"))), 30_000);
    rl.on("line", (line) => {
      logs.push(line);
      if (!line.includes('"serving"')) return;
      try {
        const rec = JSON.parse(line) as { msg?: string; grpc_addr?: string; http_addr?: string };
        if (rec.msg === "serving" && rec.grpc_addr && rec.http_addr) {
          clearTimeout(timer);
          res({ grpc: rec.grpc_addr, http: rec.http_addr });
        }
      } catch {
        // not a JSON line
      }
    });
    proc.once("error", (e) => { clearTimeout(timer); rej(e); });
    proc.once("exit", (code, sig) => {
      clearTimeout(timer);
      rej(new Error(`opjournal exited (${code ?? sig}) before serving:\n${logs.join("\n")}`));
    });
  });
  let ready: { grpc: string; http: string };
  try {
    ready = await readyP;
  } catch (e) {
    await kill(proc, exited);
    cleanup();
    throw e;
  }
  return {
    grpcAddr: ready.grpc,
    httpAddr: ready.http,
    baseUrl: `${opts.tls ? "https" : "http"}://${ready.grpc}`,
    logs,
    stop: async () => {
      await kill(proc, exited);
      cleanup();
    },
  };
}

async function kill(proc: ChildProcess, exited: Promise<void>): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  proc.kill("SIGTERM");
  const t = setTimeout(() => proc.kill("SIGKILL"), 5_000);
  await exited;
  clearTimeout(t);
}

/** Runs `opjournal token` and returns the token and its tokens-file entry. */
export async function makeToken(name: string, tenant: string, roles: string): Promise<{ token: string; entry: string }> {
  const bin = await opjournalBinary();
  const { stdout } = await execFileP(bin, ["token", "--name", name, "--tenant", tenant, "--roles", roles]);
  const lines = stdout.split("\n");
  const tokenAt = lines.findIndex((l) => l.startsWith("# the token"));
  const token = lines[tokenAt + 1]?.trim() ?? "";
  // The entry: the list item after the token, without comments and without
  // a "tokens:" line (newer `opjournal token` prints one for a new file).
  const entryLines = lines.slice(tokenAt + 2).filter((l) => l.trim() !== "" && !l.startsWith("#") && l.trim() !== "tokens:");
  if (tokenAt < 0 || !token.startsWith("opj_") || !/^\s*- name:/.test(entryLines[0] ?? "")) {
    throw new Error("unexpected `opjournal token` output:\n" + stdout);
  }
  const entry = entryLines.join("\n");
  return { token, entry };
}

/** Writes a tokens file (--auth-file) holding the entries. */
export function writeTokensFile(dir: string, entries: string[]): string {
  const path = join(dir, "tokens.yaml");
  writeFileSync(path, "tokens:\n" + entries.join("\n") + "\n");
  return path;
}

/** How the provider answers the next POSTs. */
export type ProviderMode = "ok" | "hang" | "decline" | "unavailable";

/** One call the provider received. */
export interface ProviderCall {
  path: string;
  idempotencyKey: string | undefined;
  body: unknown;
}

/**
 * A payment provider in the test: a real node:http server that counts
 * calls and answers by mode: "ok" 200 {id, status}, "hang" never answers,
 * "decline" 402, "unavailable" 503.
 */
export class Provider {
  mode: ProviderMode = "ok";
  readonly calls: ProviderCall[] = [];
  private server: Server;
  private seq = 0;
  url = "";

  constructor() {
    this.server = createServer((req, res) => this.handle(req, res));
  }

  async start(): Promise<this> {
    await new Promise<void>((res) => this.server.listen(0, "127.0.0.1", res));
    const addr = this.server.address();
    if (addr === null || typeof addr === "string") throw new Error("no address");
    this.url = `http://127.0.0.1:${addr.port}`;
    return this;
  }

  /** Calls received for an idempotency key. */
  callsFor(key: string): number {
    return this.calls.filter((c) => c.idempotencyKey === key).length;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      let body: unknown = null;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "null");
      } catch {
        body = null;
      }
      const h = req.headers["idempotency-key"];
      this.calls.push({ path: req.url ?? "", idempotencyKey: Array.isArray(h) ? h[0] : h, body });
      switch (this.mode) {
        case "hang":
          return; // never answers; close() ends the connection
        case "decline":
          res.writeHead(402, { "content-type": "application/json" }).end('{"error":"card_declined"}');
          return;
        case "unavailable":
          res.writeHead(503).end();
          return;
        case "ok": {
          const id = `pay_${String(++this.seq).padStart(6, "0")}`;
          res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id, status: "succeeded" }));
        }
      }
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((res) => this.server.close(() => res()));
  }
}

/** A promise with its resolve function, to hold fn open. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => { resolve = r; });
  return { promise, resolve };
}

/** A port on 127.0.0.1 that nothing listens on (it was free a moment ago). */
export async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((res) => s.listen(0, "127.0.0.1", res));
  const addr = s.address();
  await new Promise<void>((res) => s.close(() => res()));
  if (addr === null || typeof addr === "string") throw new Error("no address");
  return addr.port;
}

/** A unique operation key for a test. */
let keySeq = 0;
export function uniqueKey(prefix: string): string {
  return `${prefix}:${process.pid}-${Date.now().toString(36)}-${++keySeq}`;
}

/**
 * Polls check every intervalMs until it returns a value other than
 * undefined, and returns it; fails with what the last check saw once
 * timeoutMs has passed. For conditions that cannot be awaited directly.
 */
export async function waitFor<T>(what: string, check: () => Promise<T | undefined>, opts: { timeoutMs?: number; intervalMs?: number } = {}): Promise<T> {
  const deadline = performance.now() + (opts.timeoutMs ?? 10_000);
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
      last = "no match";
    } catch (e) {
      last = e;
    }
    if (performance.now() >= deadline) throw new Error(`timed out waiting for ${what}: ${String(last)}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
  }
}
