// Starts the real opjournal binary ($OPJOURNAL_BIN, else built with `go
// build` from the repository root) on a fresh SQLite file and free ports,
// and resolves with its HTTP base URL once it logs {"msg":"serving",…}.
// (Kept outside test/ so that `node --test dist/test/` does not take it for
// a test file.)

import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "go.mod"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("go.mod not found");
    dir = up;
  }
  return dir;
}

export interface Journal {
  baseUrl: string;
  stop(): Promise<void>;
}

export async function startJournal(): Promise<Journal> {
  const dir = mkdtempSync(join(tmpdir(), "opjournal-openapi-ts-"));
  let bin = process.env["OPJOURNAL_BIN"];
  if (bin) {
    bin = resolve(bin);
  } else {
    bin = join(dir, "opjournal");
    execFileSync(process.env["GO"] || "go", ["build", "-o", bin, "./cmd/opjournal"], { cwd: repoRoot(), stdio: ["ignore", "ignore", "inherit"] });
  }
  const proc = spawn(bin, ["serve", "--database-url", `sqlite://${join(dir, "j.db")}`,
    "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"] });
  const reap = () => { if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL"); };
  process.once("exit", reap);
  const exited = new Promise<void>((res) => proc.once("exit", () => res()));
  const logs: string[] = [];
  const http = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error("opjournal did not serve within 30 s:\n" + logs.join("\n"))), 30_000);
    createInterface({ input: proc.stderr! }).on("line", (line) => {
      logs.push(line);
      try {
        const rec = JSON.parse(line) as { msg?: string; http_addr?: string };
        if (rec.msg === "serving" && rec.http_addr) { clearTimeout(timer); res(rec.http_addr); }
      } catch { /* not JSON */ }
    });
    proc.once("exit", (code) => { clearTimeout(timer); rej(new Error(`opjournal exited (${code}):\n${logs.join("\n")}`)); });
  });
  return {
    baseUrl: `http://${http}`,
    stop: async () => {
      reap();
      await exited;
      process.off("exit", reap);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
