// The framework-neutral core of the agent framework adapters
// (@opjournal/client/ai-sdk, /openai-agents, /langchain): a tool call runs
// through execute under a key made from the call's identifying arguments
// and the caller's scope, and every outcome without a fresh answer is told
// to the model in the words of the gateway's MCP door (model_texts.ts,
// generated from the repository's protocol/testdata/model_texts.json).

import { createHash } from "node:crypto";

import { canonicalJson } from "./canonical.js";
import { NotRecordedError, OpjournalError, Rejected } from "./errors.js";
import { execute, type AttemptContext, type BudgetExceeded, type Op, type Outcome } from "./execute.js";
import type { Journal, Operation } from "./journal.js";
import { MAX_KEY_LEN, MAX_REF_NAME_LEN, MAX_REF_VALUE_LEN, MAX_REFS } from "./limits.js";
import { IN_PROGRESS_MAX_SECONDS, MODEL_TEXTS } from "./model_texts.js";

/** The door name of the keys of journaled agent tools: tool:ACTION:SCOPE:f:HASH. */
export const TOOL_KEY_DOOR = "tool";

/** The longest scope toolKey takes. */
export const MAX_SCOPE_LEN = 64;

/**
 * How a journaled tool's calls become operations: the policy's action,
 * and what identifies a call. Give keyFields and scope (the usual way), or
 * key. The key never comes from the tool-call id or the model's wording,
 * which change when a model retries: only from the arguments that name
 * the intent.
 */
export interface ToolPolicy<A, C = unknown> {
  /** An action of the journal's policy ("create_payment"). */
  action: string;
  /**
   * The arguments that identify one intent (["order_id"]): the same values
   * are the same operation, whatever the other arguments, their order or
   * their spelling (817 and 817.0 are one number). A call without one of
   * them is refused with the missing_argument text.
   */
  keyFields?: readonly string[] | undefined;
  /**
   * Whose intents these are: a user, a tenant, a conversation ("user-42").
   * Two scopes' order "817" are two payments. 1–64 visible ASCII
   * characters without ":"; never a credential. A function gets the
   * framework's per-call context (the AI SDK's experimental_context, the
   * Agents SDK's RunContext, LangChain's RunnableConfig).
   */
  scope?: string | ((context: C) => string) | undefined;
  /**
   * Instead of keyFields and scope: the operation key of a call, made from
   * its arguments by your code (a key your orchestrator stored with the
   * intent, say). It gets the arguments only, so it cannot use the call id.
   */
  key?: ((args: A) => string) | undefined;
  /**
   * The names the texts give as the identifying arguments when key is used
   * (default: the call's argument names, sorted).
   */
  identifyingArguments?: readonly string[] | undefined;
  /** The payload the journal hashes and stores (default: the arguments). */
  payload?: ((args: A) => unknown) | undefined;
  /**
   * The provider's id of the effect, from the tool's output (default: the
   * output's string member "id", if any, also of an output that is a JSON
   * text, as LangChain tools return). The reconciler and operators see it.
   */
  externalId?: ((output: unknown) => string | undefined) | undefined;
  /**
   * The business references of a call (default: the key fields whose values
   * are strings or numbers and whose names are valid ref names).
   */
  refs?: ((args: A) => Record<string, string>) | undefined;
  /** Heartbeats while the tool runs (default true). */
  heartbeat?: boolean | undefined;
  /**
   * How long a call waits, in milliseconds, for a person's approval when
   * the action's policy asks for one (default 0: the model is told at
   * once that the call awaits approval; see execute's approvalWaitMs).
   */
  approvalWaitMs?: number | undefined;
}

/**
 * What a journaled tool call answers: the tool's output (fresh, or the
 * stored one replayed), or a text for the model.
 */
export type ToolAnswer<O> =
  | { kind: "output"; output: O; replayed: boolean; key: string; outcome: Outcome | undefined; summary: ToolOutcome }
  | { kind: "text"; text: string; key: string | undefined; outcome: Outcome | undefined; summary: ToolOutcome };

