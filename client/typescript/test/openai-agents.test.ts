// @opjournal/client/openai-agents with the Agents SDK's own tool loop
// (run) and a custom Model that plays the script, against the real
// opjournal and opjournal-fakeprovider binaries.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { Agent, run, setTracingDisabled, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";

import { classifyHttp, Journal } from "../src/index.js";
import { journaledTool, outcomeOf } from "../src/openai-agents.js";
import { chargeVia, startFakeProvider, type FakeProvider } from "../testutil/fakeprovider.js";
import { startJournal, type JournalServer } from "../testutil/harness.js";
import {
  BUDGET_FINAL, BUDGET_POLICY, BUDGET_SCOPE, BUDGET_TURNS, checkBudgetConversation, checkConversation, exampleModule, FINAL, keyOf,
  LOST_ANSWER_FAULTS, TOOL, TURNS, type Turn,
} from "../testutil/agentscript.js";

setTracingDisabled(true); // no trace export to OpenAI from a test

/** A Model that makes the turns' calls, then says final; requests records what it was sent. */
class ScriptedModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(private readonly turns: Turn[], private readonly final: string, private readonly toolName = TOOL) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(structuredClone(request.input) as ModelRequest["input"] as never);
    const turn = this.turns[this.requests.length - 1];
    const usage = new Usage({ requests: 1, inputTokens: 10, outputTokens: 10, totalTokens: 20 });
    const say = (text: string) => ({ type: "message" as const, role: "assistant" as const, status: "completed" as const,
      content: [{ type: "output_text" as const, text }] });
    if (!turn) return { usage, output: [say(this.final)] };
    return { usage, output: [say(turn.say),
      { type: "function_call", callId: turn.id, name: this.toolName, arguments: JSON.stringify(turn.args), status: "completed" }] };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the script does not stream");
  }

  /** The function results the model was sent last, in order, as text. */
  toolResults(): string[] {
    const last = this.requests.at(-1);
    if (!Array.isArray(last)) return [];
    return last.flatMap((item) => {
      const it = item as { type?: string; output?: unknown };
      if (it.type !== "function_call_result") return [];
      const o = it.output as string | { type: string; text?: string };
      return [typeof o === "string" ? o : o.type === "text" ? o.text ?? "" : JSON.stringify(o)];
    });
  }
}

describe("openai-agents adapter", () => {
  let srv: JournalServer;
  let provider: FakeProvider;
  let journal: Journal;

  before(async () => {
    [srv, provider] = await Promise.all([startJournal(), startFakeProvider()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-openai-agents" });
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
        parameters: z.object({ order_id: z.string(), amount_minor: z.number().int(), currency: z.string() }),
        execute: chargeVia(provider.url, classifyHttp, lost.chargeTimeoutMs),
      });
      const model = new ScriptedModel(TURNS, FINAL);
      const agent = new Agent({ name: "shop", instructions: "Charge orders.", model, tools: [createPayment] });
      const result = await run(agent, "Charge orders 817 and 818.", { maxTurns: 10 });
      assert.equal(result.finalOutput, FINAL);
      await checkConversation(model.toolResults(), provider, lost.scope);
    });
  }

  test("the documented example runs (docs/integrations/openai-agents.md)", async () => {
    const key = keyOf("817", "user-7");
    const model = new ScriptedModel([{ id: "call_x", say: "Charging.", args: { order_id: "817", amount_minor: 490000, currency: "RUB" } }], "Paid.");
    (globalThis as Record<string, unknown>)["opjournalTestModel"] = model;
    process.env["PROVIDER_URL"] = provider.url;
    process.env["OPJOURNAL_ADDR"] = srv.grpcAddr;
    const url = exampleModule("openai-agents.md", /^const model = .*$/m, "const model = globalThis.opjournalTestModel;");
    await import(url);
    const paid = JSON.parse(model.toolResults()[0]!) as { id: string };
    assert.match(paid.id, /^pay_/);
    assert.equal(await provider.effects(key), 1);
    const again = new ScriptedModel([{ id: "call_y", say: "Again.", args: { currency: "RUB", order_id: "817", amount_minor: 490000 } }], "Paid.");
    (globalThis as Record<string, unknown>)["opjournalTestModel"] = again;
    await import(url + "?again");
    assert.deepEqual(JSON.parse(again.toolResults()[0]!), paid);
    assert.equal(await provider.effects(key), 1);
  });
});

describe("openai-agents adapter under a budget", () => {
  let srv: JournalServer;
  let provider: FakeProvider;
  let journal: Journal;

  before(async () => {
    [srv, provider] = await Promise.all([startJournal({ policy: BUDGET_POLICY }), startFakeProvider()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-openai-agents-budget" });
  });
  after(async () => {
    journal?.close();
    await Promise.all([srv?.stop(), provider?.stop()]);
  });

  test("an agent that keeps paying hits the budget: the refused calls read budget_exceeded and charge nothing", async () => {
    const createPayment = journaledTool(journal, { action: TOOL, keyFields: ["order_id"], scope: BUDGET_SCOPE }, {
      name: TOOL,
      description: "Charge an order",
      parameters: z.object({ order_id: z.string(), amount_minor: z.number().int(), currency: z.string() }),
      execute: chargeVia(provider.url, classifyHttp),
    });
    const model = new ScriptedModel(BUDGET_TURNS, BUDGET_FINAL);
    const agent = new Agent({ name: "shop", instructions: "Pay orders.", model, tools: [createPayment] });
    const result = await run(agent, "Pay orders 901 to 903.", { maxTurns: 10 });
    assert.equal(result.finalOutput, BUDGET_FINAL);
    const kinds = result.newItems.filter((i) => i.type === "tool_call_output_item").map((i) => outcomeOf(i)?.kind);
    await checkBudgetConversation(model.toolResults(), kinds, provider);
  });
});
