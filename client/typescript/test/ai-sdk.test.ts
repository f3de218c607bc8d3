// @opjournal/client/ai-sdk with the AI SDK's own tool loop (generateText)
// and its mock language model (ai/test), against the real opjournal and
// opjournal-fakeprovider binaries.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { classifyHttp, Journal } from "../src/index.js";
import { journaledTool, outcomeOf } from "../src/ai-sdk.js";
import { chargeVia, startFakeProvider, type FakeProvider } from "../testutil/fakeprovider.js";
import { startJournal, type JournalServer } from "../testutil/harness.js";
import {
  BUDGET_FINAL, BUDGET_POLICY, BUDGET_SCOPE, BUDGET_TURNS, checkBudgetConversation, checkConversation, exampleModule, FINAL, keyOf,
  LOST_ANSWER_FAULTS, TOOL, TURNS, type Turn,
} from "../testutil/agentscript.js";

type Prompt = Parameters<MockLanguageModelV3["doGenerate"]>[0]["prompt"];

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};

/** A mock model that makes the turns' calls, then says final; prompts records what it was sent. */
function scriptedModel(turns: Turn[], final: string, toolName = TOOL) {
  const prompts: Prompt[] = [];
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      prompts.push(options.prompt);
      const turn = turns[prompts.length - 1];
      if (!turn) return { content: [{ type: "text", text: final }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      return {
        content: [{ type: "text", text: turn.say }, { type: "tool-call", toolCallId: turn.id, toolName, input: JSON.stringify(turn.args) }],
        finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [],
      };
    },
  });
  return { model, prompts };
}

/** The tool results the model was sent, in order, as text. */
function toolResults(prompts: Prompt[]): string[] {
  const last = prompts.at(-1) ?? [];
  const out: string[] = [];
  for (const msg of last) {
    if (msg.role !== "tool") continue;
    for (const part of msg.content) {
      if (part.type !== "tool-result") continue;
      const o = part.output;
      out.push(o.type === "text" || o.type === "error-text" ? o.value : JSON.stringify(o.type === "json" || o.type === "error-json" ? o.value : o));
    }
  }
  return out;
}

describe("ai-sdk adapter", () => {
  let srv: JournalServer;
  let provider: FakeProvider;
  let journal: Journal;

  before(async () => {
    [srv, provider] = await Promise.all([startJournal(), startFakeProvider()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-ai-sdk" });
  });
  after(async () => {
    journal?.close();
    await Promise.all([srv?.stop(), provider?.stop()]);
  });

  for (const lost of LOST_ANSWER_FAULTS) {
    test(`a lost answer (${lost.fault.fault}) is one effect; the retry and a changed call are told the gateway's texts`, async () => {
      await provider.addFault(lost.fault);
      const createPayment = journaledTool(journal, { action: TOOL, keyFields: ["order_id"], scope: lost.scope }, {
        name: TOOL,
        description: "Charge an order",
        inputSchema: z.object({ order_id: z.string(), amount_minor: z.number().int(), currency: z.string() }),
        execute: chargeVia(provider.url, classifyHttp, lost.chargeTimeoutMs),
      });
      const { model, prompts } = scriptedModel(TURNS, FINAL);
      const result = await generateText({ model, tools: { [TOOL]: createPayment }, stopWhen: stepCountIs(10), prompt: "Charge orders 817 and 818." });
      assert.equal(result.text, FINAL);
      await checkConversation(toolResults(prompts), provider, lost.scope);
    });
  }

  test("the documented example runs (docs/integrations/ai-sdk.md)", async () => {
    const key = keyOf("817", "user-7");
    const { model, prompts } = scriptedModel([{ id: "call_x", say: "Charging.", args: { order_id: "817", amount_minor: 490000, currency: "RUB" } }], "Paid.");
    (globalThis as Record<string, unknown>)["opjournalTestModel"] = model;
    process.env["PROVIDER_URL"] = provider.url;
    process.env["OPJOURNAL_ADDR"] = srv.grpcAddr;
    const url = exampleModule("ai-sdk.md", /^const model = .*$/m, "const model = globalThis.opjournalTestModel;");
    await import(url);
    const paid = JSON.parse(toolResults(prompts)[0]!) as { id: string };
    assert.match(paid.id, /^pay_/);
    assert.equal(await provider.effects(key), 1);
    // Run again: the model's call is the stored answer; nothing is charged.
    const again = scriptedModel([{ id: "call_y", say: "Charging again.", args: { order_id: "817", amount_minor: 490000, currency: "RUB" } }], "Paid.");
    (globalThis as Record<string, unknown>)["opjournalTestModel"] = again.model;
    await import(url + "?again");
    assert.deepEqual(JSON.parse(toolResults(again.prompts)[0]!), paid);
    assert.equal(await provider.effects(key), 1);
  });
});

describe("ai-sdk adapter under a budget", () => {
  let srv: JournalServer;
  let provider: FakeProvider;
  let journal: Journal;

  before(async () => {
    [srv, provider] = await Promise.all([startJournal({ policy: BUDGET_POLICY }), startFakeProvider()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-ai-sdk-budget" });
  });
  after(async () => {
    journal?.close();
    await Promise.all([srv?.stop(), provider?.stop()]);
  });

  test("an agent that keeps paying hits the budget: the refused calls read budget_exceeded and charge nothing", async () => {
    const createPayment = journaledTool(journal, { action: TOOL, keyFields: ["order_id"], scope: BUDGET_SCOPE }, {
      name: TOOL,
      description: "Charge an order",
      inputSchema: z.object({ order_id: z.string(), amount_minor: z.number().int(), currency: z.string() }),
      execute: chargeVia(provider.url, classifyHttp),
    });
    const { model, prompts } = scriptedModel(BUDGET_TURNS, BUDGET_FINAL);
    const result = await generateText({ model, tools: { [TOOL]: createPayment }, stopWhen: stepCountIs(10), prompt: "Pay orders 901 to 903." });
    assert.equal(result.text, BUDGET_FINAL);
    const kinds = result.steps.flatMap((s) => s.toolResults).map((r) => outcomeOf(r)?.kind);
    await checkBudgetConversation(toolResults(prompts), kinds, provider);
  });
});
