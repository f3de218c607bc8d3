// The conversation every adapter's test plays with its framework's real
// tool loop and a scripted test model: the answer of the first charge is
// lost at the provider (once per fault kind that loses an answer after the
// effect: LOST_ANSWER_FAULTS), the model retries
// with the same arguments in another order, another wording and a new
// call id, then tries a changed amount, then charges a second order twice.
// The provider must hold one effect per order, and the model must read the
// shared texts (protocol/testdata/model_texts.json) for what the journal did.
// And an agent that keeps paying under a budget (BUDGET_POLICY) until the
// journal refuses: the refused calls read the budget_exceeded text and
// reach nothing.

import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { modelText, toolKey } from "../src/tools.js";
import { repoRoot } from "./harness.js";
import type { Fault, FakeProvider } from "./fakeprovider.js";

/** The scope the tests' tools use. */
export const SCOPE = "user-42";
/** The tool's name and policy action. */
export const TOOL = "create_payment";

/**
 * One way the provider loses the first charge's answer after performing
 * it. Each case plays the conversation in its own scope, so that its
 * operation keys (and the provider's effect keys) are its own and the
 * cases do not see each other's effects.
 */
export interface LostAnswer {
  /** The fault rule (count 1) that loses the first charge's answer. */
  fault: Fault;
  /** The scope the case's tool uses. */
  scope: string;
  /** How long the tool's provider call waits for an answer (chargeVia's timeoutMs). */
  chargeTimeoutMs: number;
}

/**
 * Every fault kind of the test provider that performs the effect and loses
 * its answer: the connection dropped, a 5xx, and an answer held past the
 * call's timeout. The last holds for 30 s against a 1 s wait, so the case
 * stays fast and the call surely gives up before the answer comes.
 */
export const LOST_ANSWER_FAULTS: LostAnswer[] = [
  { fault: { path: "/payments", fault: "drop_connection_after_commit", count: 1 }, scope: `${SCOPE}-dropped`, chargeTimeoutMs: 5_000 },
  { fault: { path: "/payments", fault: "error_after_commit", count: 1 }, scope: `${SCOPE}-5xx`, chargeTimeoutMs: 5_000 },
  { fault: { path: "/payments", fault: "commit_then_timeout", count: 1, delay: "30s" }, scope: `${SCOPE}-held`, chargeTimeoutMs: 1_000 },
];

/** One turn of the model: what it says and the call it makes. */
export interface Turn {
  id: string;
  say: string;
  args: { order_id: string; amount_minor: number; currency: string };
}

/** The model's calls, in order; after them it answers FINAL. */
export const TURNS: Turn[] = [
  { id: "call_a1", say: "I'll charge order 817 now.", args: { order_id: "817", amount_minor: 490000, currency: "RUB" } },
  { id: "call_b2", say: "That did not come back. Let me try the very same charge once more.",
    args: { currency: "RUB", amount_minor: 490000, order_id: "817" } },
  { id: "call_c3", say: "Perhaps a slightly different amount goes through.", args: { order_id: "817", amount_minor: 500000, currency: "RUB" } },
  { id: "call_d4", say: "Now order 818.", args: { order_id: "818", amount_minor: 1200, currency: "EUR" } },
  { id: "call_e5", say: "Did order 818 go through? Asking again.", args: { amount_minor: 1200, order_id: "818", currency: "EUR" } },
];

/** The model's last words. */
export const FINAL = "Order 817 is pending verification; order 818 is paid.";

/** The operation key (and the provider's effect key) of an order's charge. */
export function keyOf(orderId: string, scope = SCOPE): string {
  const k = toolKey(TOOL, scope, ["order_id"], { order_id: orderId });
  assert.ok(k.key);
  return k.key;
}

/**
 * Checks what the model read after each call (texts: one per turn, the
 * tool's output rendered as the framework gave it to the model) and the
 * provider's effects for the orders of scope.
 */
export async function checkConversation(texts: string[], provider: FakeProvider, scope = SCOPE): Promise<void> {
  const unknown = modelText("unknown", { tool: TOOL, ids: "order_id" });
  const conflict = modelText("conflict", { tool: TOOL, ids: "order_id" });
  assert.equal(texts.length, TURNS.length, `the model read ${texts.length} tool results: ${JSON.stringify(texts)}`);
  assert.equal(texts[0], unknown, "the lost answer is unknown, in the gateway's words");
  assert.equal(texts[1], unknown, "the retry is not sent again and still unknown");
  assert.equal(texts[2], conflict, "a changed amount is refused, in the gateway's words");
  const paid = JSON.parse(texts[3]!) as { id: string; status: string; order_id: string };
  assert.match(paid.id, /^pay_/);
  assert.equal(paid.order_id, "818");
  assert.deepEqual(JSON.parse(texts[4]!), paid, "the retry of 818 is the stored answer");
  assert.equal(await provider.effects(keyOf("817", scope)), 1, "one charge of order 817 at the provider");
  assert.equal(await provider.effects(keyOf("818", scope)), 1, "one charge of order 818 at the provider");
}

