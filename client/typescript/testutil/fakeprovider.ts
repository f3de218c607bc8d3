// The repository's test provider, the real opjournal-fakeprovider binary,
// on a free port: a payment API that honours Idempotency-Key, loses
// answers on request (fault rules) and counts the effects it really
// performed. The agent framework adapters' tests count effects here.

import { execFile, spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";

import { repoRoot, tempDir } from "./harness.js";

const execFileP = promisify(execFile);
let built: Promise<string> | undefined;

/**
 * The binary: $OPJOURNAL_FAKEPROVIDER_BIN if set (scripts/test.sh builds
 * it), else built once per process with go build.
 */
export function fakeProviderBinary(): Promise<string> {
  const fromEnv = process.env["OPJOURNAL_FAKEPROVIDER_BIN"];
  if (fromEnv) return Promise.resolve(resolve(fromEnv));
  built ??= (async () => {
    const { dir, cleanup } = tempDir("opjournal-fakeprovider-bin-");
    process.once("exit", cleanup);
    const out = join(dir, "opjournal-fakeprovider");
    try {
      await execFileP(process.env["GO"] || "go", ["-C", "harness", "build", "-o", out, "./cmd/opjournal-fakeprovider"], { cwd: repoRoot(), maxBuffer: 16 << 20 });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new Error(`go -C harness build ./cmd/opjournal-fakeprovider failed: ${err.stderr || err.message}`);
    }
    return out;
  })();
  return built;
}

/** A fault rule (POST /_control/faults), e.g. { path: "/payments", fault: "drop_connection_after_commit", count: 1 }. */
export interface Fault {
  path: string;
  fault: string;
  count?: number;
  delay?: string;
  method?: string;
}

/** A running opjournal-fakeprovider. */
export interface FakeProvider {
  /** http://127.0.0.1:PORT */
  url: string;
  addFault(f: Fault): Promise<void>;
  /** How many effects the provider stored under an effect key (a payment's Idempotency-Key). */
  effects(effectKey: string): Promise<number>;
  stop(): Promise<void>;
}

/** Starts the binary on a free port; resolves once it logs {"msg":"serving",…}. */
export async function startFakeProvider(): Promise<FakeProvider> {
  const bin = await fakeProviderBinary();
  const proc = spawn(bin, ["--addr", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise<void>((res) => proc.once("exit", () => res()));
  const reap = () => { if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL"); };
  process.once("exit", reap);
  const logs: string[] = [];
  const addr = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error("opjournal-fakeprovider did not log \"serving\" within 30 s:\n" + logs.join("\n"))), 30_000);
    createInterface({ input: proc.stderr! }).on("line", (line) => {
      logs.push(line);
      try {
        const rec = JSON.parse(line) as { msg?: string; addr?: string };
        if (rec.msg === "serving" && rec.addr) { clearTimeout(timer); res(rec.addr); }
      } catch {
        // not a JSON line
      }
    });
    proc.once("exit", (code, sig) => { clearTimeout(timer); rej(new Error(`opjournal-fakeprovider exited (${code ?? sig}):\n${logs.join("\n")}`)); });
  });
  const url = `http://${addr}`;
  const control = async (method: string, path: string, body?: unknown) => {
    const init: RequestInit = { method, headers: { "content-type": "application/json" } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetch(url + path, init);
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as Record<string, unknown>;
  };
  return {
    url,
    addFault: async (f) => { await control("POST", "/_control/faults", f); },
    effects: async (key) => (await control("GET", `/_control/effects?key=${encodeURIComponent(key)}`))["count"] as number,
    stop: async () => {
      process.off("exit", reap);
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill("SIGTERM");
        await exited;
      }
    },
  };
}

/** The payment the test provider answers (the fields the tools return). */
export interface Payment {
  id: string;
  status: string;
  order_id: string;
  amount_minor: number;
  currency: string;
}

/**
 * A tool's provider call: POST /payments with the operation key as
 * Idempotency-Key, bounded by the attempt's signal and by timeoutMs (so a
 * test of an answer that never comes, commit_then_timeout, gives up
 * quickly); an HTTP refusal is a Rejected, a 5xx or a lost answer an
 * unknown outcome (classifyHttp).
 */
export function chargeVia(providerUrl: string, classify: (r: Response) => Error | undefined, timeoutMs = 5_000) {
  return async (args: { order_id: string; amount_minor: number; currency: string }, ctx: { key: string; signal: AbortSignal }): Promise<Payment> => {
    const res = await fetch(`${providerUrl}/payments`, {
      method: "POST",
      headers: { "content-type": "application/json", "Idempotency-Key": ctx.key },
      body: JSON.stringify(args),
      signal: AbortSignal.any([ctx.signal, AbortSignal.timeout(timeoutMs)]),
    });
    const err = classify(res);
    if (err) throw err;
    const p = (await res.json()) as Payment;
    return { id: p.id, status: p.status, order_id: p.order_id, amount_minor: p.amount_minor, currency: p.currency };
  };
}