/**
 * What happened to one journaled tool call, for the application rather than
 * the model (a UI shows "payment pending" from it without reading the
 * model's text). Plain JSON, so it survives the framework's serialisation
 * of tool results (UI message streams, saved run states, checkpoints).
 * Each adapter puts it in its framework's place for tool metadata and
 * exports outcomeOf to read it back.
 */
export interface ToolOutcome {
  /**
   * execute's outcome kind, or "not_sent" when the call never reached the
   * journal's decision (a missing identifying argument, arguments the
   * journal refused, a journal that could not be reached).
   */
  kind: Outcome["kind"] | "not_sent";
  /** The operation key ("" when none was made: a missing identifying argument). */
  key: string;
  /** The provider's id of the effect ("" when none is known). */
  externalId: string;
  /** True when nothing was called now: the journal's stored answer (or refusal) was given again. */
  replayed: boolean;
  /** True while a person's approval is awaited (kind "awaiting_approval"). */
  awaitingApproval: boolean;
  /** The request hash a person approves (with awaitingApproval; "" otherwise). */
  requestHash: string;
  /** The recorded error code (failed_final, verification_required; "" otherwise). */
  errorCode: string;
  /** The budget that refused the call (kind "budget_exceeded" only). */
  budget?: ToolBudget;
}

/** The budget that refused a journaled tool call, as ToolOutcome carries it. */
export interface ToolBudget {
  /** The budget's name in the action's policy ("daily-payments"). */
  name: string;
  limit: number;
  used: number;
  windowSeconds: number;
  /** When the same call may fit, in milliseconds; 0: it never fits (its amount alone is over the limit). */
  retryAfterMs: number;
}

/** The ToolOutcome of an execute outcome (or of a call that was not sent). */
export function summarize(key: string | undefined, out: Outcome | undefined, fresh = false): ToolOutcome {
  const s: ToolOutcome = { kind: out?.kind ?? "not_sent", key: key ?? "", externalId: "", replayed: false, awaitingApproval: false, requestHash: "", errorCode: "" };
  if (!out) {
    if (fresh) s.kind = "succeeded"; // recorded nowhere (NotRecordedError) but the tool answered
    return s;
  }
  switch (out.kind) {
    case "succeeded": s.externalId = out.externalId; s.replayed = out.replayed; break;
    case "failed_final": s.errorCode = out.errorCode; s.replayed = out.replayed; break;
    case "verification_required": s.errorCode = out.errorCode; break;
    case "awaiting_approval": s.awaitingApproval = true; s.requestHash = out.operation.requestHash; break;
    case "budget_exceeded":
      s.budget = { name: out.budget, limit: out.limit, used: out.used, windowSeconds: out.windowSeconds, retryAfterMs: out.retryAfterMs };
      break;
    default: break;
  }
  return s;
}

/**
 * A JSON value in one member order: RFC 8785's (members sorted by UTF-16
 * code units). A fresh output and every replay of it (the journal's stored
 * copy, in whatever order the journal's encoding gives) are returned in
 * this form, so the first answer and the replays are identical, member
 * order included. Values JSON cannot hold are returned as they are.
 */
export function canonicalForm<T>(v: T): T {
  if (typeof v !== "object" || v === null) return v;
  try {
    return JSON.parse(canonicalJson(JSON.parse(JSON.stringify(v)))) as T;
  } catch {
    return v;
  }
}

/**
 * The operation key of a call, as the gateway's MCP door makes its mcp:
 * keys (gateway/key.go fieldsKey), under the door "tool":
 * tool:ACTION:SCOPE:f:HASH, HASH the first 32 hex digits of SHA-256 over
 * the canonical JSON (RFC 8785, canonical.ts) of the key fields and their
 * values. Returns { missing } naming the first key field that is absent or
 * null, or whose value cannot be canonicalised (then the first field, as
 * the gateway says). Throws an OpjournalError INVALID_ARGUMENT for a bad
 * scope or action. Vectors: protocol/testdata/tool_keys.json.
 */
