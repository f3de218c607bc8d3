// @opjournal/client/ai-sdk: Vercel AI SDK (`ai` 6 and 7) tools whose
// execute runs through the journal. `ai` is an optional peer dependency:
// this module imports only its types, and the tool it makes is the plain
// object the SDK's tool() makes (which returns its argument).
//
//     const createPayment = journaledTool(journal, { action: "create_payment", keyFields: ["order_id"], scope: "user-42" }, {
//       name: "create_payment", description: "Charge an order", inputSchema: z.object({ ... }),
//       execute: async (args, { key, signal }) => { ... Idempotency-Key: key ... return payment; },
//     });
//     await generateText({ model, tools: { create_payment: createPayment },
//       toolApproval: journalToolApproval({ create_payment: createPayment }), ... });

import type { FlexibleSchema, Tool } from "ai";

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

/**
 * The AI SDK's options of a tool call, as `ai` 6 and 7 pass them (7 renamed
 * experimental_context to context).
 */
export interface AiToolCallOptions {
  toolCallId: string;
  messages: unknown[];
  abortSignal?: AbortSignal | undefined;
  /** `ai` 7: the tool's context (generateText's toolsContext). */
  context?: unknown;
  /** `ai` 6: the call's experimental_context. */
  experimental_context?: unknown;
  [other: string]: unknown;
}

/** What a journaled tool's execute gets besides its arguments: execute's AttemptContext and the SDK's options. */
export interface JournaledCallContext extends AttemptContext {
  /** The AI SDK's options of the call (toolCallId, messages, abortSignal, context). */
  options: AiToolCallOptions;
}

/** A tool definition as tool() takes it, with a name and an execute that gets the attempt. */
export interface JournaledToolDefinition<A, O> {
  /** The name the tool has in generateText's tools (the texts the model reads name it). */
  name: string;
  description?: string | undefined;
  inputSchema: FlexibleSchema<A>;
  /**
   * Calls the provider once: pass ctx.key on (Idempotency-Key, or a
   * reference field) and ctx.signal. Throw Rejected for a definite
   * refusal; any other throw is an unknown outcome.
   */
  execute: (args: A, ctx: JournaledCallContext) => Promise<O> | O;
  /** Other members of the SDK's tool definition (providerOptions, …), passed on as they are. */
  [other: string]: unknown;
}

/**
 * What a journaled tool's execute returns: the application's view of the
 * call. The model never sees this object: the tool's toModelOutput gives it
 * `output` (the tool's output, or the stored one on a replay) or `text` (the
 * gateway's words for an outcome without a fresh answer); `opjournal` is
 * for the application (outcomeOf).
 */
export interface JournaledToolOutput<O> {
  opjournal: ToolOutcome;
  output?: O;
  text?: string;
}

const BRIDGE = Symbol.for("opjournal.ai-sdk.bridge");

interface Bridge {
  name: string;
  policy: ToolPolicy<unknown, unknown>;
  journal: Journal;
}

/** A tool journaledTool made. */
export type JournaledTool<A, O> = Tool<A, JournaledToolOutput<O>>;

function contextOf(options: { context?: unknown; toolContext?: unknown; experimental_context?: unknown } | undefined): unknown {
  return options?.context ?? options?.toolContext ?? options?.experimental_context;
}

function isOutput(v: unknown): v is JournaledToolOutput<unknown> {
  return typeof v === "object" && v !== null && typeof (v as { opjournal?: unknown }).opjournal === "object";
}

/**
 * An AI SDK tool whose execute runs through the journal (execute): once
 * per intent, the intent named by the policy's keyFields of the arguments
 * and its scope (a function of scope gets the call's context: `ai` 7's
 * toolsContext entry, `ai` 6's experimental_context), or by its key
 * function; never by the tool-call id. The model gets the tool's output,
 * the stored output on a retry (both in one member order), or the gateway's
 * text for an unknown outcome, a call in progress, a conflicting call, a
 * replayed refusal, a call awaiting a person's approval, one a person
 * rejected or one a budget of its action refused (model_texts.ts). The application gets the outcome
 * (outcomeOf). When the action's policy asks for a person's approval, the
 * SDK's own approval flow asks for it: pass journalToolApproval(tools) as
 * generateText's toolApproval (`ai` 7); with `ai` 6 the tool's
 * needsApproval does the same.
 */
