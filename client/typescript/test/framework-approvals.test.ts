// Each framework's own approval flow bound to the journal's approvals,
// against the real opjournal (a policy that asks for a person above
// 1,000.00, an agent's and an operator's token) and opjournal-fakeprovider
// (which counts every charge): the journal's awaiting_approval raises the
// framework's approval request for that call; the operator's answer is
// Approve/Reject of that exact request hash under the operator's
// credential; after a restart of the run (new objects, state restored from
// its serialised form or its checkpointer) a rejected call stays rejected
// and nobody is asked again, an approved one is charged once. Also: the
// outcome each adapter gives the application (outcomeOf), and one member
// order for the first answer and every replay.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { Agent, run, RunState, setTracingDisabled, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, type BaseMessage } from "@langchain/core/messages";
import type { ChatResult } from "@langchain/core/outputs";
import { Command, MemorySaver } from "@langchain/langgraph";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { z } from "zod";

import { classifyHttp, Journal, OpjournalError } from "../src/index.js";
import * as aisdk from "../src/ai-sdk.js";
import * as agents from "../src/openai-agents.js";
import * as lc from "../src/langchain.js";
import { answerApproval, isToolApprovalRequest, modelText } from "../src/tools.js";
import { chargeVia, startFakeProvider, type FakeProvider } from "../testutil/fakeprovider.js";
import { makeToken, startJournal, tempDir, writeTokensFile, type JournalServer } from "../testutil/harness.js";
import { keyOf, TOOL } from "../testutil/agentscript.js";

setTracingDisabled(true);

const POLICY = `actions:
  create_payment:
    approval:
      when: "payload.amount_minor > 100000"
      approvers: [operator]
`;
const schema = z.object({ order_id: z.string(), amount_minor: z.number().int(), currency: z.string() });
const big = (order: string) => ({ order_id: order, amount_minor: 250000, currency: "RUB" });
const rejectedText = modelText("approval_rejected", { tool: TOOL, ids: "order_id", error_code: "approval_rejected" });

// --- the frameworks' scripted models: one call of args per turn, then final text

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 10, text: 10, reasoning: undefined },
};
function aiModel(calls: object[]) {
  let n = 0;
  const toolTexts: string[] = [];
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      for (const m of options.prompt) {
        if (m.role !== "tool") continue;
        for (const p of m.content) if (p.type === "tool-result") toolTexts.push(p.output.type === "text" ? p.output.value : JSON.stringify(p.output));
      }
      const args = calls[n++];
      if (!args) return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
      return { content: [{ type: "tool-call", toolCallId: `call_${n}_${Math.random()}`, toolName: TOOL, input: JSON.stringify(args) }],
        finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
    },
  });
  return { model, toolTexts };
}