export function toolKey(action: string, scope: string, keyFields: readonly string[], args: unknown):
  { key: string; missing?: undefined } | { key?: undefined; missing: string } {
  checkScope(scope);
  if (!/^[\x21-\x7e]+$/.test(action) || action.includes(":")) {
    throw new OpjournalError("INVALID_ARGUMENT", "must be visible ASCII characters without \":\"", { field: "action" });
  }
  if (keyFields.length === 0) throw new OpjournalError("INVALID_ARGUMENT", "names no key field", { field: "key_fields" });
  const obj = (typeof args === "object" && args !== null && !Array.isArray(args) ? args : {}) as Record<string, unknown>;
  const picked: Record<string, unknown> = {};
  for (const f of keyFields) {
    const v = Object.hasOwn(obj, f) ? obj[f] : undefined;
    if (v === undefined || v === null) return { missing: f };
    picked[f] = v;
  }
  let text: string;
  try {
    text = canonicalJson(picked);
  } catch {
    return { missing: keyFields[0]! };
  }
  const hash = createHash("sha256").update(text, "utf8").digest("hex").slice(0, 32);
  const key = `${TOOL_KEY_DOOR}:${action}:${scope}:f:${hash}`;
  if (key.length > MAX_KEY_LEN) {
    throw new OpjournalError("INVALID_ARGUMENT", `makes a key longer than ${MAX_KEY_LEN} characters; shorten the action or the scope`, { field: "scope" });
  }
  return { key };
}

function checkScope(scope: unknown): asserts scope is string {
  if (typeof scope !== "string" || scope.length === 0 || scope.length > MAX_SCOPE_LEN || !/^[\x21-\x7e]+$/.test(scope) || scope.includes(":")) {
    throw new OpjournalError("INVALID_ARGUMENT",
      `must be 1-${MAX_SCOPE_LEN} visible ASCII characters without ":" (whose intents: a user, a tenant; never a credential)`, { field: "scope" });
  }
}

/**
 * Checks a policy when a tool is defined, so that a mistake shows at
 * startup rather than at the model's first call.
 */
export function checkToolPolicy<A, C>(p: ToolPolicy<A, C>): void {
  if (typeof p.action !== "string" || p.action === "") throw new OpjournalError("INVALID_ARGUMENT", "is required", { field: "action" });
  if (p.key !== undefined) {
    if (p.keyFields !== undefined || p.scope !== undefined) {
      throw new OpjournalError("INVALID_ARGUMENT", "give either key, or keyFields and scope, not both", { field: "key" });
    }
    return;
  }
  if (!p.keyFields || p.keyFields.length === 0) {
    throw new OpjournalError("INVALID_ARGUMENT", "name the arguments that identify a call (keyFields), or give a key function", { field: "key_fields" });
  }
  if (p.scope === undefined) throw new OpjournalError("INVALID_ARGUMENT", "is required with keyFields (whose intents: a user, a tenant)", { field: "scope" });
  if (typeof p.scope === "string") checkScope(p.scope);
}

/** Fills a template of model_texts.ts. */
export function modelText(name: keyof typeof MODEL_TEXTS, vars: Record<string, string>): string {
  return MODEL_TEXTS[name].replace(/\{([a-z_]+)\}/g, (m, k: string) => vars[k] ?? m);
}

/**
 * A budget's window in the words of the journal's refusal (protocol's
 * window) and of the gateway's MCP door (gateway/budget.go windowWords):
 * whole days beyond two days ("7d"), else whole hours ("24h", "48h"), else
 * whole minutes ("30m"), else as Go prints a duration ("1m30s", "45s");
 * "window" when the journal named none.
 */
