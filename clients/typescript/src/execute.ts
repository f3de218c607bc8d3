// execute: the whole protocol in one call, with the Go SDK's semantics
// (client/execute.go): register+claim in one round trip, call fn only under
// a lease, record its classified outcome, replay what the journal knows.

import type { JsonObject } from "@bufbuild/protobuf";
import type { Journal, Operation } from "./journal.js";
import { classifyError } from "./classify.js";
import { invalidArgument, NotRecordedError, OpjournalError } from "./errors.js";
import { encodeObject } from "./json.js";

/** One business intent. */
export interface Op {
  /**
   * Names the intent ("payment:order-817:intent-01"): made by orchestrator
   * code, never by the model, the same for every retry of the intent.
   * 1–200 visible ASCII characters; no secrets.
   */
  key: string;
  /** An action defined in the journal's policy ("create_payment"). */
  action: string;
  /**
   * The request parameters: anything that JSON-encodes as an object. The
   * journal binds its hash to the key: the same key with another payload is
   * a conflict. Money travels as integers in minor units.
   */
  payload: unknown;
}

/** What fn gets. */
export interface AttemptContext {
  /** The key to pass on to the provider (Idempotency-Key header, or a searchable reference field). */
  key: string;
  /** The attempt number, the journal's fencing token (1 for the first attempt). */
  attempt: number;
  /** The caller's signal (execute's options.signal); it never aborts when none was given. */
  signal: AbortSignal;
}

/** What fn returns when the provider confirmed the effect. */
export interface Effect {
  /** The provider's identifier of the effect ("pay_5f2c"), ≤ 200 characters. */
  externalId: string;
  /**
   * Stored and returned on every replay: anything that JSON-encodes as an
   * object, or undefined for none. Only what a retry needs (no secrets).
   */
  result?: unknown;
}

/** fn: calls the provider once, passing ctx.key on. */
export type AttemptFn = (ctx: AttemptContext) => Promise<Effect> | Effect;

/** The effect is confirmed and recorded. */
export interface Succeeded {
  kind: "succeeded";
  key: string;
  /** True when this is the journal's stored answer and fn was not called now. */
  replayed: boolean;
  /** The provider's identifier (with needsReview after a duplicate effect: the first one's). */
  externalId: string;
  /** The stored result (null if none). */
  result: JsonObject | null;
  /** A person must look at the operation (e.g. a duplicate effect; see operation.reviewReason). */
  needsReview: boolean;
  operation: Operation;
  /**
   * Set when the effect is recorded but fn's result could not be stored (not
   * a JSON object, too large): result is then null.
   */
  resultError?: OpjournalError;
}

/** Another worker holds a live lease; fn was not called. Ask again after retryAfterMs. */
export interface InProgressElsewhere {
  kind: "in_progress_elsewhere";
  key: string;
  /** How long the other lease still runs (at least 1000). */
  retryAfterMs: number;
  needsReview: boolean;
  operation: Operation;
}

/**
 * The outcome is unknown (a timeout, a 5xx, a vanished worker): the effect
 * may have happened. fn is not called again until reconciliation or a person
 * settles it (or, for a retry_same_key action, the next execute claims a new
 * attempt).
 */
export interface VerificationRequired {
  kind: "verification_required";
  key: string;
  /** What was last observed ("timeout", "http_503", "network_error", "error"). */
  errorCode: string;
  needsReview: boolean;
  operation: Operation;
  /** fn's error, when this execute called fn (not stored in the journal). */
  cause?: unknown;
}

/** The key is registered with other parameters; fn was not called, nothing changed. */
export interface Conflict {
  kind: "conflict";
  key: string;
  /** The journal's explanation (the two request hashes). */
  message: string;
}

/** The provider confirmed a rejection; no retry of this key will call fn again. */
export interface FailedFinal {
  kind: "failed_final";
  key: string;
  /** True when this is the journal's stored answer and fn was not called now. */
  replayed: boolean;
  /** The provider's rejection ("card_declined", "http_402"). */
  errorCode: string;
  needsReview: boolean;
  operation: Operation;
  /** fn's error, when this execute called fn. */
  cause?: unknown;
}

/** What execute established about an operation; switch on `kind`. */
export type Outcome = Succeeded | InProgressElsewhere | VerificationRequired | Conflict | FailedFinal;

/** Options of execute. */
export interface ExecuteOptions {
  /**
   * Passed to fn as ctx.signal and used for the register call. The outcome
   * of fn is recorded even after it aborts.
   */
  signal?: AbortSignal | undefined;
}

/** Each mark call runs without the caller's signal, bounded by this. */
export const RECORD_TIMEOUT_MS = 10_000;

const neverAborts = new AbortController().signal;