export function journaledTool<A, O>(journal: Journal, policy: ToolPolicy<A, unknown>, definition: JournaledToolDefinition<A, O>): JournaledTool<A, O> {
  checkToolPolicy(policy);
  const { name, execute, toModelOutput, needsApproval, ...rest } = definition;
  if (typeof name !== "string" || name === "") throw new TypeError("journaledTool: the definition needs the tool's name");
  if (needsApproval !== undefined) throw new TypeError("journaledTool: needsApproval is the journal's (its policy's approval: block); do not give one");
  const userToModel = toModelOutput as ((o: unknown) => unknown) | undefined;
  const t = {
    ...rest,
    execute: async (args: A, options: AiToolCallOptions): Promise<JournaledToolOutput<O>> => {
      const answer = await journalToolCall(journal, policy, {
        toolName: name,
        args,
        scope: resolveScope(policy, contextOf(options)),
        signal: options.abortSignal,
        run: (a, ctx) => execute(a, Object.assign(Object.create(ctx) as AttemptContext, { options }) as JournaledCallContext),
      });
      return answer.kind === "output" ? { opjournal: answer.summary, output: answer.output } : { opjournal: answer.summary, text: answer.text };
    },
    // `ai` 6 and 7 pass { toolCallId, input, output }; `ai` 5 passed the output.
    toModelOutput: (arg: unknown) => {
      const out = isOutput(arg) ? arg : (arg as { output?: unknown } | undefined)?.output;
      if (!isOutput(out)) return { type: "json", value: (out ?? null) as never };
      if (out.text !== undefined) return { type: "text", value: out.text };
      if (userToModel) return userToModel(isOutput(arg) ? out.output : { ...(arg as object), output: out.output });
      return typeof out.output === "string" ? { type: "text", value: out.output } : { type: "json", value: (out.output ?? null) as never };
    },
    // `ai` 6's tool-level approval (deprecated in 7, where toolApproval takes precedence).
    // An approved call that has not run still "needs" approval: `ai` checks
    // again before it runs an approved call, and would refuse it otherwise.
    needsApproval: async (input: A, options: AiToolCallOptions) => {
      const step = await approvalStep(journal, policy as ToolPolicy<A, never>, { toolName: name, args: input, scope: resolveScope(policy, contextOf(options)) });
      return step.step === "ask" || step.approved;
    },
  };
  Object.defineProperty(t, BRIDGE, { value: { name, policy: policy as ToolPolicy<unknown, unknown>, journal } satisfies Bridge, enumerable: false });
  return t as unknown as JournaledTool<A, O>;
}

function bridgeOf(tool: unknown): Bridge {
  const b = (tool as Record<symbol, Bridge> | null)?.[BRIDGE];
  if (!b) throw new TypeError("not a tool made by @opjournal/client/ai-sdk journaledTool");
  return b;
}

/**
 * The journal's approval step for generateText's toolApproval (`ai` 7):
 * one entry per journaled tool of tools. A call the journal holds in
 * awaiting_approval is "user-approval" (the SDK stops with a
 * tool-approval-request for it); every other call runs, and its execute
 * acts on the journal's decision: a call a person rejected replays the
 * rejection (nothing is called, nobody is asked again), an approved one
 * is called once.
 */
export function journalToolApproval(tools: Record<string, unknown>): Record<string, (input: unknown, options: { toolContext?: unknown; runtimeContext?: unknown }) => Promise<{ type: "user-approval"; reason: string } | { type: "not-applicable" }>> {
  const out: Record<string, (input: unknown, options: { toolContext?: unknown }) => Promise<{ type: "user-approval"; reason: string } | { type: "not-applicable" }>> = {};
  for (const [toolName, tool] of Object.entries(tools)) {
    const b = (tool as Record<symbol, Bridge> | null)?.[BRIDGE];
    if (!b) continue;
    out[toolName] = async (input, options) => {
      const step = await approvalStep(b.journal, b.policy as ToolPolicy<unknown, never>, { toolName: b.name, args: input, scope: resolveScope(b.policy, contextOf(options)) });
      if (step.step === "run") return step.approved ? { type: "user-approval", reason: "opjournal: approved, not run yet" } : { type: "not-applicable" };
      return { type: "user-approval", reason: `opjournal: ${step.request.action} ${step.request.key} awaits a person's approval (${step.request.rule})` };
    };
  }
  return out;
}

/** The tool-approval-request part of generateText's content, as far as this module reads it. */
export interface ApprovalRequestPart {
  type: "tool-approval-request";
  approvalId: string;
  toolCall: { toolName: string; toolCallId: string; input: unknown };
}

/**
 * The journal's question behind a tool-approval-request part of tool (the
 * key and exact request hash a person answers), read with journal (any
 * credential that may read operations). context is the call's context
 * when the policy's scope is a function of it.
 */
export async function approvalRequestOf(journal: Journal, tool: unknown, part: ApprovalRequestPart, context?: unknown): Promise<ToolApprovalRequest> {
  const b = bridgeOf(tool);
  return pendingApprovalOf(journal, b.policy as ToolPolicy<unknown, never>, { toolName: b.name, args: part.toolCall.input, scope: resolveScope(b.policy, context) });
}

/**
 * A person's answer to a tool-approval-request part: sent to the journal
 * as Approve or Reject of the call's exact request under approver's
 * credential (that person's Journal, never the agent's), then returned as
 * the tool-approval-response part to append (in a tool message) before
 * generateText runs again. Throws, and answers nothing, when the journal
 * refuses (not an approver, a changed request, already decided).
 */
export async function answerToolApproval(approver: Journal, tool: unknown, part: ApprovalRequestPart, answer: ApprovalAnswer, context?: unknown):
  Promise<{ type: "tool-approval-response"; approvalId: string; approved: boolean; reason: string }> {
  const request = await approvalRequestOf(approver, tool, part, context);
  await answerApproval(approver, request, answer);
  return { type: "tool-approval-response", approvalId: part.approvalId, approved: answer.approved, reason: answer.reason };
}

/**
 * The journal's outcome of one call of a journaled tool, for the
 * application: give it a tool result (generateText's toolResults, a
 * tool-result content part, a UI message's tool part with its output), the
 * event of onToolExecutionEnd (where a call run after a person's approval
 * shows) or the tool's output itself. Undefined for anything else.
 */
export function outcomeOf(result: unknown): ToolOutcome | undefined {
  if (isOutput(result)) return result.opjournal;
  const r = result as { output?: unknown; toolOutput?: { output?: unknown } } | null;
  const o = r?.output ?? r?.toolOutput?.output;
  return isOutput(o) ? o.opjournal : undefined;
}