export function windowWords(seconds: number): string {
  const s = Math.trunc(seconds);
  if (!(s > 0)) return "window";
  const day = 86400;
  if (s % day === 0 && s > 2 * day) return `${s / day}d`;
  if (s % 3600 === 0) return `${s / 3600}h`;
  if (s % 60 === 0) return `${s / 60}m`;
  // Go's Duration.String of whole seconds: "1h0m1s", "1m1s", "45s".
  const h = Math.trunc(s / 3600);
  const m = Math.trunc((s % 3600) / 60);
  const sec = s % 60;
  if (h > 0) return `${h}h${m}m${sec}s`;
  if (m > 0) return `${m}m${sec}s`;
  return `${sec}s`;
}

/**
 * The budget_exceeded text of a refused call of tool, as the gateway's MCP
 * door words it: {retry} in whole seconds rounded up, or "" when the call
 * never fits.
 */
export function budgetText(tool: string, out: BudgetExceeded): string {
  const retry = out.retryAfterMs > 0 ? ` It may fit again in about ${Math.ceil(out.retryAfterMs / 1000)} seconds.` : "";
  return modelText("budget_exceeded", {
    tool, budget: out.budget, used: String(out.used), limit: String(out.limit), window: windowWords(out.windowSeconds), retry,
  });
}

/**
 * A string quoted as Go's %q quotes it (strconv.Quote), for the texts that
 * quote a value: the same text as the gateway's.
 */
export function goQuote(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    switch (ch) {
      case '"': out += '\\"'; continue;
      case "\\": out += "\\\\"; continue;
      case "\x07": out += "\\a"; continue;
      case "\b": out += "\\b"; continue;
      case "\f": out += "\\f"; continue;
      case "\n": out += "\\n"; continue;
      case "\r": out += "\\r"; continue;
      case "\t": out += "\\t"; continue;
      case "\v": out += "\\v"; continue;
    }
    if (c < 0x20 || c === 0x7f) out += "\\x" + c.toString(16).padStart(2, "0");
    else if (ch === " " || /[\p{L}\p{M}\p{N}\p{P}\p{S}]/u.test(ch)) out += ch;
    else if (c >= 0xd800 && c <= 0xdfff) out += "\\ufffd"; // a lone surrogate: Go sees invalid UTF-8
    else if (c <= 0xffff) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += "\\U" + c.toString(16).padStart(8, "0");
  }
  return out + '"';
}

/** The default refs: the key fields whose names and values make valid refs (the gateway's refsOf). */
function defaultRefs(keyFields: readonly string[], args: Record<string, unknown>): Record<string, string> | undefined {
  const refs: Record<string, string> = {};
  for (const f of keyFields) {
    const v = args[f];
    let s: string;
    if (typeof v === "string") s = v;
    else if (typeof v === "number" && Number.isFinite(v) && Math.abs(v) <= Number.MAX_SAFE_INTEGER) s = canonicalJson(v);
    else continue;
    if (f.length <= MAX_REF_NAME_LEN && /^[a-z0-9][a-z0-9_.-]*$/.test(f)) refs[f] = s;
  }
  const entries = Object.entries(refs);
  const valid = entries.length > 0 && entries.length <= MAX_REFS && entries.every(([, v]) =>
    v !== "" && Buffer.byteLength(v, "utf8") <= MAX_REF_VALUE_LEN && !/[\x00-\x1f\x7f-\x9f\p{Cs}]/u.test(v));
  return valid ? refs : undefined;
}

/** What a journaled call needs besides its arguments. */
export interface ToolCall<A, O> {
  /** The tool's name, as the model knows it (in the texts). */
  toolName: string;
  /** The arguments, as the framework validated them. */
  args: A;
  /** The scope, resolved from the policy for this call (undefined with a key function). */
  scope: string | undefined;
  /** The tool's own work: call the provider once, passing ctx.key on. */
  run: (args: A, ctx: AttemptContext) => Promise<O> | O;
  /** The framework's abort signal for the call. */
  signal?: AbortSignal | undefined;
}

