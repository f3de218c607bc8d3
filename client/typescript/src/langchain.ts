// @opjournal/client/langchain: LangChain.js (`@langchain/core`) tools
// whose function runs through the journal; LangGraph's ToolNode and
// createReactAgent call them like any tool. @langchain/core is an optional
// peer dependency, loaded only by this module.
//
//     const createPayment = journaledTool(journal, { action: "create_payment", keyFields: ["order_id"], scope: "user-42" },
//       async (args, { key, signal }) => { ... Idempotency-Key: key ... return JSON.stringify(payment); },
//       { name: "create_payment", description: "Charge an order", schema: z.object({ ... }) });

import { tool, type DynamicStructuredTool, type ToolRunnableConfig } from "@langchain/core/tools";

import type { AttemptContext } from "./execute.js";
import type { Journal } from "./journal.js";
import { checkToolPolicy, journalToolCall, resolveScope, type ToolPolicy } from "./tools.js";

export { modelText, toolKey, type ToolAnswer, type ToolPolicy } from "./tools.js";

/** What a journaled tool's function gets besides its arguments: execute's AttemptContext and LangChain's config. */
export interface JournaledCallContext extends AttemptContext {
  /** The tool's RunnableConfig (configurable, signal, toolCall, …). */
  config: ToolRunnableConfig | undefined;
}

/** tool()'s fields: name, description, schema (a zod object or JSON schema), and the rest passed on. */
export interface JournaledToolFields {
  name: string;
  description?: string | undefined;
  schema: unknown;
  [other: string]: unknown;
}

/**
 * A LangChain tool (tool(func, fields)) whose function runs through the
 * journal (execute): once per intent, the intent named by the policy's
 * keyFields of the arguments and its scope (a function of scope gets the
 * call's RunnableConfig, e.g. (c) => c?.configurable?.user_id), or by its
 * key function; never by the tool-call id. The model gets the tool's
 * output, the stored output on a retry, or the gateway's text for an
 * unknown outcome, a call in progress, a conflicting call, a replayed
 * refusal, a call awaiting a person's approval or one a person rejected
 * (model_texts.ts; policy.approvalWaitMs waits for the approval first). Return a string (or JSON-encodable content)
 * from func, as for any LangChain tool.
 */
export function journaledTool<A, O>(
  journal: Journal,
  policy: ToolPolicy<A, ToolRunnableConfig | undefined>,
  func: (args: A, ctx: JournaledCallContext) => Promise<O> | O,
  fields: JournaledToolFields,
): DynamicStructuredTool {
  checkToolPolicy(policy);
  const name = fields.name;
  const wrapped = async (args: unknown, config?: ToolRunnableConfig): Promise<O | string> => {
    const answer = await journalToolCall(journal, policy, {
      toolName: name,
      args: args as A,
      scope: resolveScope(policy, config),
      signal: config?.signal,
      run: (a, ctx) => func(a, Object.assign(Object.create(ctx) as AttemptContext, { config }) as JournaledCallContext),
    });
    return answer.kind === "output" ? answer.output : answer.text;
  };
  // tool()'s overloads are typed by the schema's kind; the fields are the caller's.
  return (tool as unknown as (f: typeof wrapped, fl: JournaledToolFields) => DynamicStructuredTool)(wrapped, fields);
}
