// The core of the agent framework adapters (src/tools.ts): keys as the
// gateway derives them (protocol/testdata/tool_keys.json), the model's texts as the
// gateway words them (protocol/testdata/model_texts.json, copied into
// src/model_texts.ts), and the outcomes a loop test does not reach, against
// the real opjournal binary.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { canonicalJson } from "../src/canonical.js";
import { Journal, OpjournalError, Rejected } from "../src/index.js";
import { IN_PROGRESS_MAX_SECONDS, MODEL_TEXTS } from "../src/model_texts.js";
import { checkToolPolicy, goQuote, journalToolCall, modelText, toolKey } from "../src/tools.js";
import { deferred, repoRoot, startJournal, uniqueKey, type JournalServer } from "../testutil/harness.js";

describe("tool keys and texts", () => {
  test("every key of protocol/testdata/tool_keys.json (derived by the gateway's fieldsKey)", () => {
    const doc = JSON.parse(readFileSync(join(repoRoot(), "protocol/testdata/tool_keys.json"), "utf8")) as {
      vectors: { action: string; scope: string; key_fields: string[]; arguments: unknown; key?: string; missing?: string }[];
    };
    assert.ok(doc.vectors.length >= 5);
    for (const v of doc.vectors) {
      const got = toolKey(v.action, v.scope, v.key_fields, v.arguments);
      assert.deepEqual(got, v.key !== undefined ? { key: v.key } : { missing: v.missing }, JSON.stringify(v.arguments));
    }
  });

  test("src/model_texts.ts is protocol/testdata/model_texts.json (run scripts/gen-model-texts.mjs)", () => {
    const doc = JSON.parse(readFileSync(join(repoRoot(), "protocol/testdata/model_texts.json"), "utf8")) as { texts: object; in_progress_max_seconds: number };
    assert.deepEqual(MODEL_TEXTS, doc.texts);
    assert.equal(IN_PROGRESS_MAX_SECONDS, doc.in_progress_max_seconds);
  });

  test("goQuote quotes as Go's %q", () => {
    // strconv.Quote's answers for these inputs.
    assert.equal(goQuote("pay_1"), '"pay_1"');
    assert.equal(goQuote('pay_"1"'), '"pay_\\"1\\""');
    assert.equal(goQuote("a\\b\n\t\x01\x7f"), '"a\\\\b\\n\\t\\x01\\x7f"');
    assert.equal(goQuote("€ ✓ 😀"), '"€ ✓ 😀"');
    assert.equal(goQuote("\u2028\u00a0"), '"\\u2028\\u00a0"');
  });

  test("canonical JSON: RFC 8785 with the journal's rules", () => {
    assert.equal(canonicalJson({ b: [1, null, -0, 1e-7, 0.1], a: "é", c: null, d: undefined, "😀": { z: 1, A: 2 } }),
      '{"a":"é","b":[1,null,0,1e-7,0.1],"😀":{"A":2,"z":1}}');
    for (const bad of [{ n: Number.NaN }, { n: 2 ** 53 }, { s: "\ud800" }, { b: 1n }, [undefined]]) {
      assert.throws(() => canonicalJson(bad), /./);
    }
  });

  test("a policy's mistakes are said when the tool is defined", () => {
    const bad: [object, RegExp][] = [
      [{ action: "create_payment", keyFields: ["order_id"] }, /scope/],
      [{ action: "create_payment", keyFields: ["order_id"], scope: "a:b" }, /scope/],
      [{ action: "create_payment", keyFields: ["order_id"], scope: "x".repeat(65) }, /scope/],
      [{ action: "create_payment", scope: "u" }, /keyFields/],
      [{ action: "create_payment", key: () => "k", keyFields: ["order_id"], scope: "u" }, /either key/],
      [{ keyFields: ["order_id"], scope: "u" }, /action/],
    ];
    for (const [p, want] of bad) {
      assert.throws(() => checkToolPolicy(p as never), (e: unknown) => e instanceof OpjournalError && e.code === "INVALID_ARGUMENT" && want.test(e.message));
    }
    checkToolPolicy({ action: "create_payment", keyFields: ["order_id"], scope: "user-42" });
    checkToolPolicy({ action: "create_payment", key: (a: { k: string }) => a.k });
  });
});