/**
 * Runs one tool call through execute and says what the model gets: the
 * tool's output when it ran now, the stored output on a replay, and
 * otherwise the gateway's text for the outcome (model_texts.ts): unknown,
 * in progress, conflict, a replayed refusal, a call awaiting a person's
 * approval (awaiting_approval), a call a person rejected or nobody
 * approved in time (approval_rejected), a call a budget of its action
 * refuses (budget_exceeded), a success recorded without the output,
 * refused arguments, an unreachable journal, a missing
 * identifying argument. A fresh definite refusal (the tool threw
 * Rejected) is thrown again, so the framework shows the tool's own error,
 * as the gateway passes the tool's own error result on. Errors that are
 * the program's, not the model's (an unknown action, a bad token, a bad
 * scope), are thrown as OpjournalError.
 */
export async function journalToolCall<A, O>(journal: Journal, policy: ToolPolicy<A, never>, call: ToolCall<A, O>): Promise<ToolAnswer<O>> {
  const tool = call.toolName;
  const made = operationOf(policy, call);
  const ids = made.ids;
  if (made.missing !== undefined) {
    return { kind: "text", text: modelText("missing_argument", { tool, argument_quoted: goQuote(made.missing), ids }), key: undefined, outcome: undefined, summary: summarize(undefined, undefined) };
  }
  const { op } = made;
  const key = op.key;

  let fresh: { output: O } | undefined;
  let out: Outcome;
  try {
    out = await execute(journal, op, async (ctx) => {
      const output = await call.run(call.args, ctx);
      fresh = { output };
      const externalId = (policy.externalId ?? defaultExternalId)(output) ?? "";
      return { externalId, result: { tool_result: output } };
    }, { signal: call.signal, heartbeat: policy.heartbeat, approvalWaitMs: policy.approvalWaitMs });
  } catch (e) {
    if (e instanceof NotRecordedError) {
      // The effect may be confirmed but not recorded: the model gets the
      // tool's answer if there was one, else "unknown".
      if (fresh) return { kind: "output", output: canonicalForm(fresh.output), replayed: false, key, outcome: undefined, summary: summarize(key, undefined, true) };
      return { kind: "text", text: modelText("unknown", { tool, ids }), key, outcome: undefined, summary: { ...summarize(key, undefined), kind: "verification_required" } };
    }
    if (e instanceof OpjournalError) {
      switch (e.code) {
        case "INVALID_ARGUMENT":
        case "TOO_LARGE":
          return { kind: "text", text: modelText("refused_arguments", { tool, detail: `${e.field}: ${e.detail}`.trim() }), key, outcome: undefined, summary: summarize(key, undefined) };
        case "UNAVAILABLE":
        case "RATE_LIMITED":
          return { kind: "text", text: modelText("journal_unavailable", { tool }), key, outcome: undefined, summary: summarize(key, undefined) };
      }
    }
    throw e;
  }
  switch (out.kind) {
    case "succeeded":
      if (!out.replayed && fresh) return { kind: "output", output: canonicalForm(fresh.output), replayed: false, key, outcome: out, summary: summarize(key, out) };
      if (out.result && Object.hasOwn(out.result, "tool_result")) {
        return { kind: "output", output: canonicalForm(out.result["tool_result"] as O), replayed: true, key, outcome: out, summary: summarize(key, out) };
      }
      return { kind: "text", text: modelText("replayed_succeeded", { tool, external_id_quoted: goQuote(out.externalId) }), key, outcome: out, summary: summarize(key, out) };
    case "failed_final":
      if (APPROVAL_REFUSALS.has(out.errorCode)) {
        // A person's no (or nobody's yes in time), not the tool's refusal.
        return { kind: "text", text: modelText("approval_rejected", { tool, ids, error_code: out.errorCode }), key, outcome: out, summary: summarize(key, out) };
      }
      if (!out.replayed && out.cause !== undefined && Rejected.is(out.cause)) throw out.cause;
      return { kind: "text", text: modelText("replayed_refused", { tool, error_code: out.errorCode }), key, outcome: out, summary: summarize(key, out) };
    case "in_progress_elsewhere": {
      const seconds = Math.trunc(Math.min(Math.max(out.retryAfterMs, 1000), IN_PROGRESS_MAX_SECONDS * 1000) / 1000);
      return { kind: "text", text: modelText("in_progress", { tool, ids, seconds: String(seconds) }), key, outcome: out, summary: summarize(key, out) };
    }
    case "verification_required":
      return { kind: "text", text: modelText("unknown", { tool, ids }), key, outcome: out, summary: summarize(key, out) };
    case "conflict":
      return { kind: "text", text: modelText("conflict", { tool, ids }), key, outcome: out, summary: summarize(key, out) };
    case "awaiting_approval":
      return { kind: "text", text: modelText("awaiting_approval", { tool, ids }), key, outcome: out, summary: summarize(key, out) };
    case "budget_exceeded":
      return { kind: "text", text: budgetText(tool, out), key, outcome: out, summary: summarize(key, out) };
  }
}

