// A budget's refusal (BUDGET_EXCEEDED) as execute and the adapters' core
// give it, against the real opjournal binary with a policy of two budgets
// (a count per currency and day, a sum per currency and week); the
// provider counts every call. The frameworks' loops are in their own
// test files (ai-sdk, openai-agents, langchain).

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";

import {
  classifyHttp, decodeRetryInfo, execute, Journal, OpjournalError,
  type AttemptContext, type BudgetExceeded, type Effect, type Outcome,
} from "../src/index.js";
import { budgetOutcome } from "../src/execute.js";
import { budgetText, journalToolCall, modelText, windowWords } from "../src/tools.js";
import { Provider, startJournal, uniqueKey, type JournalServer } from "../testutil/harness.js";

/** Two payments a day per currency; at most 1,000.00 a week per currency. */
const POLICY = `actions:
  create_payment:
    budgets:
      - name: daily-payments
        count: true
        per: [payload.currency]
        window: 24h
        limit: 2
        on_exceed: reject
      - name: weekly-spend
        sum: amount_minor
        per: [payload.currency]
        window: 168h
        limit: 100000
        on_exceed: reject
`;

const DAY_S = 86400;

describe("budgets: unit", () => {
  test("windowWords words a window as the journal's refusal and the gateway do", () => {
    const want: [number, string][] = [
      [86400, "24h"], [2 * 86400, "48h"], [3 * 86400, "3d"], [7 * 86400, "7d"], [3600, "1h"], [1800, "30m"],
      [60, "1m"], [90, "1m30s"], [45, "45s"], [3601, "1h0m1s"], [90000, "25h"], [0, "window"],
    ];
    for (const [s, w] of want) assert.equal(windowWords(s), w, `${s} s`);
  });

  test("a refusal's RetryInfo, or else its retry_after_seconds, is the outcome's retryAfterMs", () => {
    // google.rpc.RetryInfo{retry_delay: Duration{seconds: 300, nanos: 1}}: 0a 05 08 ac 02 10 01
    assert.equal(decodeRetryInfo(Uint8Array.of(0x0a, 0x05, 0x08, 0xac, 0x02, 0x10, 0x01)), 300_001);
    assert.equal(decodeRetryInfo(new Uint8Array()), 0);
    const details = { budget: "daily-payments", action: "create_payment", limit: "5", used: "5", window_seconds: "86400", retry_after_seconds: "120" };
    const e = new OpjournalError("BUDGET_EXCEEDED", "budget \"daily-payments\" of create_payment: …", { details });
    const out = budgetOutcome("k", e);
    assert.deepEqual(out, { kind: "budget_exceeded", key: "k", budget: "daily-payments", action: "create_payment", limit: 5, used: 5,
      windowSeconds: DAY_S, retryAfterMs: 120_000, message: e.detail });
    assert.equal(budgetOutcome("k", new OpjournalError("BUDGET_EXCEEDED", "m", { details, retryAfterMs: 7000 })).retryAfterMs, 7000);
    const never = budgetOutcome("k", new OpjournalError("BUDGET_EXCEEDED", "m", { details: { ...details, retry_after_seconds: "" } }));
    assert.equal(never.retryAfterMs, 0);
    assert.equal(budgetText("create_payment", out), "This call of create_payment was NOT made: it would pass the limit of the budget daily-payments " +
      "(5 of 5 used in the last 24h), which a person set to cap what you may do. Nothing was sent. Do not split it into smaller calls, " +
      "rephrase it or change its arguments to get around the limit: that is exactly what the limit forbids. Tell the user the limit " +
      "was reached. It may fit again in about 120 seconds.");
    assert.match(budgetText("create_payment", never), /Tell the user the limit was reached\.$/);
    // Whole seconds rounded up, as the gateway's MCP door says them.
    assert.match(budgetText("create_payment", { ...out, retryAfterMs: 1500 }), /reached\. It may fit again in about 2 seconds\.$/);
  });
});

