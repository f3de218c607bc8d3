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
import { approvalStep, checkToolPolicy, journalToolCall, resolveScope, type ToolOutcome, type ToolPolicy } from "./tools.js";

export {
  answerApproval, isToolApprovalRequest, modelText, toolKey,
  type ApprovalAnswer, type ToolAnswer, type ToolApprovalRequest, type ToolBudget, type ToolOutcome, type ToolPolicy,
} from "./tools.js";

/** What a journaled tool's function gets besides its arguments: execute's AttemptContext and LangChain's config. */
export interface JournaledCallContext extends AttemptContext {
  /** The tool's RunnableConfig (configurable, signal, toolCall, …). */
  config: ToolRunnableConfig | undefined;
}

/** tool()'s fields: name, description, schema (a zod object or JSON schema), and the rest passed on. */
export interface JournaledToolFields {
  name: string;
  /**
   * Raise LangGraph's interrupt for a call awaiting a person's approval
   * (default true, inside a graph with a checkpointer); false: tell the
   * model instead.
   */
  interruptForApproval?: boolean | undefined;
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
 * output, the stored output on a retry (both in one member order), or the
 * gateway's text for an unknown outcome, a call in progress, a conflicting
 * call, a replayed refusal, a call awaiting a person's approval, one a
 * person rejected or one a budget of its action refused (model_texts.ts). Return a string (or JSON-encodable
 * content) from func, as for any LangChain tool; a JSON text's "id" is the
 * effect's external id unless policy.externalId says otherwise.
 *
 * The application gets the outcome as the ToolMessage's artifact (the tool
 * is made with responseFormat "content_and_artifact"; outcomeOf reads it).
 * When the journal holds a call in awaiting_approval and the tool runs in
 * a LangGraph graph, it raises LangGraph's interrupt with the journal's
 * question (a ToolApprovalRequest: key, exact request hash, the call):
 * answer it with answerApproval under the person's credential and resume
 * with new Command({ resume }). On resume, and in any later run, the tool
 * asks the journal again: an approved call is called once, a rejected one
 * replays the rejection and asks nobody. Outside a graph (or with
 * fields.interruptForApproval false) the model is told the call awaits
 * approval instead.
 */
export function journaledTool<A, O>(
  journal: Journal,
  policy: ToolPolicy<A, ToolRunnableConfig | undefined>,
  func: (args: A, ctx: JournaledCallContext) => Promise<O> | O,
  fields: JournaledToolFields,
): DynamicStructuredTool {
  checkToolPolicy(policy);
  const { interruptForApproval, ...toolFields } = fields;
  const name = fields.name;
  const wrapped = async (args: unknown, config?: ToolRunnableConfig): Promise<[O | string, ToolOutcome]> => {
    const scope = resolveScope(policy, config);
    if (interruptForApproval !== false && inGraph(config)) {
      const step = await approvalStep(journal, policy as ToolPolicy<A, never>, { toolName: name, args: args as A, scope, signal: config?.signal });
      if (step.step === "ask") {
        // Throws GraphInterrupt the first time; on resume it returns the
        // resume value, and the journal (below) says what the answer was.
        const { interrupt } = await import("@langchain/langgraph");
        interrupt(step.request);
      }
    }
    const answer = await journalToolCall(journal, policy, {
      toolName: name,
      args: args as A,
      scope,
      signal: config?.signal,
      run: (a, ctx) => func(a, Object.assign(Object.create(ctx) as AttemptContext, { config }) as JournaledCallContext),
    });
    return [answer.kind === "output" ? answer.output : answer.text, answer.summary];
  };
  // tool()'s overloads are typed by the schema's kind; the fields are the caller's.
  return (tool as unknown as (f: typeof wrapped, fl: JournaledToolFields) => DynamicStructuredTool)(wrapped,
    { ...toolFields, responseFormat: "content_and_artifact" });
}

/** True when the tool runs as a node's task in a LangGraph graph (where interrupt works). */
function inGraph(config: ToolRunnableConfig | undefined): boolean {
  const c = config?.configurable as Record<string, unknown> | undefined;
  return c !== undefined && (c["__pregel_scratchpad"] !== undefined || c["checkpoint_ns"] !== undefined) && c["__pregel_checkpointer"] !== undefined;
}

/**
 * The journal's outcome of one call of a journaled tool, for the
 * application: give it the ToolMessage (its artifact), or the artifact.
 * Undefined for anything else.
 */
export function outcomeOf(message: unknown): ToolOutcome | undefined {
  const a = (message as { artifact?: unknown } | null)?.artifact ?? message;
  const o = a as Partial<ToolOutcome> | null;
  return typeof o === "object" && o !== null && typeof o.kind === "string" && typeof o.key === "string" && typeof o.awaitingApproval === "boolean"
    ? (o as ToolOutcome) : undefined;
}