/**
 * The operation a tool call makes (key, action, payload, refs), or the
 * first missing identifying argument; ids names the identifying arguments
 * for the texts.
 */
export function operationOf<A>(policy: ToolPolicy<A, never>, call: { args: A; scope: string | undefined }):
  { op: Op; ids: string; missing?: undefined } | { op?: undefined; ids: string; missing: string } {
  const argsObj = (typeof call.args === "object" && call.args !== null ? call.args : {}) as Record<string, unknown>;
  const fields = policy.keyFields ?? [];
  const ids = (policy.key ? (policy.identifyingArguments ?? Object.keys(argsObj).sort()) : fields).join(", ");
  let key: string;
  if (policy.key) {
    key = policy.key(call.args);
  } else {
    if (call.scope === undefined) throw new OpjournalError("INVALID_ARGUMENT", "is required with keyFields", { field: "scope" });
    const k = toolKey(policy.action, call.scope, fields, argsObj);
    if (k.missing !== undefined) return { ids, missing: k.missing };
    key = k.key;
  }
  const op: Op = { key, action: policy.action, payload: policy.payload ? policy.payload(call.args) : call.args };
  const refs = policy.refs ? policy.refs(call.args) : policy.key ? undefined : defaultRefs(fields, argsObj);
  if (refs) op.refs = refs;
  return { op, ids };
}

/**
 * The question a person answers for one journaled tool call the journal
 * holds in awaiting_approval: which operation (key), exactly which request
 * (requestHash: an answer to it cannot approve another request under the
 * same key), what the call was (tool, args) and what the journal's policy
 * says about it. Plain JSON: it travels in the framework's approval request
 * (a LangGraph interrupt's value, the application's UI) and through a
 * restart.
 */
export interface ToolApprovalRequest {
  /** Marks the object as this client's (an interrupt's value may be anything). */
  type: "opjournal.approval";
  key: string;
  requestHash: string;
  action: string;
  tool: string;
  args: unknown;
  /** The roles that may decide ("operator", "admin"). */
  approvers: string[];
  /** Why the policy asked: its `when` expression, or "required". */
  rule: string;
  /** The principal who registered the call ("" without authentication). */
  requestedBy: string;
  /** When the question times out (RFC 3339), or null. */
  deadline: string | null;
  /** A person approved it already and it has not run yet (the AI SDK asks again for such a call). */
  approved: boolean;
}

/** The ToolApprovalRequest of an operation awaiting approval. */
export function approvalRequestOf(op: Operation, tool: string, args: unknown): ToolApprovalRequest {
  return {
    type: "opjournal.approval", key: op.operationKey, requestHash: op.requestHash, action: op.actionType, tool, args,
    approvers: [...(op.approval?.approvers ?? [])], rule: op.approval?.rule ?? "", requestedBy: op.approval?.requestedBy ?? "",
    deadline: op.approval?.deadline ? op.approval.deadline.toISOString() : null,
    approved: approvedNotRun(op),
  };
}

