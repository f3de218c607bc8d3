// execute waits for a person's approval, against the real opjournal binary
// with a policy that asks for one above 1,000.00 and a tokens file (an
// agent and an operator of one tenant); the provider counts every call.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { classifyHttp, execute, Journal, OpjournalError, type AttemptContext, type Effect, type Outcome } from "../src/index.js";
import { journalToolCall, modelText } from "../src/tools.js";
import { makeToken, Provider, repoRoot, startJournal, tempDir, uniqueKey, waitFor, writeTokensFile, type JournalServer } from "../testutil/harness.js";

const POLICY = `actions:
  create_payment:
    approval:
      when: "payload.amount_minor > 100000"
      approvers: [operator, admin]
`;

const payment = (amount: number) => ({ order_id: "817", amount_minor: amount, currency: "RUB" });

describe("waiting for an approval", () => {
  let srv: JournalServer;
  let agent: Journal;
  let operator: Journal;
  let provider: Provider;
  let tmp: ReturnType<typeof tempDir>;

  before(async () => {
    tmp = tempDir();
    const [a, o] = await Promise.all([makeToken("agent-1", "acme", "agent"), makeToken("alice", "acme", "operator")]);
    const file = writeTokensFile(tmp.dir, [a.entry, o.entry]);
    [srv, provider] = await Promise.all([startJournal({ policy: POLICY, args: ["--auth-file", file] }), new Provider().start()]);
    agent = new Journal({ baseUrl: srv.baseUrl, token: a.token, workerId: "ts-approval" });
    operator = new Journal({ baseUrl: srv.baseUrl, token: o.token });
  });
  after(async () => {
    agent?.close();
    operator?.close();
    await Promise.all([srv?.stop(), provider?.close()]);
    tmp?.cleanup();
  });

  async function charge(ctx: AttemptContext, body: object): Promise<Effect> {
    const res = await fetch(`${provider.url}/payments`, {
      method: "POST", headers: { "Idempotency-Key": ctx.key }, body: JSON.stringify(body), signal: ctx.signal,
    });
    const err = classifyHttp(res);
    if (err) throw err;
    const p = (await res.json()) as { id: string };
    return { externalId: p.id, result: { payment_id: p.id } };
  }

  const run = (key: string, amount: number, options: Parameters<typeof execute>[3] = {}): Promise<Outcome> =>
    execute(agent, { key, action: "create_payment", payload: payment(amount) }, (ctx) => charge(ctx, payment(amount)), options);

  /** The operator's record once the operation exists and awaits approval. */
  const awaiting = (key: string) => waitFor(`${key} awaiting approval`, async () => {
    const op = await operator.lookup(key).catch(() => undefined);
    return op?.status === "awaiting_approval" ? op : undefined;
  });

  const approve = (key: string, requestHash: string) =>
    operator.rpc.approve({ operationKey: key, requestHash, reason: "checked the invoice" });

  test("below the threshold it runs at once", async () => {
    const key = uniqueKey("payment:small");
    const out = await run(key, 50000, { approvalWaitMs: 60_000 });
    assert.equal(out.kind, "succeeded");
    assert.equal(provider.callsFor(key), 1);
  });

  test("not decided in time: awaiting_approval with what waits, nothing called; a retry calls nothing", async () => {
    const key = uniqueKey("payment:late");
    const t0 = performance.now();
    const out = await run(key, 250000, { approvalWaitMs: 1500 });
    const took = performance.now() - t0;
    assert.equal(out.kind, "awaiting_approval");
    assert.ok(out.kind === "awaiting_approval");
    assert.ok(took >= 1500 && took < 5000, `took ${took} ms`);
    assert.ok(out.retryAfterMs >= 1000);
    const rec = await awaiting(key);
    assert.equal(out.operation.operationKey, key);
    assert.equal(out.operation.requestHash, rec.requestHash);
    assert.equal(out.operation.status, "awaiting_approval");
    // What a UI shows about the question: why, who asked, who may decide.
    assert.equal(rec.approval?.required, true);
    assert.equal(rec.approval?.rule, "payload.amount_minor > 100000");
    assert.equal(rec.approval?.requestedBy, "agent-1");
    assert.deepEqual([...(rec.approval?.approvers ?? [])].sort(), ["admin", "operator"]);
    assert.ok(rec.approval?.deadline instanceof Date);
    assert.equal((await run(key, 250000)).kind, "awaiting_approval");
    assert.equal(provider.callsFor(key), 0);
    const page = await operator.listOperations({ statuses: ["awaiting_approval"] });
    assert.ok(page.operations.some((o) => o.operationKey === key));
  });

  test("approved while execute waits: the provider is called exactly once, then replayed", async () => {
    const key = uniqueKey("payment:approved");
    const waiting = run(key, 490000, { approvalWaitMs: 30_000 });
    const rec = await awaiting(key);
    await assert.rejects(operator.rpc.approve({ operationKey: key, requestHash: "0".repeat(64), reason: "x" }));
    await approve(key, rec.requestHash);
    const out = await waiting;
    assert.equal(out.kind, "succeeded");
    assert.ok(out.kind === "succeeded" && !out.replayed);
    const again = await run(key, 490000, { approvalWaitMs: 30_000 });
    assert.ok(again.kind === "succeeded" && again.replayed && again.externalId === out.externalId);
    assert.equal(provider.callsFor(key), 1);
    assert.deepEqual((await operator.lookup(key)).approval?.approvals.map((d) => [d.principal, d.reason]), [["alice", "checked the invoice"]]);
  });

  test("approved later: the next execute calls once", async () => {
    const key = uniqueKey("payment:later");
    const out = await run(key, 300000);
    assert.ok(out.kind === "awaiting_approval");
    await approve(key, out.operation.requestHash);
    const later = await run(key, 300000);
    assert.ok(later.kind === "succeeded" && !later.replayed);
    assert.equal(provider.callsFor(key), 1);
  });

  test("rejected: the refusal, replayed by every retry; nothing called", async () => {
    const key = uniqueKey("payment:rejected");
    const waiting = run(key, 990000, { approvalWaitMs: 30_000 });
    const rec = await awaiting(key);
    await operator.rpc.reject({ operationKey: key, requestHash: rec.requestHash, reason: "not ordered" });
    const out = await waiting;
    assert.ok(out.kind === "failed_final" && out.errorCode === "approval_rejected", JSON.stringify(out.kind));
    const again = await run(key, 990000);
    assert.ok(again.kind === "failed_final" && again.replayed && again.errorCode === "approval_rejected");
    assert.equal(provider.callsFor(key), 0);
  });

  test("an abort ends the wait promptly; nothing called", async () => {
    const key = uniqueKey("payment:aborted");
    const ac = new AbortController();
    const waiting = run(key, 500000, { approvalWaitMs: 60_000, signal: ac.signal });
    await awaiting(key);
    const t0 = performance.now();
    ac.abort();
    await assert.rejects(waiting, (e: unknown) => e instanceof OpjournalError && e.code === "CANCELED");
    assert.ok(performance.now() - t0 < 1000, `took ${performance.now() - t0} ms`);
    assert.equal((await operator.lookup(key)).status, "awaiting_approval");
    assert.equal(provider.callsFor(key), 0);
  });

  test("docs/sdks.md's example runs as written while an operator approves", async () => {
    const text = readFileSync(join(repoRoot(), "docs", "sdks.md"), "utf8");
    const m = /<!-- test: approval -->\n```js\n([\s\S]*?)```/.exec(text);
    assert.ok(m, "docs/sdks.md has no js approval block");
    const key = uniqueKey("payment:docs");
    const op = { key, action: "create_payment", payload: payment(2500000) };
    const approver = awaiting(key).then((rec) => approve(key, rec.requestHash));
    const lines: string[] = [];
    const log = { log: (...a: unknown[]) => lines.push(a.join(" ")) };
    const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor as new (...a: string[]) => (...v: unknown[]) => Promise<void>;
    await new AsyncFunction("journal", "op", "charge", "execute", "console", m[1]!)(
      agent, op, (ctx: AttemptContext) => charge(ctx, op.payload), execute, log);
    await approver;
    assert.equal(lines.length, 1);
    assert.match(lines[0]!, /^charged once: pay_\d+$/);
    assert.equal(provider.callsFor(key), 1);
  });

  test("bad bounds are refused before any call", async () => {
    for (const bad of [-1, Number.NaN, "10" as unknown as number]) {
      await assert.rejects(run(uniqueKey("payment:bad"), 250000, { approvalWaitMs: bad }),
        (e: unknown) => e instanceof OpjournalError && e.code === "INVALID_ARGUMENT" && e.field === "approvalWaitMs");
    }
    await assert.rejects(agent.lookup("k", { waitSeconds: 61 }), (e: unknown) => e instanceof OpjournalError && e.field === "wait_seconds");
  });

  test("a journaled tool tells the model the call awaits approval, then that it was rejected", async () => {
    const policy = { action: "create_payment", keyFields: ["order_id"] as const, approvalWaitMs: 200 };
    const order = uniqueKey("order").replace(/:/g, "-");
    let ran = 0;
    const call = () => journalToolCall(agent, policy, {
      toolName: "create_payment", args: { order_id: order, amount_minor: 250000, currency: "RUB" }, scope: "user-42",
      run: async () => { ran++; return { id: "pay_x" }; },
    });
    const held = await call();
    assert.deepEqual([held.kind, held.kind === "text" && held.text], ["text", modelText("awaiting_approval", { tool: "create_payment", ids: "order_id" })]);
    const key = held.key!;
    await operator.rpc.reject({ operationKey: key, requestHash: (await awaiting(key)).requestHash, reason: "not ordered" });
    const rejected = await call();
    assert.deepEqual([rejected.kind, rejected.kind === "text" && rejected.text],
      ["text", modelText("approval_rejected", { tool: "create_payment", ids: "order_id", error_code: "approval_rejected" })]);
    assert.equal(ran, 0);
  });
});
