// @opjournal/client/langchain with LangGraph's own tool loop
// (createReactAgent, which runs tools through ToolNode) and a scripted
// fake chat model, against the real opjournal and opjournal-fakeprovider
// binaries.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, type BaseMessage } from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { z } from "zod";

import { classifyHttp, Journal } from "../src/index.js";
import { journaledTool, outcomeOf } from "../src/langchain.js";
import { chargeVia, startFakeProvider, type FakeProvider } from "../testutil/fakeprovider.js";
import { startJournal, type JournalServer } from "../testutil/harness.js";
import {
  BUDGET_FINAL, BUDGET_POLICY, BUDGET_SCOPE, BUDGET_TURNS, checkBudgetConversation, checkConversation, exampleModule, FINAL, keyOf,
  LOST_ANSWER_FAULTS, TOOL, TURNS, type Turn,
} from "../testutil/agentscript.js";

/** A fake chat model that makes the turns' tool calls, then says final; calls records what it was sent. */
export class ScriptedChatModel extends BaseChatModel {
  readonly calls: BaseMessage[][] = [];
  constructor(private readonly turns: Turn[], private readonly final: string, private readonly toolName = TOOL) {
    super({});
  }
  _llmType(): string { return "scripted-fake"; }
  override bindTools(): this { return this; }
  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    this.calls.push([...messages]);
    const turn = this.turns[this.calls.length - 1];
    const message = turn
      ? new AIMessage({ content: turn.say, tool_calls: [{ id: turn.id, name: this.toolName, args: turn.args, type: "tool_call" }] })
      : new AIMessage({ content: this.final });
    return { generations: [{ text: typeof message.content === "string" ? message.content : "", message }] };
  }
  /** The tool messages the model was sent last, in order, as text. */
  toolResults(): string[] {
    return (this.calls.at(-1) ?? []).filter((m) => m.getType() === "tool")
      .map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
  }
}

describe("langchain adapter", () => {
  let srv: JournalServer;
  let provider: FakeProvider;
  let journal: Journal;

  before(async () => {
    [srv, provider] = await Promise.all([startJournal(), startFakeProvider()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-langchain" });
  });
  after(async () => {
    journal?.close();
    await Promise.all([srv?.stop(), provider?.stop()]);
  });

  for (const lost of LOST_ANSWER_FAULTS) {
    test(`a lost answer (${lost.fault.fault}) is one effect; the retry and a changed call are told the gateway's texts`, async () => {
      await provider.addFault(lost.fault);
      const charge = chargeVia(provider.url, classifyHttp, lost.chargeTimeoutMs);
      const createPayment = journaledTool(journal, { action: TOOL, keyFields: ["order_id"], scope: (config) => config?.configurable?.["user_id"] as string },
        async (args: { order_id: string; amount_minor: number; currency: string }, ctx) => JSON.stringify(await charge(args, ctx)),
        { name: TOOL, description: "Charge an order", schema: z.object({ order_id: z.string(), amount_minor: z.number().int(), currency: z.string() }) });
      const model = new ScriptedChatModel(TURNS, FINAL);
      const agent = createReactAgent({ llm: model, tools: [createPayment] });
      const result = await agent.invoke({ messages: [{ role: "user", content: "Charge orders 817 and 818." }] },
        { configurable: { user_id: lost.scope }, recursionLimit: 20 });
      assert.equal(result.messages.at(-1)?.content, FINAL);
      await checkConversation(model.toolResults(), provider, lost.scope);
    });
  }

  test("the documented example runs (docs/integrations/langchain.md)", async () => {
    const key = keyOf("817", "user-7");
    const model = new ScriptedChatModel([{ id: "call_x", say: "Charging.", args: { order_id: "817", amount_minor: 490000, currency: "RUB" } }], "Paid.");
    (globalThis as Record<string, unknown>)["opjournalTestModel"] = model;
    process.env["PROVIDER_URL"] = provider.url;
    process.env["OPJOURNAL_ADDR"] = srv.grpcAddr;
    const url = exampleModule("langchain.md", /^const llm = .*$/m, "const llm = globalThis.opjournalTestModel;",
      [/^import \{ ChatOpenAI \} from "@langchain\/openai";.*$/m]);
    await import(url);
    const paid = JSON.parse(model.toolResults()[0]!) as { id: string };
    assert.match(paid.id, /^pay_/);
    assert.equal(await provider.effects(key), 1);
    // The tool returns a JSON text: its "id" is the journal's external id (langchain.md says so).
    assert.equal((await journal.lookup(key)).externalId, paid.id);
    const again = new ScriptedChatModel([{ id: "call_y", say: "Again.", args: { currency: "RUB", order_id: "817", amount_minor: 490000 } }], "Paid.");
    (globalThis as Record<string, unknown>)["opjournalTestModel"] = again;
    await import(url + "?again");
    assert.deepEqual(JSON.parse(again.toolResults()[0]!), paid);
    assert.equal(await provider.effects(key), 1);
  });
});

describe("langchain adapter under a budget", () => {
  let srv: JournalServer;
  let provider: FakeProvider;
  let journal: Journal;

  before(async () => {
    [srv, provider] = await Promise.all([startJournal({ policy: BUDGET_POLICY }), startFakeProvider()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-langchain-budget" });
  });
  after(async () => {
    journal?.close();
    await Promise.all([srv?.stop(), provider?.stop()]);
  });

  test("an agent that keeps paying hits the budget: the refused calls read budget_exceeded and charge nothing", async () => {
    const charge = chargeVia(provider.url, classifyHttp);
    const createPayment = journaledTool(journal, { action: TOOL, keyFields: ["order_id"], scope: (config) => config?.configurable?.["user_id"] as string },
      async (args: { order_id: string; amount_minor: number; currency: string }, ctx) => JSON.stringify(await charge(args, ctx)),
      { name: TOOL, description: "Charge an order", schema: z.object({ order_id: z.string(), amount_minor: z.number().int(), currency: z.string() }) });
    const model = new ScriptedChatModel(BUDGET_TURNS, BUDGET_FINAL);
    const agent = createReactAgent({ llm: model, tools: [createPayment] });
    const result = await agent.invoke({ messages: [{ role: "user", content: "Pay orders 901 to 903." }] },
      { configurable: { user_id: BUDGET_SCOPE }, recursionLimit: 20 });
    assert.equal(result.messages.at(-1)?.content, BUDGET_FINAL);
    const kinds = result.messages.filter((m) => m.getType() === "tool").map((m) => outcomeOf(m)?.kind);
    await checkBudgetConversation(model.toolResults(), kinds, provider);
  });
});