/**
 * A policy whose create_payment allows two payments a day per currency
 * (on_exceed reject): the budget the loops' agent runs into.
 */
export const BUDGET_POLICY = `actions:
  create_payment:
    budgets:
      - name: daily-payments
        count: true
        per: [payload.currency]
        window: 24h
        limit: 2
        on_exceed: reject
`;

/** The scope of the budget loops' tool. */
export const BUDGET_SCOPE = `${SCOPE}-budget`;

/**
 * An agent that keeps paying: two orders are paid, the third passes the
 * daily count and is refused, and so is the same order split into a
 * smaller payment.
 */
export const BUDGET_TURNS: Turn[] = [
  { id: "call_p1", say: "Paying order 901.", args: { order_id: "901", amount_minor: 1000, currency: "EUR" } },
  { id: "call_p2", say: "Paying order 902.", args: { order_id: "902", amount_minor: 1000, currency: "EUR" } },
  { id: "call_p3", say: "Paying order 903.", args: { order_id: "903", amount_minor: 1000, currency: "EUR" } },
  { id: "call_p4", say: "Then half of order 903 under another order.", args: { order_id: "903-a", amount_minor: 500, currency: "EUR" } },
];

/** The model's last words in the budget loops. */
export const BUDGET_FINAL = "Orders 901 and 902 are paid; the daily payment limit stopped order 903.";

/**
 * Checks the budget loop: what the model read after each call (texts),
 * the outcome the adapter gave the application for each (kinds, read with
 * its outcomeOf) and the provider's effects: the refused calls read the
 * budget_exceeded text and reached nothing.
 */
export async function checkBudgetConversation(texts: string[], kinds: (string | undefined)[], provider: FakeProvider): Promise<void> {
  assert.equal(texts.length, BUDGET_TURNS.length, `the model read ${texts.length} tool results: ${JSON.stringify(texts)}`);
  assert.deepEqual(kinds, ["succeeded", "succeeded", "budget_exceeded", "budget_exceeded"], "outcomeOf");
  for (const [i, order] of ["901", "902"].entries()) {
    const paid = JSON.parse(texts[i]!) as { id: string; order_id: string };
    assert.match(paid.id, /^pay_/);
    assert.equal(paid.order_id, order);
  }
  for (const text of texts.slice(2)) {
    // The window runs from order 901's registration, a moment ago.
    const n = /It may fit again in about (\d+) seconds\.$/.exec(text)?.[1];
    assert.ok(n !== undefined && Number(n) >= 86400 - 60 && Number(n) <= 86401, text);
    assert.equal(text, modelText("budget_exceeded", { tool: TOOL, budget: "daily-payments", used: "2", limit: "2", window: "24h",
      retry: ` It may fit again in about ${n} seconds.` }), "the refused call reads the budget text");
  }
  for (const [order, n] of [["901", 1], ["902", 1], ["903", 0], ["903-a", 0]] as const) {
    assert.equal(await provider.effects(keyOf(order, BUDGET_SCOPE)), n, `charges of order ${order} at the provider`);
  }
}

/**
 * The fenced js block after `<!-- test: example -->` in a docs/integrations
 * page, written as an ES module inside this package (so that
 * `@opjournal/client/...` resolves to this build), with the line that
 * picks the model replaced by the test's and the lines drop matches
 * (the import of a real model's package) removed. Returns the file's URL.
 */
export function exampleModule(page: string, modelLine: RegExp, replacement: string, drop: RegExp[] = []): string {
  const text = readFileSync(join(repoRoot(), "docs/integrations", page), "utf8");
  const m = /<!-- test: example -->\s*```js\n([\s\S]*?)\n```/.exec(text);
  assert.ok(m, `docs/integrations/${page} has no js block after <!-- test: example -->`);
  assert.match(m[1]!, modelLine, `docs/integrations/${page}: the example no longer picks its model with ${modelLine}`);
  let code = m[1]!.replace(modelLine, replacement);
  for (const d of drop) {
    assert.match(code, d, `docs/integrations/${page}: the example no longer has ${d}`);
    code = code.replace(d, "");
  }
  const here = dirname(fileURLToPath(import.meta.url));
  const dir = join(here, "..", "examples");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, page.replace(/\.md$/, ".mjs"));
  writeFileSync(file, code);
  return "file://" + file;
}