/**
 * Runs fn at most once per attempt the journal grants, and never again once
 * the outcome is recorded:
 *
 * 1. Registers op and claims it in one round trip.
 * 2. If the journal holds a terminal answer it returns it without calling
 *    fn: succeeded with replayed (the stored result), or failed_final. The
 *    same key with another payload is a conflict. A live lease elsewhere is
 *    in_progress_elsewhere; an unknown outcome (or an expired lease of a
 *    reconcile_before_retry action) is verification_required.
 * 3. Having claimed it, it calls fn({ key, attempt, signal }).
 * 4. It records fn's outcome: a resolved Effect → markSucceeded →
 *    succeeded; a thrown Rejected → markFailedFinal → failed_final; any
 *    other throw (timeouts, aborts, 5xx, network errors, anything) →
 *    markUnknown → verification_required. It is recorded without the
 *    caller's signal (10 s bound), even after the signal aborted.
 *
 * It throws an OpjournalError when op is invalid (INVALID_ARGUMENT), when
 * the journal is unreachable or refuses the request (UNKNOWN_ACTION,
 * UNAUTHENTICATED, …), and a NotRecordedError when fn ran but its outcome
 * could not be recorded.
 */
export async function execute(journal: Journal, op: Op, fn: AttemptFn, options: ExecuteOptions = {}): Promise<Outcome> {
  const payload = validate(op, fn);
  let reg;
  try {
    reg = await journal.register(
      { key: op.key, action: op.action, payload, claim: { workerId: journal.workerId, leaseSeconds: journal.leaseSeconds } },
      options.signal ? { signal: options.signal } : undefined,
    );
  } catch (e) {
    if (e instanceof OpjournalError && e.code === "PAYLOAD_MISMATCH") {
      return { kind: "conflict", key: op.key, message: e.detail };
    }
    throw e;
  }
  if (!reg.claimed) return journalAnswer(op.key, reg.operation, reg.retryAfterSeconds);
  const ctx: AttemptContext = { key: op.key, attempt: reg.attempt, signal: options.signal ?? neverAborts };
  let effect: Effect;
  try {
    effect = await fn(ctx);
  } catch (e) {
    return recordFailure(journal, ctx, e);
  }
  return recordSuccess(journal, ctx, effect);
}

/** Checks op on the client and encodes its payload (INVALID_ARGUMENT otherwise). */
function validate(op: Op, fn: unknown): JsonObject {
  const prefix = `opjournal: execute ${JSON.stringify(op?.key)}: `;
  if (typeof op !== "object" || op === null) throw invalidArgument("op", "is required ({ key, action, payload })", prefix);
  const key = op.key;
  if (typeof key !== "string" || key === "") throw invalidArgument("operation_key", "is required", prefix);
  if (key.length > 200) throw invalidArgument("operation_key", `is ${key.length} characters; the limit is 200`, prefix);
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      throw invalidArgument("operation_key",
        `has a character 0x${c.toString(16).padStart(2, "0")} at offset ${i}; only visible ASCII characters (0x21–0x7e) are allowed`, prefix);
    }
  }
  if (typeof op.action !== "string" || op.action === "") throw invalidArgument("action_type", "is required", prefix);
  if (typeof fn !== "function") throw invalidArgument("fn", "must be a function", prefix);
  try {
    return encodeObject("payload", op.payload);
  } catch (e) {
    if (e instanceof OpjournalError) throw new OpjournalError(e.code, e.detail, { field: e.field, prefix });
    throw e;
  }
}

/** The outcome of a lost claim: the journal's state decides. */
function journalAnswer(key: string, op: Operation, retryAfterSeconds: number): Outcome {
  const needsReview = op.needsReview;
  switch (op.status) {
    case "succeeded":
      return { kind: "succeeded", key, replayed: true, externalId: op.externalId, result: op.result, needsReview, operation: op };
    case "failed_final":
      return { kind: "failed_final", key, replayed: true, errorCode: op.errorCode, needsReview, operation: op };
    case "in_progress":
      return { kind: "in_progress_elsewhere", key, retryAfterMs: Math.max(retryAfterSeconds, 1) * 1000, needsReview, operation: op };
    case "pending":
      if (needsReview) { // a person holds it
        return { kind: "verification_required", key, errorCode: op.errorCode, needsReview, operation: op };
      }
      // it changed hands between our claim and our read: ask again
      return { kind: "in_progress_elsewhere", key, retryAfterMs: 1000, needsReview, operation: op };
    default: // unknown, including an expired lease
      return { kind: "verification_required", key, errorCode: op.errorCode, needsReview, operation: op };
  }
}

const recordOptions = () => ({ timeoutMs: RECORD_TIMEOUT_MS });

