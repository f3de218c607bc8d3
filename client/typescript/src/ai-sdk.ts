// @opjournal/client/ai-sdk: Vercel AI SDK (`ai`) tools whose execute runs
// through the journal. `ai` is an optional peer dependency: this module
// imports only its types, and the tool it makes is the plain object the
// SDK's tool() makes (which returns its argument).
//
//     const createPayment = journaledTool(journal, { action: "create_payment", keyFields: ["order_id"], scope: "user-42" }, {
//       name: "create_payment", description: "Charge an order", inputSchema: z.object({ ... }),
//       execute: async (args, { key, signal }) => { ... Idempotency-Key: key ... return payment; },
//     });
//     await generateText({ model, tools: { create_payment: createPayment }, ... });

import type { FlexibleSchema, Tool, ToolExecutionOptions } from "ai";

import type { AttemptContext } from "./execute.js";
import type { Journal } from "./journal.js";
import { checkToolPolicy, journalToolCall, resolveScope, type ToolPolicy } from "./tools.js";

export { modelText, toolKey, type ToolAnswer, type ToolPolicy } from "./tools.js";

/** What a journaled tool's execute gets besides its arguments: execute's AttemptContext and the SDK's options. */
export interface JournaledCallContext extends AttemptContext {
  /** The AI SDK's options of the call (toolCallId, messages, abortSignal, experimental_context). */
  options: ToolExecutionOptions;
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
  /** Other members of the SDK's tool definition (providerOptions, toModelOutput, …), passed on as they are. */
  [other: string]: unknown;
}

/**
 * An AI SDK tool whose execute runs through the journal (execute): once
 * per intent, the intent named by the policy's keyFields of the arguments
 * and its scope (a function of scope gets the call's experimental_context),
 * or by its key function; never by the tool-call id. The model gets the
 * tool's output, the stored output on a retry, or the gateway's text for
 * an unknown outcome, a call in progress, a conflicting call, a replayed
 * refusal, a call awaiting a person's approval or one a person rejected
 * (model_texts.ts; policy.approvalWaitMs waits for the approval first).
 */
export function journaledTool<A, O>(journal: Journal, policy: ToolPolicy<A, unknown>, definition: JournaledToolDefinition<A, O>): Tool<A, O | string> {
  checkToolPolicy(policy);
  const { name, execute, ...rest } = definition;
  if (typeof name !== "string" || name === "") throw new TypeError("journaledTool: the definition needs the tool's name");
  const t = {
    ...rest,
    execute: async (args: A, options: ToolExecutionOptions): Promise<O | string> => {
      const answer = await journalToolCall(journal, policy, {
        toolName: name,
        args,
        scope: resolveScope(policy, options.experimental_context),
        signal: options.abortSignal,
        run: (a, ctx) => execute(a, Object.assign(Object.create(ctx) as AttemptContext, { options }) as JournaledCallContext),
      });
      return answer.kind === "output" ? answer.output : answer.text;
    },
  };
  return t as unknown as Tool<A, O | string>;
}
