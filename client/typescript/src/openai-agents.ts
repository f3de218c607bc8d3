// @opjournal/client/openai-agents: OpenAI Agents SDK (`@openai/agents`)
// function tools whose execute runs through the journal. The SDK is an
// optional peer dependency, loaded only by this module.
//
//     const createPayment = journaledTool(journal, { action: "create_payment", keyFields: ["order_id"], scope: "user-42" }, {
//       name: "create_payment", description: "Charge an order", parameters: z.object({ ... }),
//       execute: async (args, { key, signal }) => { ... Idempotency-Key: key ... return payment; },
//     });
//     const agent = new Agent({ name: "shop", tools: [createPayment], ... });
//     let result = await run(agent, input);
//     for (const item of result.interruptions) await answerInterruption(person, createPayment, result.state, item, { approved, reason });
//     result = await run(agent, result.state);

import { tool, type FunctionTool, type RunContext } from "@openai/agents";

import type { AttemptContext } from "./execute.js";
import type { Journal } from "./journal.js";
import {
  answerApproval, approvalStep, checkToolPolicy, journalToolCall, pendingApprovalOf, resolveScope,
  type ApprovalAnswer, type ToolApprovalRequest, type ToolOutcome, type ToolPolicy,
} from "./tools.js";

export {
  answerApproval, isToolApprovalRequest, modelText, toolKey,
  type ApprovalAnswer, type ToolAnswer, type ToolApprovalRequest, type ToolBudget, type ToolOutcome, type ToolPolicy,
} from "./tools.js";

/** The SDK's details of a call (toolCall, signal). */
export type ToolCallDetails = Parameters<Parameters<typeof tool>[0]["execute"]>[2];

/** What a journaled tool's execute gets besides its arguments: execute's AttemptContext and the SDK's. */
export interface JournaledCallContext<Context = unknown> extends AttemptContext {
  /** The run's context (RunContext.context is your app's). */
  runContext: RunContext<Context> | undefined;
  /** The SDK's details of the call. */
  details: ToolCallDetails;
}

/** A function tool's options as tool() takes them, with an execute that gets the attempt. */
export interface JournaledToolOptions<A, O, Context = unknown> {
  name: string;
  description: string;
  /** A zod object (or the JSON schema the SDK takes). */
  parameters: unknown;
  /**
   * Calls the provider once: pass ctx.key on (Idempotency-Key, or a
   * reference field) and ctx.signal. Throw Rejected for a definite
   * refusal; any other throw is an unknown outcome.
   */
  execute: (args: A, ctx: JournaledCallContext<Context>) => Promise<O> | O;
  /** Other options of tool() (strict, errorFunction, needsApproval, …), passed on as they are. */
  [other: string]: unknown;
}

/**
 * An Agents SDK function tool (tool()) whose execute runs through the
 * journal (execute): once per intent, the intent named by the policy's
 * keyFields of the arguments and its scope (a function of scope gets the
 * call's RunContext), or by its key function; never by the tool-call id.
 * The model gets the tool's output, the stored output on a retry (both in
 * one member order), or the gateway's text for an unknown outcome, a call
 * in progress, a conflicting call, a replayed refusal, a call awaiting a
 * person's approval, one a person rejected or one a budget of its action
 * refused (model_texts.ts). The
 * application gets the outcome in the tool call output item's customData
 * (outcomeOf). When the journal holds a
 * call in awaiting_approval, the tool's needsApproval raises the SDK's
 * interruption for it (answer it with answerInterruption); a call a person
 * already decided is not asked about again.
 */