/** True for a ToolApprovalRequest (an interrupt's value, say). */
export function isToolApprovalRequest(v: unknown): v is ToolApprovalRequest {
  const r = v as Partial<ToolApprovalRequest> | null;
  return typeof r === "object" && r !== null && r.type === "opjournal.approval" && typeof r.key === "string" && typeof r.requestHash === "string";
}

/**
 * What the framework's approval step does with a call, asked of the journal
 * before the tool runs: "ask" a person (the journal holds the call in
 * awaiting_approval: the request carries its key and request hash), or
 * "run" it (the tool's execute then acts on the journal's decision: it
 * calls the provider once, replays a stored answer or a refusal, a
 * rejection included, or tells the model why not). The journal is asked
 * every time, so a resumed, replayed or restarted run never asks again
 * about a call a person already decided: a rejected call is not asked
 * about (it "runs", and its execute replays the rejection without calling
 * anything), an approved one runs once.
 */
export type ApprovalStep =
  | { step: "ask"; request: ToolApprovalRequest }
  /**
   * rejected: the error code of a person's refusal (the call's execute
   * replays it); approved: a person approved the call and it has not run
   * yet (frameworks that check the approval again before they run an
   * approved call, the AI SDK, must still see it as needing one).
   */
  | { step: "run"; rejected: string | undefined; approved: boolean };

/**
 * Registers the call (without claiming it: nothing is called) and says
 * whether a person must be asked first (ApprovalStep). Registering is what
 * execute does first anyway, with the same key and payload, so the call's
 * execute finds the same operation. Errors the journal gives (a conflict, a
 * refused argument, an unreachable journal) are left to execute, which
 * tells the model: the step is "run".
 */
export async function approvalStep<A>(journal: Journal, policy: ToolPolicy<A, never>,
  call: { toolName: string; args: A; scope: string | undefined; signal?: AbortSignal | undefined }): Promise<ApprovalStep> {
  const made = operationOf(policy, call);
  if (made.missing !== undefined) return { step: "run", rejected: undefined, approved: false };
  let op: Operation;
  try {
    const r = await journal.register({ key: made.op.key, action: made.op.action, payload: made.op.payload, refs: made.op.refs },
      call.signal ? { signal: call.signal } : undefined);
    op = r.operation;
  } catch (e) {
    if (e instanceof OpjournalError && e.code !== "UNKNOWN_ACTION" && e.code !== "UNAUTHENTICATED" && e.code !== "PERMISSION_DENIED") {
      return { step: "run", rejected: undefined, approved: false };
    }
    throw e;
  }
  if (op.status === "awaiting_approval") return { step: "ask", request: approvalRequestOf(op, call.toolName, call.args) };
  return {
    step: "run",
    rejected: op.status === "failed_final" && APPROVAL_REFUSALS.has(op.errorCode) ? op.errorCode : undefined,
    approved: approvedNotRun(op),
  };
}

/** A person approved the operation and no attempt has been made yet. */
export function approvedNotRun(op: Operation): boolean {
  return op.approval?.required === true && op.status === "pending" && op.attemptCount === 0 && op.approval.approvals.length > 0;
}

/**
 * The pending question for a call the framework asked a person about, read
 * from the journal: for frameworks whose approval request carries only the
 * call (the Agents SDK's interruption, the AI SDK's tool-approval-request).
 * The key is made from the call's arguments as the tool makes it; the
 * operation must await approval and hold exactly this call's payload (else
 * PAYLOAD_MISMATCH: an answer to one request never approves another). Any
 * credential that may read operations will do.
 */