/** Records fn's throw: failed_final for a Rejected, unknown for anything else. */
async function recordFailure(journal: Journal, ctx: AttemptContext, fnError: unknown): Promise<Outcome> {
  const { final, code } = classifyError(fnError);
  const params = { key: ctx.key, attempt: ctx.attempt, errorCode: code };
  if (final) {
    let op: Operation;
    try {
      op = await journal.markFailedFinal(params, recordOptions());
    } catch (e) {
      throw new NotRecordedError(ctx.key, ctx.attempt, "failed_final", asJournalError(e), { fnError });
    }
    return { kind: "failed_final", key: ctx.key, replayed: false, errorCode: code, needsReview: op.needsReview, operation: op, cause: fnError };
  }
  let op: Operation;
  try {
    op = await journal.markUnknown(params, recordOptions());
  } catch (e) {
    throw new NotRecordedError(ctx.key, ctx.attempt, "verification_required", asJournalError(e), { fnError });
  }
  return { kind: "verification_required", key: ctx.key, errorCode: code, needsReview: op.needsReview, operation: op, cause: fnError };
}

/**
 * Records a confirmed effect. A result the journal cannot store does not
 * lose the effect: it is recorded without the result, and the outcome
 * carries resultError.
 */
async function recordSuccess(journal: Journal, ctx: AttemptContext, effect: Effect): Promise<Outcome> {
  const externalId = typeof effect?.externalId === "string" ? effect.externalId
    : effect?.externalId === undefined || effect?.externalId === null ? "" : String(effect.externalId);
  let result: JsonObject | undefined;
  let resultError: OpjournalError | undefined;
  const raw = effect?.result;
  if (raw !== undefined && raw !== null) {
    try {
      result = encodeObject("result", raw);
    } catch (e) {
      resultError = asJournalError(e);
    }
  }
  const mark = (r: JsonObject | undefined) =>
    journal.markSucceeded({ key: ctx.key, attempt: ctx.attempt, externalId, ...(r ? { result: r } : {}) }, recordOptions());
  let op: Operation;
  try {
    try {
      op = await mark(result);
    } catch (e) {
      if (result === undefined || !refusedResult(e)) throw e;
      resultError = e as OpjournalError;
      op = await mark(undefined);
    }
  } catch (e) {
    throw new NotRecordedError(ctx.key, ctx.attempt, "succeeded", asJournalError(e), { externalId });
  }
  const out: Succeeded = {
    kind: "succeeded", key: ctx.key, replayed: false, externalId: op.externalId, result: op.result,
    needsReview: op.needsReview, operation: op,
  };
  if (resultError) out.resultError = resultError;
  return out;
}

/** Whether the journal refused markSucceeded because of the result alone. */
function refusedResult(e: unknown): boolean {
  if (!(e instanceof OpjournalError) || (e.code !== "INVALID_ARGUMENT" && e.code !== "TOO_LARGE")) return false;
  return e.field === "result" || e.field.startsWith("result/");
}

function asJournalError(e: unknown): OpjournalError {
  if (e instanceof OpjournalError) return e;
  return new OpjournalError("INTERNAL", e instanceof Error ? e.message : String(e), { cause: e });
}

/** The spec of an idempotent tool: its action, and how its arguments make the key and the payload. */
export interface IdempotentSpec<A> {
  action: string;
  /** The operation key of a call: names the business intent, made by code, never by the model. */
  key: (args: A) => string;
  /** The payload of a call (default: the arguments themselves). */
  payload?: ((args: A) => unknown) | undefined;
}

/**
 * Wraps an agent tool so that every call goes through execute: the tool
 * runs at most once per intent, and its retries get the stored answer.
 *
 *     const pay = idempotent(journal, {
 *       action: "create_payment",
 *       key: (a) => `payment:order-${a.orderId}:intent-${a.intent}`,
 *       payload: (a) => ({ order_id: a.orderId, amount_minor: a.amountMinor, currency: a.currency }),
 *     }, async (a, ctx) => { ... return { externalId, result }; });
 *     const outcome = await pay({ orderId: "817", intent: "01", amountMinor: 490000, currency: "RUB" });
 */
export function idempotent<A>(
  journal: Journal,
  spec: IdempotentSpec<A>,
  tool: (args: A, ctx: AttemptContext) => Promise<Effect> | Effect,
): (args: A, options?: ExecuteOptions) => Promise<Outcome> {
  return async (args: A, options?: ExecuteOptions) => {
    const op: Op = {
      key: spec.key(args),
      action: spec.action,
      payload: spec.payload ? spec.payload(args) : args,
    };
    return execute(journal, op, (ctx) => tool(args, ctx), options);
  };
}