describe("journalToolCall", () => {
  let srv: JournalServer;
  let journal: Journal;
  const policy = { action: "create_payment", keyFields: ["order_id"] as const };
  before(async () => {
    srv = await startJournal();
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-tools" });
  });
  after(async () => {
    journal?.close();
    await srv?.stop();
  });

  test("a call without its key field is told missing_argument; nothing runs", async () => {
    let ran = 0;
    const a = await journalToolCall(journal, policy, { toolName: "create_payment", scope: "u", args: { amount_minor: 1, currency: "RUB" }, run: () => { ran++; return {}; } });
    assert.deepEqual(a, { kind: "text", key: undefined, outcome: undefined,
      summary: { kind: "not_sent", key: "", externalId: "", replayed: false, awaitingApproval: false, requestHash: "", errorCode: "" },
      text: modelText("missing_argument", { tool: "create_payment", argument_quoted: '"order_id"', ids: "order_id" }) });
    assert.match(a.kind === "text" ? a.text : "", /needs the argument "order_id"/);
    assert.equal(ran, 0);
  });

  test("arguments the journal refuses are told refused_arguments; nothing runs", async () => {
    let ran = 0;
    const a = await journalToolCall(journal, policy, { toolName: "create_payment", scope: uniqueKey("s").replace(/:/g, "-").slice(0, 60),
      args: { order_id: "817", amount_minor: 1.5, currency: "RUB" }, run: () => { ran++; return {}; } });
    assert.equal(a.kind, "text");
    assert.ok(a.kind === "text");
    assert.match(a.text, /^The call of create_payment was refused before anything was sent: payload\/amount_minor: .+\. Correct the arguments and call again\.$/);
    assert.equal(ran, 0);
  });

  test("a call while the same one runs is told in_progress; a replayed refusal replayed_refused", async () => {
    const scope = uniqueKey("s").replace(/:/g, "-").slice(0, 60);
    const args = { order_id: "900", amount_minor: 100, currency: "RUB" };
    const started = deferred();
    const release = deferred();
    let runs = 0;
    const first = journalToolCall(journal, policy, { toolName: "create_payment", scope, args, run: async () => {
      runs++;
      started.resolve();
      await release.promise;
      throw new Rejected("card_declined", "the card was declined");
    } });
    await started.promise;
    const during = await journalToolCall(journal, policy, { toolName: "create_payment", scope, args, run: () => { runs++; return {}; } });
    assert.ok(during.kind === "text");
    const seconds = /Wait about (\d+) seconds/.exec(during.text)?.[1];
    assert.ok(seconds && Number(seconds) >= 1 && Number(seconds) <= IN_PROGRESS_MAX_SECONDS, during.text);
    assert.equal(during.text, modelText("in_progress", { tool: "create_payment", ids: "order_id", seconds: seconds! }));
    release.resolve();
    await assert.rejects(first, (e: unknown) => Rejected.is(e) && e.code === "card_declined", "a fresh refusal is the tool's own error");
    const replay = await journalToolCall(journal, policy, { toolName: "create_payment", scope, args, run: () => { runs++; return {}; } });
    assert.deepEqual(replay.kind === "text" && replay.text, modelText("replayed_refused", { tool: "create_payment", error_code: "card_declined" }));
    assert.equal(runs, 1);
  });

  test("a key function names the intent; the texts name the arguments", async () => {
    const k = uniqueKey("payment:order-901");
    let runs = 0;
    const p = { action: "create_payment", key: (a: { ref: string }) => a.ref };
    const args = { ref: k, order_id: "901", amount_minor: 100, currency: "RUB" };
    const a = await journalToolCall(journal, p, { toolName: "create_payment", scope: undefined, args, run: () => { runs++; return { id: "pay_x" }; } });
    assert.deepEqual(a.kind === "output" && [a.output, a.key, a.replayed], [{ id: "pay_x" }, k, false]);
    const c = await journalToolCall(journal, p, { toolName: "create_payment", scope: undefined, args: { ...args, amount_minor: 200 }, run: () => { runs++; return {}; } });
    assert.equal(c.kind === "text" && c.text, modelText("conflict", { tool: "create_payment", ids: "amount_minor, currency, order_id, ref" }));
    assert.equal(runs, 1);
  });
});