describe("budgets: execute", () => {
  let srv: JournalServer;
  let journal: Journal;
  let provider: Provider;

  before(async () => {
    [srv, provider] = await Promise.all([startJournal({ policy: POLICY }), new Provider().start()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-budget" });
  });
  after(async () => {
    journal?.close();
    await Promise.all([srv?.stop(), provider?.close()]);
  });

  /** fn that charges the provider; calls counts its calls. */
  function charge(body: object) {
    const calls: AttemptContext[] = [];
    const fn = async (ctx: AttemptContext): Promise<Effect> => {
      calls.push(ctx);
      const res = await fetch(`${provider.url}/payments`, {
        method: "POST", headers: { "Idempotency-Key": ctx.key }, body: JSON.stringify(body), signal: ctx.signal,
      });
      const err = classifyHttp(res);
      if (err) throw err;
      const p = (await res.json()) as { id: string };
      return { externalId: p.id, result: { payment_id: p.id } };
    };
    return { fn, calls };
  }

  const pay = (key: string, order: string, amount: number, currency: string) => {
    const payload = { order_id: order, amount_minor: amount, currency };
    const c = charge(payload);
    return { run: () => execute(journal, { key, action: "create_payment", payload }, c.fn), calls: c.calls };
  };

  function asBudget(out: Outcome): BudgetExceeded {
    assert.equal(out.kind, "budget_exceeded", JSON.stringify(out));
    assert.ok(out.kind === "budget_exceeded");
    return out;
  }

  test("the payment past the count is budget_exceeded with the budget's words; fn is not called, nothing is registered", async () => {
    const keys = [uniqueKey("pay:eur"), uniqueKey("pay:eur"), uniqueKey("pay:eur")];
    const paid: Outcome[] = [];
    for (const [i, key] of keys.slice(0, 2).entries()) paid.push(await pay(key, `e${i}`, 100, "EUR").run());
    assert.deepEqual(paid.map((o) => o.kind), ["succeeded", "succeeded"]);

    const third = pay(keys[2]!, "e2", 100, "EUR");
    const out = asBudget(await third.run());
    assert.equal(third.calls.length, 0, "fn must not be called");
    assert.equal(provider.callsFor(keys[2]!), 0, "nothing reached the provider");
    assert.deepEqual([out.key, out.budget, out.action, out.limit, out.used, out.windowSeconds], [keys[2], "daily-payments", "create_payment", 2, 2, DAY_S]);
    // The window runs from the first payment's registration, a moment ago.
    assert.ok(out.retryAfterMs >= (DAY_S - 60) * 1000 && out.retryAfterMs <= (DAY_S + 1) * 1000, String(out.retryAfterMs));
    assert.match(out.message, /^budget "daily-payments" of create_payment: 2 of its limit 2 is used in the last 24h/);
    assert.doesNotMatch(out.message, /e2|EUR/, "the message holds no payload value");
    await assert.rejects(journal.lookup(keys[2]!), (e: unknown) => e instanceof OpjournalError && e.code === "NOT_FOUND");

    // The journal's words, as register gives them: the ErrorInfo's metadata and the RetryInfo.
    await assert.rejects(journal.register({ key: keys[2]!, action: "create_payment", payload: { order_id: "e2", amount_minor: 100, currency: "EUR" } }),
      (e: unknown) => {
        assert.ok(e instanceof OpjournalError);
        assert.equal(e.code, "BUDGET_EXCEEDED");
        assert.equal(e.grpcCode, Code.ResourceExhausted);
        assert.deepEqual({ ...e.details, retry_after_seconds: undefined },
          { budget: "daily-payments", action: "create_payment", limit: "2", used: "2", window_seconds: String(DAY_S), retry_after_seconds: undefined });
        assert.equal(e.retryAfterMs, Number(e.details["retry_after_seconds"]) * 1000, "RetryInfo and retry_after_seconds agree");
        return true;
      });

    // A retry of a registered payment is its replay (it reserves nothing); another currency is another budget.
    const again = pay(keys[0]!, "e0", 100, "EUR");
    const replay = await again.run();
    assert.deepEqual([replay.kind, replay.kind === "succeeded" && replay.replayed, again.calls.length], ["succeeded", true, 0]);
    const usd = uniqueKey("pay:usd");
    assert.equal((await pay(usd, "u0", 100, "USD").run()).kind, "succeeded");
    assert.equal(provider.callsFor(usd), 1);
    // Asked again, it is refused again, and still nothing is called.
    const retry = pay(keys[2]!, "e2", 100, "EUR");
    asBudget(await retry.run());
    assert.equal(retry.calls.length, 0);
    assert.equal(provider.callsFor(keys[2]!), 0);
  });

  test("a payment alone over the weekly sum never fits: retryAfterMs 0, and the text says no time", async () => {
    const key = uniqueKey("pay:jpy");
    const p = pay(key, "j0", 150_000, "JPY");
    const out = asBudget(await p.run());
    assert.deepEqual([out.budget, out.limit, out.used, out.windowSeconds, out.retryAfterMs], ["weekly-spend", 100_000, 0, 7 * DAY_S, 0]);
    assert.match(out.message, /alone is over its limit/);
    assert.equal(p.calls.length, 0);
    assert.equal(provider.callsFor(key), 0);
  });

  test("journalToolCall tells the model the budget_exceeded text; the summary names the budget", async () => {
    const policy = { action: "create_payment", keyFields: ["order_id"] as const };
    let runs = 0;
    const call = (order: string, amount: number, currency: string) => journalToolCall(journal, policy, {
      toolName: "create_payment", scope: "budget-tools", args: { order_id: order, amount_minor: amount, currency }, run: () => { runs++; return { id: `pay_${order}` }; },
    });
    const never = await call("g1", 100_001, "GBP");
    assert.ok(never.kind === "text");
    assert.equal(never.text, modelText("budget_exceeded", { tool: "create_payment", budget: "weekly-spend", used: "0", limit: "100000", window: "7d", retry: "" }));
    assert.deepEqual(never.summary, { kind: "budget_exceeded", key: never.key, externalId: "", replayed: false, awaitingApproval: false, requestHash: "", errorCode: "",
      budget: { name: "weekly-spend", limit: 100_000, used: 0, windowSeconds: 7 * DAY_S, retryAfterMs: 0 } });

    assert.equal((await call("g2", 100, "GBP")).kind, "output");
    assert.equal((await call("g3", 100, "GBP")).kind, "output");
    const over = await call("g4", 100, "GBP");
    assert.ok(over.kind === "text");
    const n = /It may fit again in about (\d+) seconds\.$/.exec(over.text)?.[1];
    assert.ok(n && Number(n) >= DAY_S - 60 && Number(n) <= DAY_S + 1, over.text);
    assert.equal(over.text, modelText("budget_exceeded", { tool: "create_payment", budget: "daily-payments", used: "2", limit: "2", window: "24h",
      retry: ` It may fit again in about ${n} seconds.` }));
    assert.equal(over.summary.kind, "budget_exceeded");
    assert.equal(runs, 2);
  });
});