export async function pendingApprovalOf<A>(journal: Journal, policy: ToolPolicy<A, never>,
  call: { toolName: string; args: A; scope: string | undefined }): Promise<ToolApprovalRequest> {
  const made = operationOf(policy, call);
  if (made.missing !== undefined) {
    throw new OpjournalError("INVALID_ARGUMENT", `the call has no ${made.missing}, so it names no operation`, { field: made.missing });
  }
  const op = await journal.lookup(made.op.key);
  if (op.status !== "awaiting_approval" && !approvedNotRun(op)) {
    throw new OpjournalError("INVALID_STATE", `is ${op.status}, not awaiting_approval: nothing to decide`, { field: "operation_key" });
  }
  let same: boolean;
  try {
    same = canonicalJson(op.payload) === canonicalJson(asStored(op.payload, made.op.payload));
  } catch {
    same = false;
  }
  if (!same) throw new OpjournalError("PAYLOAD_MISMATCH", "the journal holds another request under this call's key: decide it from the journal's record", { field: "payload" });
  return approvalRequestOf(op, call.toolName, call.args);
}

/** The journal's stand-in for a member the policy's redact_fields blank. */
const REDACTED = "[redacted]";

/**
 * The call's payload as the journal stores it beside stored: each member
 * the journal holds as "[redacted]" (the policy's redact_fields, at any
 * depth) is blanked the same way, so that a call compares equal to its own
 * record. The request hash still covers the whole payload: the answer goes
 * to the hash of the record, and a redacted member is what nobody, the
 * person deciding included, may read.
 */
export function asStored(stored: unknown, call: unknown): unknown {
  if (Array.isArray(stored) && Array.isArray(call)) {
    return call.map((v, i) => asStored(stored[i], v));
  }
  if (isPlainObject(stored) && isPlainObject(call)) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(call)) out[k] = stored[k] === REDACTED && v !== undefined && v !== null ? REDACTED : asStored(stored[k], v);
    return out;
  }
  return call;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A person's answer to a ToolApprovalRequest. */
export interface ApprovalAnswer {
  approved: boolean;
  /** Why (required, at most 200 characters, nothing secret): kept in the operation's history. */
  reason: string;
}

/**
 * Sends a person's answer to the journal: Approve or Reject of exactly
 * request.requestHash, under the credential of approver, a Journal made
 * with that person's token (never the agent's: the journal records its
 * principal as the one who decided, and refuses roles its policy does not
 * name, and the requester where the policy says so). A rejected call then
 * stays rejected: every later run replays the refusal and calls nothing.
 */
export async function answerApproval(approver: Journal, request: ToolApprovalRequest, answer: ApprovalAnswer): Promise<Operation> {
  if (!isToolApprovalRequest(request)) throw new OpjournalError("INVALID_ARGUMENT", "is not an approval request of this client", { field: "request" });
  if (typeof answer?.approved !== "boolean") throw new OpjournalError("INVALID_ARGUMENT", "must be true or false", { field: "approved" });
  if (answer.approved && request.approved) {
    // Approved already (the AI SDK asks again for an approved call that has
    // not run): the journal's record stands, nothing to send.
    return approver.lookup(request.key);
  }
  return answer.approved
    ? approver.approve(request.key, request.requestHash, answer.reason)
    : approver.reject(request.key, request.requestHash, answer.reason);
}

/** The error codes of an operation a person rejected, or nobody approved in time. */
export const APPROVAL_REFUSALS: ReadonlySet<string> = new Set(["approval_rejected", "approval_timeout"]);

function defaultExternalId(output: unknown): string | undefined {
  if (typeof output === "string" && output.startsWith("{")) {
    // LangChain tools return their output as a JSON text: its "id" is the effect's.
    try {
      output = JSON.parse(output);
    } catch {
      return undefined;
    }
  }
  if (typeof output === "object" && output !== null && typeof (output as { id?: unknown }).id === "string") {
    return (output as { id: string }).id;
  }
  return undefined;
}

/** Resolves a policy's scope for one call. */
export function resolveScope<A, C>(policy: ToolPolicy<A, C>, context: C): string | undefined {
  if (policy.key) return undefined;
  return typeof policy.scope === "function" ? policy.scope(context) : policy.scope;
}
