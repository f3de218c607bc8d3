// The framework-neutral core of the agent framework adapters
// (@opjournal/client/ai-sdk, /openai-agents, /langchain): a tool call runs
// through execute under a key made from the call's identifying arguments
// and the caller's scope, and every outcome without a fresh answer is told
// to the model in the words of the gateway's MCP door (model_texts.ts,
// generated from the repository's protocol/testdata/model_texts.json).

import { createHash } from "node:crypto";

import { canonicalJson } from "./canonical.js";
import { NotRecordedError, OpjournalError, Rejected } from "./errors.js";
import { execute, type AttemptContext, type Op, type Outcome } from "./execute.js";
import type { Journal } from "./journal.js";
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
   * output's string member "id", if any). The reconciler and operators see it.
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
  | { kind: "output"; output: O; replayed: boolean; key: string; outcome: Outcome | undefined }
  | { kind: "text"; text: string; key: string | undefined; outcome: Outcome | undefined };

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
 * approved in time (approval_rejected), a success recorded without the
 * output, refused arguments, an unreachable journal, a missing
 * identifying argument. A fresh definite refusal (the tool threw
 * Rejected) is thrown again, so the framework shows the tool's own error,
 * as the gateway passes the tool's own error result on. Errors that are
 * the program's, not the model's (an unknown action, a bad token, a bad
 * scope), are thrown as OpjournalError.
 */
export async function journalToolCall<A, O>(journal: Journal, policy: ToolPolicy<A, never>, call: ToolCall<A, O>): Promise<ToolAnswer<O>> {
  const tool = call.toolName;
  const argsObj = (typeof call.args === "object" && call.args !== null ? call.args : {}) as Record<string, unknown>;
  const fields = policy.keyFields ?? [];
  const ids = (policy.key ? (policy.identifyingArguments ?? Object.keys(argsObj).sort()) : fields).join(", ");
  let key: string;
  if (policy.key) {
    key = policy.key(call.args);
  } else {
    if (call.scope === undefined) throw new OpjournalError("INVALID_ARGUMENT", "is required with keyFields", { field: "scope" });
    const k = toolKey(policy.action, call.scope, fields, argsObj);
    if (k.missing !== undefined) {
      return { kind: "text", text: modelText("missing_argument", { tool, argument_quoted: goQuote(k.missing), ids }), key: undefined, outcome: undefined };
    }
    key = k.key;
  }
  const op: Op = { key, action: policy.action, payload: policy.payload ? policy.payload(call.args) : call.args };
  const refs = policy.refs ? policy.refs(call.args) : policy.key ? undefined : defaultRefs(fields, argsObj);
  if (refs) op.refs = refs;

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
      if (fresh) return { kind: "output", output: fresh.output, replayed: false, key, outcome: undefined };
      return { kind: "text", text: modelText("unknown", { tool, ids }), key, outcome: undefined };
    }
    if (e instanceof OpjournalError) {
      switch (e.code) {
        case "INVALID_ARGUMENT":
        case "TOO_LARGE":
          return { kind: "text", text: modelText("refused_arguments", { tool, detail: `${e.field}: ${e.detail}`.trim() }), key, outcome: undefined };
        case "UNAVAILABLE":
        case "RATE_LIMITED":
          return { kind: "text", text: modelText("journal_unavailable", { tool }), key, outcome: undefined };
      }
    }
    throw e;
  }
  switch (out.kind) {
    case "succeeded":
      if (!out.replayed && fresh) return { kind: "output", output: fresh.output, replayed: false, key, outcome: out };
      if (out.result && Object.hasOwn(out.result, "tool_result")) {
        return { kind: "output", output: out.result["tool_result"] as O, replayed: true, key, outcome: out };
      }
      return { kind: "text", text: modelText("replayed_succeeded", { tool, external_id_quoted: goQuote(out.externalId) }), key, outcome: out };
    case "failed_final":
      if (APPROVAL_REFUSALS.has(out.errorCode)) {
        // A person's no (or nobody's yes in time), not the tool's refusal.
        return { kind: "text", text: modelText("approval_rejected", { tool, ids, error_code: out.errorCode }), key, outcome: out };
      }
      if (!out.replayed && out.cause !== undefined && Rejected.is(out.cause)) throw out.cause;
      return { kind: "text", text: modelText("replayed_refused", { tool, error_code: out.errorCode }), key, outcome: out };
    case "in_progress_elsewhere": {
      const seconds = Math.trunc(Math.min(Math.max(out.retryAfterMs, 1000), IN_PROGRESS_MAX_SECONDS * 1000) / 1000);
      return { kind: "text", text: modelText("in_progress", { tool, ids, seconds: String(seconds) }), key, outcome: out };
    }
    case "verification_required":
      return { kind: "text", text: modelText("unknown", { tool, ids }), key, outcome: out };
    case "conflict":
      return { kind: "text", text: modelText("conflict", { tool, ids }), key, outcome: out };
    case "awaiting_approval":
      return { kind: "text", text: modelText("awaiting_approval", { tool, ids }), key, outcome: out };
  }
}

/** The error codes of an operation a person rejected, or nobody approved in time. */
export const APPROVAL_REFUSALS: ReadonlySet<string> = new Set(["approval_rejected", "approval_timeout"]);

function defaultExternalId(output: unknown): string | undefined {
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