export function journaledTool<A, O, Context = unknown>(
  journal: Journal,
  policy: ToolPolicy<A, RunContext<Context> | undefined>,
  options: JournaledToolOptions<A, O, Context>,
): FunctionTool<Context> {
  checkToolPolicy(policy);
  const { execute, needsApproval, customDataExtractor, ...rest } = options;
  if (needsApproval !== undefined) throw new TypeError("journaledTool: needsApproval is the journal's (its policy's approval: block); do not give one");
  const name = options.name;
  // The outcomes of calls whose output item the SDK has not made yet, by
  // call id: customDataExtractor takes each once (bounded, in case an SDK
  // never asks).
  const outcomes = new Map<string, ToolOutcome>();
  const wrapped = async (args: unknown, runContext?: RunContext<Context>, details?: ToolCallDetails): Promise<O | string> => {
    const answer = await journalToolCall(journal, policy, {
      toolName: name,
      args: args as A,
      scope: resolveScope(policy, runContext),
      signal: details?.signal,
      run: (a, ctx) => execute(a, Object.assign(Object.create(ctx) as AttemptContext, { runContext, details }) as JournaledCallContext<Context>),
    });
    const callId = (details?.toolCall as { callId?: string } | undefined)?.callId;
    if (callId) {
      outcomes.set(callId, answer.summary);
      if (outcomes.size > 1000) outcomes.delete(outcomes.keys().next().value!);
    }
    return answer.kind === "output" ? answer.output : answer.text;
  };
  const extract = async (c: { toolCall?: { callId?: string } } & Record<string, unknown>) => {
    const own = typeof customDataExtractor === "function" ? await (customDataExtractor as (x: unknown) => unknown)(c) : undefined;
    const id = c.toolCall?.callId;
    const summary = id ? outcomes.get(id) : undefined;
    if (id) outcomes.delete(id);
    return summary ? { ...(own as object | undefined), opjournal: summary } : own;
  };
  const approval = async (runContext: RunContext<Context>, input: unknown) => (await approvalStep(journal, policy as ToolPolicy<A, never>,
    { toolName: name, args: (typeof input === "string" ? JSON.parse(input) : input) as A, scope: resolveScope(policy, runContext) })).step === "ask";
  const t = tool({ ...rest, execute: wrapped, needsApproval: approval, customDataExtractor: extract } as unknown as Parameters<typeof tool>[0]) as unknown as FunctionTool<Context>;
  Object.defineProperty(t, BRIDGE, { value: { name, policy, journal }, enumerable: false });
  return t;
}

const BRIDGE = Symbol.for("opjournal.openai-agents.bridge");

interface Bridge {
  name: string;
  policy: ToolPolicy<unknown, unknown>;
  journal: Journal;
}

/** An interruption of a run (result.interruptions): a tool approval item, as far as this module reads it. */
export interface ApprovalItem {
  rawItem: { type?: string; name?: string; callId?: string; arguments?: string } | unknown;
}

function bridgeOf(t: unknown): Bridge {
  const b = (t as Record<symbol, Bridge> | null)?.[BRIDGE];
  if (!b) throw new TypeError("not a tool made by @opjournal/client/openai-agents journaledTool");
  return b;
}

/**
 * The journal's question behind an interruption of tool (the key and the
 * exact request hash a person answers), read with journal (any credential
 * that may read operations). runContext is the run's (result.state's
 * context) when the policy's scope is a function of it. Undefined when the
 * item is another tool's call.
 */
export async function approvalRequestOf<Context>(journal: Journal, t: FunctionTool<Context>, item: ApprovalItem,
  runContext?: RunContext<Context>): Promise<ToolApprovalRequest | undefined> {
  const b = bridgeOf(t);
  const raw = item.rawItem as { name?: string; arguments?: string };
  if (raw?.name !== b.name) return undefined;
  const args = typeof raw.arguments === "string" ? JSON.parse(raw.arguments) as unknown : raw.arguments;
  return pendingApprovalOf(journal, b.policy as ToolPolicy<unknown, never>, { toolName: b.name, args, scope: resolveScope(b.policy, runContext) });
}

/** A run state's approval calls (RunState.approve, RunState.reject). */
export interface ApprovingState {
  approve(item: never, options?: unknown): void;
  reject(item: never, options?: unknown): void;
}

/**
 * A person's answer to an interruption of tool: sent to the journal as
 * Approve or Reject of the call's exact request under approver's credential
 * (that person's Journal, never the agent's), then recorded in state
 * (state.approve or state.reject) so that run(agent, state) resumes. Throws,
 * and changes nothing in state, when the journal refuses (not an approver,
 * a changed request, already decided) or the item is another tool's.
 * Returns the request answered.
 */
export async function answerInterruption<Context>(approver: Journal, t: FunctionTool<Context>, state: ApprovingState & { _context?: unknown },
  item: ApprovalItem, answer: ApprovalAnswer, runContext?: RunContext<Context>): Promise<ToolApprovalRequest> {
  const request = await approvalRequestOf(approver, t, item, runContext ?? (state._context as RunContext<Context> | undefined));
  if (!request) throw new TypeError(`the interruption is not a call of ${bridgeOf(t).name}`);
  await answerApproval(approver, request, answer);
  if (answer.approved) state.approve(item as never);
  else state.reject(item as never);
  return request;
}

/**
 * The journal's outcome of one call of a journaled tool, for the
 * application: give it a tool call output item (result.newItems,
 * "tool_call_output_item"; its customData.opjournal). Undefined for other
 * items.
 */
export function outcomeOf(item: unknown): ToolOutcome | undefined {
  const c = (item as { customData?: { opjournal?: ToolOutcome } } | null)?.customData?.opjournal;
  return typeof c === "object" && c !== null ? c : undefined;
}
