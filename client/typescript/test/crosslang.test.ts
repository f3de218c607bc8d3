// One intent, two languages: a Python caller and a TypeScript caller
// register the same intent with the same payload written differently (key
// order, 4.9e5 vs 490000, an extra null) and get the same request hash and
// ONE operation: the server computes the hash (RFC 8785), not the clients.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";

import { Journal } from "../src/index.js";
import { repoRoot, startJournal, type JournalServer } from "../testutil/harness.js";

let srv: JournalServer;
before(async () => {
  srv = await startJournal();
});
after(async () => {
  await srv?.stop();
});

const python = process.env["PYTHON"] || "/usr/bin/python3";

// The Python caller, through the Python client (client/python), as a
// child process: its own language, its own JSON library, its own numbers.
const pyCaller = `
import json, sys
import opjournal
addr, key = sys.argv[1], sys.argv[2]
payload = json.loads('{"currency": "RUB", "amount_minor": 4.9e5, "order_id": "817", "memo": null}')
with opjournal.Journal(addr) as j:
    r = j.register(key, "create_payment", payload)
print(json.dumps({"created": r.created, "hash": r.operation.request_hash}))
`;

test("a Python and a TypeScript caller get one operation and one hash", async () => {
  const key = "payment:order-817:crosslang-01";
  const out = execFileSync(python, ["-c", pyCaller, srv.grpcAddr, key], {
    env: { ...process.env, PYTHONPATH: join(repoRoot(), "client", "python") },
    encoding: "utf8",
  });
  const py = JSON.parse(out.trim().split("\n").pop()!) as { created: boolean; hash: string };
  assert.equal(py.created, true, "the Python caller registers first");

  const journal = new Journal({ baseUrl: `http://${srv.grpcAddr}` });
  try {
    const ts = await journal.register({
      key, action: "create_payment", payload: { order_id: "817", amount_minor: 490000, currency: "RUB" },
    });
    assert.equal(ts.created, false, "the TypeScript caller must find the same operation");
    assert.equal(ts.operation.requestHash, py.hash, "both languages must get the same request hash");
    assert.match(py.hash, /^[0-9a-f]{64}$/);
    // And an amount that differs is another request: a conflict.
    await assert.rejects(
      journal.register({ key, action: "create_payment", payload: { order_id: "817", amount_minor: 490001, currency: "RUB" } }),
      (e: Error & { code?: string }) => e.code === "PAYLOAD_MISMATCH",
    );
  } finally {
    journal.close();
  }
});