class AgentsModel implements Model {
  n = 0;
  constructor(private readonly calls: object[]) {}
  async getResponse(_r: ModelRequest): Promise<ModelResponse> {
    const args = this.calls[this.n++];
    const u = new Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 });
    if (!args) return { usage: u, output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
    return { usage: u, output: [{ type: "function_call", callId: `call_${this.n}_${Math.random()}`, name: TOOL, arguments: JSON.stringify(args), status: "completed" }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> { throw new Error("no streaming"); }
}

class LcModel extends BaseChatModel {
  n = 0;
  constructor(private readonly calls: object[]) { super({}); }
  _llmType(): string { return "scripted"; }
  override bindTools(): this { return this; }
  async _generate(_m: BaseMessage[]): Promise<ChatResult> {
    const args = this.calls[this.n++];
    const message = args
      ? new AIMessage({ content: "", tool_calls: [{ id: `call_${this.n}_${Math.random()}`, name: TOOL, args: args as Record<string, unknown>, type: "tool_call" }] })
      : new AIMessage({ content: "done" });
    return { generations: [{ text: "", message }] };
  }
}

describe("the frameworks' approval flows bound to the journal", () => {
  let srv: JournalServer;
  let provider: FakeProvider;
  let agentJ: Journal;
  let operator: Journal;
  let tmp: ReturnType<typeof tempDir>;

  before(async () => {
    tmp = tempDir();
    const [a, o] = await Promise.all([makeToken("agent-1", "acme", "agent"), makeToken("alice", "acme", "operator")]);
    const file = writeTokensFile(tmp.dir, [a.entry, o.entry]);
    [srv, provider] = await Promise.all([startJournal({ policy: POLICY, args: ["--auth-file", file] }), startFakeProvider()]);
    agentJ = new Journal({ baseUrl: srv.baseUrl, token: a.token, workerId: "ts-approvals" });
    operator = new Journal({ baseUrl: srv.baseUrl, token: o.token });
  });
  after(async () => {
    agentJ?.close();
    operator?.close();
    await Promise.all([srv?.stop(), provider?.stop()]);
    tmp?.cleanup();
  });

  /** The journal's record must match the request the framework raised. */
  async function checkRaised(req: { key: string; requestHash: string }, scope: string, order: string) {
    assert.equal(req.key, keyOf(order, scope));
    const rec = await operator.lookup(req.key);
    assert.equal(rec.status, "awaiting_approval");
    assert.equal(req.requestHash, rec.requestHash);
  }

  test("AI SDK: toolApproval asks for the journal's question; a rejection holds across runs, an approval charges once", async () => {
    const scope = "ai-appr";
    const mk = () => aisdk.journaledTool(agentJ, { action: TOOL, keyFields: ["order_id"], scope }, {
      name: TOOL, description: "Charge", inputSchema: schema, execute: chargeVia(provider.url, classifyHttp) });
    for (const [order, approved] of [["A1", false], ["B1", true]] as const) {
      // Run 1: the SDK stops with the journal's question; nothing is charged.
      const tools1 = { [TOOL]: mk() };
      const m1 = aiModel([big(order)]);
      const r1 = await generateText({ model: m1.model, tools: tools1, toolApproval: aisdk.journalToolApproval(tools1), stopWhen: stepCountIs(5), prompt: "pay" });
      const parts = r1.content.filter((p) => p.type === "tool-approval-request") as unknown as aisdk.ApprovalRequestPart[];
      assert.equal(parts.length, 1);
      const req = await aisdk.approvalRequestOf(operator, tools1[TOOL], parts[0]!);
      await checkRaised(req, scope, order);
      // The agent's credential may not answer: the journal refuses, nothing changes.
      await assert.rejects(aisdk.answerToolApproval(agentJ, tools1[TOOL], parts[0]!, { approved: true, reason: "self" }));
      const response = await aisdk.answerToolApproval(operator, tools1[TOOL], parts[0]!, { approved, reason: approved ? "invoice checked" : "not ordered" });
      // Run 2, "after a restart": new tools, the conversation as stored.
      const tools2 = { [TOOL]: mk() };
      const m2 = aiModel([]);
      const ended: unknown[] = [];
      await generateText({ model: m2.model, tools: tools2, toolApproval: aisdk.journalToolApproval(tools2), stopWhen: stepCountIs(5),
        onToolExecutionEnd: (e) => { ended.push(e); }, // ai 7
        ...({ experimental_onToolCallFinish: (e: unknown) => { ended.push(e); } }), // ai 6's name
        messages: [{ role: "user", content: "pay" }, ...r1.response.messages, { role: "tool", content: [response] }] as never });
      assert.equal(await provider.effects(req.key), approved ? 1 : 0);
      if (approved) {
        // The approved call runs before the first step: the tool-execution callback shows it.
        const out = aisdk.outcomeOf(ended[0]);
        assert.equal(out?.kind, "succeeded");
        assert.equal(out?.replayed, false);
        assert.match(out?.externalId ?? "", /^pay_/);
      }
      // Run 3: the model asks for the same charge again: nobody is asked, the journal answers.
      const tools3 = { [TOOL]: mk() };
      const m3 = aiModel([big(order)]);
      const r3 = await generateText({ model: m3.model, tools: tools3, toolApproval: aisdk.journalToolApproval(tools3), stopWhen: stepCountIs(5), prompt: "pay" });
      assert.equal(r3.content.filter((p) => p.type === "tool-approval-request").length, 0, "asked again");
      const out3 = aisdk.outcomeOf(r3.steps.flatMap((s) => s.toolResults)[0]);
      if (approved) {
        assert.deepEqual([out3?.kind, out3?.replayed], ["succeeded", true]);
      } else {
        assert.deepEqual([out3?.kind, out3?.errorCode], ["failed_final", "approval_rejected"]);
        assert.equal(m3.toolTexts[0], rejectedText);
      }
      assert.equal(await provider.effects(req.key), approved ? 1 : 0);
    }
  });

  test("OpenAI Agents: needsApproval interrupts with the journal's question; a rejection holds across a restored state, an approval charges once", async () => {
    const scope = "agents-appr";
    const mk = () => agents.journaledTool(agentJ, { action: TOOL, keyFields: ["order_id"], scope }, {
      name: TOOL, description: "Charge", parameters: schema, execute: chargeVia(provider.url, classifyHttp) });
    for (const [order, approved] of [["A2", false], ["B2", true]] as const) {
      const t1 = mk();
      const a1 = new Agent({ name: "shop", instructions: "pay", model: new AgentsModel([big(order)]), tools: [t1] });
      const r1 = await run(a1, "pay", { maxTurns: 5 });
      assert.equal(r1.interruptions.length, 1);
      const saved = r1.state.toString(); // the state a server keeps while a person decides
      // "Restart": a new agent and tool, the state restored from its text.
      const t2 = mk();
      const a2 = new Agent({ name: "shop", instructions: "pay", model: new AgentsModel([]), tools: [t2] });
      const state = await RunState.fromString(a2, saved);
      const item = state.getInterruptions()[0]!;
      const req = await agents.approvalRequestOf(operator, t2, item);
      assert.ok(req);
      await checkRaised(req, scope, order);
      // The agent's credential may not answer: the journal refuses, the state is unchanged.
      await assert.rejects(agents.answerInterruption(agentJ, t2, state, item, { approved: true, reason: "self" }));
      assert.equal(state.getInterruptions().length, 1);
      const answered = await agents.answerInterruption(operator, t2, state, item, { approved, reason: approved ? "invoice checked" : "not ordered" });
      assert.equal(answered.requestHash, req.requestHash);
      const r2 = await run(a2, state, { maxTurns: 5 });
      assert.equal(r2.interruptions.length, 0);
      assert.equal(await provider.effects(req.key), approved ? 1 : 0);
      if (approved) {
        const outItem = r2.newItems.find((i) => i.type === "tool_call_output_item");
        const out = agents.outcomeOf(outItem);
        assert.deepEqual([out?.kind, out?.replayed, out?.key], ["succeeded", false, req.key]);
      }
      // A new run asks for the same charge: no interruption; the journal answers.
      const t3 = mk();
      const r3 = await run(new Agent({ name: "shop", instructions: "pay", model: new AgentsModel([big(order)]), tools: [t3] }), "pay", { maxTurns: 5 });
      assert.equal(r3.interruptions.length, 0, "asked again");
      const out3 = agents.outcomeOf(r3.newItems.find((i) => i.type === "tool_call_output_item"));
      assert.deepEqual([out3?.kind, out3?.replayed], approved ? ["succeeded", true] : ["failed_final", true]);
      assert.equal(await provider.effects(req.key), approved ? 1 : 0);
    }
  });

  test("LangGraph: interrupt carries the journal's question; a rejection holds across a new graph on the checkpointer, an approval charges once", async () => {
    const scope = "lg-appr";
    const checkpointer = new MemorySaver(); // the durable part a restarted process keeps
    const charge = chargeVia(provider.url, classifyHttp);
    const mk = () => lc.journaledTool(agentJ, { action: TOOL, keyFields: ["order_id"], scope: (c) => c?.configurable?.["user_id"] as string },
      async (args: z.infer<typeof schema>, ctx) => JSON.stringify(await charge(args, ctx)), { name: TOOL, description: "Charge", schema });
    for (const [order, approved] of [["A3", false], ["B3", true]] as const) {
      const config = { configurable: { thread_id: `t-${order}`, user_id: scope }, recursionLimit: 10 };
      const g1 = createReactAgent({ llm: new LcModel([big(order)]), tools: [mk()], checkpointer });
      const r1 = await g1.invoke({ messages: [{ role: "user", content: "pay" }] }, config) as { __interrupt__?: { value: unknown }[] };
      const value = r1.__interrupt__?.[0]?.value;
      assert.ok(isToolApprovalRequest(value), JSON.stringify(r1.__interrupt__));
      await checkRaised(value, scope, order);
      await assert.rejects(answerApproval(agentJ, value, { approved: true, reason: "self" }));
      // An answer to another request under the key, or to no request, changes nothing.
      await assert.rejects(answerApproval(operator, { ...value, requestHash: "0".repeat(64) }, { approved: true, reason: "x" }),
        (e: unknown) => e instanceof OpjournalError && e.code === "PAYLOAD_MISMATCH");
      await assert.rejects(answerApproval(operator, { key: value.key } as never, { approved: true, reason: "x" }),
        (e: unknown) => e instanceof OpjournalError && e.code === "INVALID_ARGUMENT");
      assert.equal((await operator.lookup(value.key)).status, "awaiting_approval");
      await answerApproval(operator, value, { approved, reason: approved ? "invoice checked" : "not ordered" });
      // "Restart": a new graph on the same checkpointer resumes the thread.
      const g2 = createReactAgent({ llm: new LcModel([]), tools: [mk()], checkpointer });
      const r2 = await g2.invoke(new Command({ resume: { approved } }), config) as { messages: BaseMessage[]; __interrupt__?: unknown[] };
      assert.equal(r2.__interrupt__?.length ?? 0, 0);
      const toolMsg = r2.messages.find((m) => m.getType() === "tool");
      const out = lc.outcomeOf(toolMsg);
      assert.equal(await provider.effects(value.key), approved ? 1 : 0);
      if (approved) {
        assert.deepEqual([out?.kind, out?.replayed], ["succeeded", false]);
        assert.match(out?.externalId ?? "", /^pay_/, "the JSON text's id is the external id");
        assert.match((await operator.lookup(value.key)).externalId, /^pay_/);
      } else {
        assert.deepEqual([out?.kind, out?.errorCode], ["failed_final", "approval_rejected"]);
        assert.equal(toolMsg?.content, rejectedText);
      }
      // A new thread asks for the same charge: no interrupt; the journal answers.
      const g3 = createReactAgent({ llm: new LcModel([big(order)]), tools: [mk()], checkpointer });
      const r3 = await g3.invoke({ messages: [{ role: "user", content: "pay" }] },
        { ...config, configurable: { ...config.configurable, thread_id: `t-${order}-again` } }) as { messages: BaseMessage[]; __interrupt__?: unknown[] };
      assert.equal(r3.__interrupt__?.length ?? 0, 0, "asked again");
      const out3 = lc.outcomeOf(r3.messages.find((m) => m.getType() === "tool"));
      assert.deepEqual([out3?.kind, out3?.replayed], approved ? ["succeeded", true] : ["failed_final", true]);
      assert.equal(await provider.effects(value.key), approved ? 1 : 0);
    }
  });

  test("the first answer and 20 replays are one text, member order included, in every adapter", async () => {
    const small = { order_id: "M1", amount_minor: 500, currency: "RUB" };
    // A provider answer whose members are not in canonical order.
    const execute = async () => ({ status: "succeeded", id: "pay_m1", zeta: 1, alpha: { z: 1, a: 2 } });
    const ai = aisdk.journaledTool(agentJ, { action: TOOL, keyFields: ["order_id"], scope: "order-ai" }, { name: TOOL, inputSchema: schema, execute });
    const ag = agents.journaledTool(agentJ, { action: TOOL, keyFields: ["order_id"], scope: "order-ag" }, { name: TOOL, description: "c", parameters: schema, execute });
    const lt = lc.journaledTool(agentJ, { action: TOOL, keyFields: ["order_id"], scope: "order-lc" }, async () => JSON.stringify(await execute()), { name: TOOL, schema });
    const texts: Record<string, string[]> = { ai: [], ag: [], lc: [] };
    for (let i = 0; i < 21; i++) {
      const o = await (ai as unknown as { execute: (a: unknown, o: unknown) => Promise<{ output: unknown; opjournal: { replayed: boolean } }> })
        .execute(small, { toolCallId: `c${i}`, messages: [] });
      assert.equal(o.opjournal.replayed, i > 0);
      texts["ai"]!.push(JSON.stringify(o.output));
      const g = await (ag as unknown as { invoke: (rc: unknown, input: string, d: unknown) => Promise<unknown> })
        .invoke(undefined, JSON.stringify(small), { toolCall: { callId: `c${i}`, type: "function_call", name: TOOL, arguments: JSON.stringify(small) } });
      texts["ag"]!.push(typeof g === "string" ? g : JSON.stringify(g));
      const m = await lt.invoke({ id: `c${i}`, name: TOOL, args: small, type: "tool_call" });
      texts["lc"]!.push(String((m as { content: unknown }).content));
    }
    for (const [name, t] of Object.entries(texts)) {
      assert.equal(new Set(t).size, 1, `${name}: ${[...new Set(t)].join(" | ")}`);
    }
    assert.equal(texts["ai"]![0], '{"alpha":{"a":2,"z":1},"id":"pay_m1","status":"succeeded","zeta":1}');
  });
});
