// @opjournal/client/openai-agents: OpenAI Agents SDK (`@openai/agents`)
// function tools whose execute runs through the journal. The SDK is an
// optional peer dependency, loaded only by this module.
//
//     const createPayment = journaledTool(journal, { action: "create_payment", keyFields: ["order_id"], scope: "user-42" }, {
//       name: "create_payment", description: "Charge an order", parameters: z.object({ ... }),
//       execute: async (args, { key, signal }) => { ... Idempotency-Key: key ... return payment; },
//     });
//     const agent = new Agent({ name: "shop", tools: [createPayment], ... });

import { tool, type FunctionTool, type RunContext } from "@openai/agents";

import type { AttemptContext } from "./execute.js";
import type { Journal } from "./journal.js";
import { checkToolPolicy, journalToolCall, resolveScope, type ToolPolicy } from "./tools.js";

export { modelText, toolKey, type ToolAnswer, type ToolPolicy } from "./tools.js";

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
 * The model gets the tool's output, the stored output on a retry, or the
 * gateway's text for an unknown outcome, a call in progress, a conflicting
 * call, a replayed refusal, a call awaiting a person's approval or one a
 * person rejected (model_texts.ts; policy.approvalWaitMs waits for the
 * approval first).
 */
export function journaledTool<A, O, Context = unknown>(
  journal: Journal,
  policy: ToolPolicy<A, RunContext<Context> | undefined>,
  options: JournaledToolOptions<A, O, Context>,
): FunctionTool<Context> {
  checkToolPolicy(policy);
  const { execute, ...rest } = options;
  const name = options.name;
  const wrapped = async (args: unknown, runContext?: RunContext<Context>, details?: ToolCallDetails): Promise<O | string> => {
    const answer = await journalToolCall(journal, policy, {
      toolName: name,
      args: args as A,
      scope: resolveScope(policy, runContext),
      signal: details?.signal,
      run: (a, ctx) => execute(a, Object.assign(Object.create(ctx) as AttemptContext, { runContext, details }) as JournaledCallContext<Context>),
    });
    return answer.kind === "output" ? answer.output : answer.text;
  };
  return tool({ ...rest, execute: wrapped } as unknown as Parameters<typeof tool>[0]) as unknown as FunctionTool<Context>;
}
