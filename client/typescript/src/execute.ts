// execute: the whole protocol in one call, with the Go SDK's semantics
// (client/execute.go): register+claim in one round trip, act on the
// journal's decision (next), call fn only under a lease and stop waiting
// for it before that lease ends, keep the lease alive by heartbeats, record
// its classified outcome, replay what the journal knows.

import type { JsonObject } from "@bufbuild/protobuf";
import { checkParentKey, checkRefs, type Journal, type Operation, type RegisterResult } from "./journal.js";
import { classifyError } from "./classify.js";
import { invalidArgument, NotRecordedError, OpjournalError, UnknownOutcomeError } from "./errors.js";
import { NextStep } from "./gen/opjournal/v1/journal_pb.js";
import { encodeObject } from "./json.js";
import {
  HEARTBEAT_DIVISOR,
  HEARTBEAT_MIN_SECONDS,
  LEASE_MARGIN_DIVISOR,
  LEASE_MARGIN_MAX_SECONDS,
  LEASE_MARGIN_MIN_SECONDS,
} from "./limits.js";

/** One business intent. */
export interface Op {
  /**
   * Names the intent: made ONCE per intent by orchestrator code, never by
   * the model, stored with the intent, and the same for every retry of it.
   * In production make it opaque and random (newKey) and put the business
   * links in refs; a side effect of another operation gets a key derived
   * from its parent's (childKey) and that parent as parentKey. 1–200
   * visible ASCII characters; no secrets.
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
  /**
   * Business references stored beside the key and searchable
   * (listOperations refs): { order_id: "817", customer: "c-93" }, at most
   * MAX_REFS, names of [a-z0-9_.-], short values, nothing secret. Part of
   * neither the key nor the request hash, and fixed at registration: a
   * retry must send the same ones (other refs are a conflict on field
   * "refs").
   */
  refs?: Record<string, string> | undefined;
  /**
   * The key of the operation this one is a side effect of (the payment
   * whose receipt email this is; see childKey); fixed at registration like
   * refs. Unset or "" for none.
   */
  parentKey?: string | undefined;
}

/** What fn gets. */
export interface AttemptContext {
  /** The key to pass on to the provider (Idempotency-Key header, or a searchable reference field). */
  key: string;
  /** The attempt number, the journal's fencing token (1 for the first attempt). */
  attempt: number;
  /**
   * Pass it to the provider call. It aborts when the caller's signal
   * (execute's options.signal) aborts, with its reason, and when execute
   * gives up at the lease deadline, with an UnknownOutcomeError of code
   * "lease_expired" as the reason.
   */
  signal: AbortSignal;
  /** The lease the journal granted at the claim, in seconds. */
  leaseSeconds: number;
  /**
   * When execute gives up waiting for fn: a monotonic timestamp in
   * milliseconds on performance.now()'s clock, the end of the lease the
   * journal granted minus the safety margin (leaseSafetyMarginSeconds).
   * Heartbeats move it later; read it when you need it rather than once.
   */
  readonly deadline: number;
  /**
   * Milliseconds left until deadline (0 once it passed), to bound the
   * provider call: AbortSignal.timeout(ctx.remainingMs()). Whole milliseconds, rounded down.
   */
  remainingMs(): number;
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
  /**
   * The stored result (null if none). When this execute recorded the
   * effect, the one fn returned, as sent: the journal's answer (the "basic"
   * view) leaves it out, and what the journal stores differs only where the
   * policy says so (redact_fields blanked, null members dropped), which a
   * replay returns. After a duplicate effect, the first one's (read with
   * lookup; null if that read failed).
   */
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
  /** Never set (fn was not called); here so that `out.message` reads on any outcome but a success. */
  message?: undefined;
}

/**
 * The outcome is unknown (a timeout, a 5xx, a vanished worker, a lease that
 * ran out while fn ran): the effect may have happened. fn is not called
 * again until reconciliation or a person settles it (or, for a
 * retry_same_key action, the next execute claims a new attempt).
 */
export interface VerificationRequired {
  kind: "verification_required";
  key: string;
  /** What was last observed ("timeout", "http_503", "network_error", "error", "lease_expired"). */
  errorCode: string;
  needsReview: boolean;
  /** The journal's record (after a lease that had already run out: the latest record execute could read). */
  operation: Operation;
  /**
   * fn's error, when this execute called fn (not stored in the journal);
   * when execute gave up at the lease deadline, the UnknownOutcomeError
   * ("lease_expired") it aborted fn's signal with.
   */
  cause?: unknown;
  /**
   * What happened, for people and logs (not stored), when this execute
   * called fn: fn's error as "Name: message" ("ReferenceError: PSP_URL is
   * not defined"), or why execute gave up at the lease deadline.
   */
  message?: string;
}

/** The key is registered with other parameters; fn was not called, nothing changed. */
export interface Conflict {
  kind: "conflict";
  key: string;
  /** The journal's explanation. */
  message: string;
  /** What differs from the registration: "payload", "refs" or "parent_key". */
  field: string;
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
  /** fn's error as "Name: message", when this execute called fn. */
  message?: string;
}

/**
 * The action's policy says a person must approve this exact request
 * (operation.requestHash) first, and no decision came within
 * options.approvalWaitMs; fn was not called. Ask again with the same key
 * and payload after retryAfterMs (or wait longer): once it is approved,
 * that execute calls fn. A rejection is a failed_final ("approval_rejected",
 * or "approval_timeout" when nobody decided in time).
 */
export interface AwaitingApproval {
  kind: "awaiting_approval";
  key: string;
  /** When it is worth asking again (at least 1000). */
  retryAfterMs: number;
  needsReview: boolean;
  /** The journal's record: its operationKey and requestHash name what a person approves. */
  operation: Operation;
  /** Never set (fn was not called); here so that `out.message` reads on any outcome but a success. */
  message?: undefined;
}

/**
 * The operation would pass a budget of its action whose on_exceed is
 * reject (the journal's BUDGET_EXCEEDED): nothing was registered and fn was
 * not called. The same request may fit after retryAfterMs (0: never, it
 * alone is over the limit); it must not be split or rephrased to get
 * around the limit.
 */
export interface BudgetExceeded {
  kind: "budget_exceeded";
  key: string;
  /** The budget's name in the action's policy ("daily-payments"). */
  budget: string;
  /** The action whose policy defines the budget. */
  action: string;
  /** The budget's limit, in its unit (a count, or the summed member's: minor units). */
  limit: number;
  /** What is used of it within its window, the operations whose outcome is not yet known included. */
  used: number;
  /** The budget's rolling window, in seconds (86400 for 24h). */
  windowSeconds: number;
  /**
   * When enough frees up for this request, in milliseconds (unless earlier
   * operations fail first), or 0 when it never fits: its amount alone is
   * over the limit.
   */
  retryAfterMs: number;
  /** The journal's explanation (it names no payload value). */
  message: string;
}

/** What execute established about an operation; switch on `kind`. */
export type Outcome = Succeeded | InProgressElsewhere | VerificationRequired | Conflict | FailedFinal | AwaitingApproval | BudgetExceeded;

/** Options of execute. */
export interface ExecuteOptions {
  /**
   * Combined into fn's ctx.signal and used for the register call. The
   * outcome of fn is recorded even after it aborts, and execute still
   * waits for fn (up to the lease deadline).
   */
  signal?: AbortSignal | undefined;
  /**
   * Extend the lease by heartbeats (ExtendLease) while fn runs (default
   * true). With false, fn has the lease granted at the claim, less the
   * safety margin, and no more.
   */
  heartbeat?: boolean | undefined;
  /**
   * How long to wait, in milliseconds, for a person's decision when the
   * action's policy says this request needs an approval (default 0: do not
   * wait; awaiting_approval at once). The wait calls nothing: it uses
   * lookup's long poll (waitSeconds, at most a minute a call, never
   * sooner than a second apart) and ends at once when signal aborts.
   */
  approvalWaitMs?: number | undefined;
}

/** Each mark call runs without the caller's signal, bounded by this. */
export const RECORD_TIMEOUT_MS = 10_000;

/** The error_code execute records when it gave up on fn at the lease deadline. */
export const LEASE_EXPIRED = "lease_expired";

/**
 * How long before the end of a lease execute stops waiting for fn, in
 * seconds: lease / LEASE_MARGIN_DIVISOR, at least LEASE_MARGIN_MIN_SECONDS
 * and at most LEASE_MARGIN_MAX_SECONDS (limits.ts, from limits.go). It
 * leaves time for the markUnknown to land while the lease is still live.
 */
export function leaseSafetyMarginSeconds(leaseSeconds: number): number {
  return Math.min(Math.max(leaseSeconds / LEASE_MARGIN_DIVISOR, LEASE_MARGIN_MIN_SECONDS), LEASE_MARGIN_MAX_SECONDS);
}

/**
 * How often execute extends a lease of leaseSeconds while fn runs, in
 * seconds: lease / HEARTBEAT_DIVISOR, at least HEARTBEAT_MIN_SECONDS apart,
 * so that two heartbeats in a row may fail before the lease is in danger.
 */
export function heartbeatIntervalSeconds(leaseSeconds: number): number {
  return Math.max(leaseSeconds / HEARTBEAT_DIVISOR, HEARTBEAT_MIN_SECONDS);
}

/**
 * The journal's decision on a register (or claim) answer, as decideNext
 * reads it: call fn for this attempt under this lease, or return this
 * outcome without calling anything.
 */
export type Decision =
  | { call: true; attempt: number; leaseSeconds: number }
  | { call: false; outcome: Outcome };

/** What decideNext reads of a register (or claim) answer. */
export type NextAnswer = Pick<RegisterResult, "next" | "claimed" | "attempt" | "leaseSeconds" | "retryAfterSeconds" | "operation">;

/**
 * Acts on the journal's answer field next, and on nothing else (a pure
 * function; execute's first step, exported for tests and tools):
 *
 * - NextStep.CALL_PROVIDER: call fn with the attempt and the lease granted
 *   (an answer without a claim, an attempt or a lease is an error);
 * - REPLAY: succeeded, replayed, with the stored externalId, result and
 *   needsReview;
 * - FAILED_FINAL: failed_final, replayed, with the stored errorCode;
 * - WAIT: in_progress_elsewhere, retryAfterMs = max(retryAfterSeconds, 1) s;
 * - VERIFICATION_REQUIRED: verification_required with the stored errorCode
 *   and needsReview;
 * - AWAIT_APPROVAL: awaiting_approval, retryAfterMs = max(retryAfterSeconds, 1) s;
 * - anything else (UNSPECIFIED, CLAIM, a step newer than this client): an
 *   OpjournalError (INTERNAL). It is never taken as leave to call.
 */
export function decideNext(key: string, answer: NextAnswer): Decision {
  const op = answer.operation;
  const needsReview = op.needsReview;
  switch (answer.next) {
    case NextStep.CALL_PROVIDER:
      if (!answer.claimed || !(answer.attempt >= 1) || !(answer.leaseSeconds >= 1)) {
        throw new OpjournalError("INTERNAL",
          `the journal said to call the provider without granting a lease (claimed ${answer.claimed}, attempt ${answer.attempt}, ` +
          `lease_seconds ${answer.leaseSeconds}); nothing was called`, { prefix: `opjournal: execute ${JSON.stringify(key)}: ` });
      }
      return { call: true, attempt: answer.attempt, leaseSeconds: answer.leaseSeconds };
    case NextStep.REPLAY:
      return { call: false, outcome: {
        kind: "succeeded", key, replayed: true, externalId: op.externalId, result: op.result, needsReview, operation: op,
      } };
    case NextStep.FAILED_FINAL:
      return { call: false, outcome: { kind: "failed_final", key, replayed: true, errorCode: op.errorCode, needsReview, operation: op } };
    case NextStep.WAIT:
      return { call: false, outcome: {
        kind: "in_progress_elsewhere", key, retryAfterMs: Math.max(answer.retryAfterSeconds, 1) * 1000, needsReview, operation: op,
      } };
    case NextStep.VERIFICATION_REQUIRED:
      return { call: false, outcome: { kind: "verification_required", key, errorCode: op.errorCode, needsReview, operation: op } };
    case NextStep.AWAIT_APPROVAL:
      return { call: false, outcome: {
        kind: "awaiting_approval", key, retryAfterMs: Math.max(answer.retryAfterSeconds, 1) * 1000, needsReview, operation: op,
      } };
    default: {
      const name = NextStep[answer.next] as string | undefined;
      throw new OpjournalError("INTERNAL",
        `the journal answered next step ${name ? "NEXT_STEP_" + name : String(answer.next)}, which execute does not act on; ` +
        "nothing was called (an SDK older than the journal? upgrade it)", { prefix: `opjournal: execute ${JSON.stringify(key)}: ` });
    }
  }
}

/**
 * Runs fn at most once per attempt the journal grants, and never again once
 * the outcome is recorded:
 *
 * 1. Registers op and claims it in one round trip.
 * 2. Acts on the journal's decision (the answer's next; see decideNext) and
 *    on nothing else: a stored success is returned as succeeded with
 *    replayed (the stored result), a stored rejection as failed_final,
 *    another worker's live lease as in_progress_elsewhere, an unknown
 *    outcome or a person's hold as verification_required, all without
 *    calling fn. The same key with another payload (or other refs, or
 *    another parentKey) is a conflict. A new operation that would pass a
 *    budget of its action whose on_exceed is reject (BUDGET_EXCEEDED) is
 *    budget_exceeded: the journal registered nothing. A step this client
 *    does not know is an OpjournalError, never leave to call.
 *    When a person must approve the request first (AWAIT_APPROVAL), it
 *    calls nothing: it waits up to options.approvalWaitMs for the decision
 *    with lookup's long poll (never a tight loop; an abort of
 *    options.signal ends it with a CANCELED OpjournalError). Approved in
 *    time, it registers again and goes on (claim, fn once); rejected, the
 *    refusal is replayed (failed_final); otherwise awaiting_approval.
 * 3. Having claimed it, it calls fn({ key, attempt, signal, leaseSeconds,
 *    deadline, remainingMs }).
 * 4. It records fn's outcome: a resolved Effect → markSucceeded →
 *    succeeded; a thrown Rejected → markFailedFinal → failed_final; any
 *    other throw (timeouts, aborts, 5xx, network errors, anything) →
 *    markUnknown → verification_required. It is recorded without the
 *    caller's signal (10 s bound), even after the signal aborted.
 *
 * The lease rule. fn may run at most lease − margin: the lease the JOURNAL
 * granted (the answer's leaseSeconds), counted on this process's monotonic
 * clock (performance.now()) from just before the register request was
 * sent, so network delay only shortens it; margin is
 * leaseSafetyMarginSeconds(lease) (a tenth, 0.5–5 s). The caller's idea of
 * time plays no part. While fn runs, execute keeps the lease alive by
 * heartbeats: extendLease every heartbeatIntervalSeconds(lease) (a third);
 * a granted lease g, counted from when that heartbeat was sent, moves the
 * deadline to t + g − margin(g) if that is later (the journal never
 * shortens a lease; its grant is rounded down to whole seconds). A
 * refused heartbeat (STALE_ATTEMPT, INVALID_STATE: the lease is gone or the
 * policy's max_attempt_seconds is reached) stops the heartbeats and keeps
 * the deadline; a journal that does not answer is tried again at the next
 * interval. When the lease cannot be kept, execute gives up at the
 * deadline: it aborts ctx.signal (reason: UnknownOutcomeError
 * "lease_expired"), stops waiting for fn, records markUnknown
 * "lease_expired" and returns verification_required: the outcome is
 * unknown and the reconciler settles it. If fn later resolves with an
 * Effect anyway, execute records it (markSucceeded for that attempt, best
 * effort: a confirmed effect is a fact, accepted from a stale attempt).
 * Heartbeats are on by default (options.heartbeat: false turns them off).
 * Every timer ends when fn settles or execute gives up.
 *
 * It throws an OpjournalError when op is invalid (INVALID_ARGUMENT), when
 * the journal is unreachable or refuses the request (UNKNOWN_ACTION,
 * UNAUTHENTICATED, …) or answers a step it does not know, and a
 * NotRecordedError when fn ran but its outcome could not be recorded.
 */
export async function execute(journal: Journal, op: Op, fn: AttemptFn, options: ExecuteOptions = {}): Promise<Outcome> {
  const { payload, refs, parentKey } = validate(op, fn);
  const waitMs = options.approvalWaitMs ?? 0;
  if (typeof waitMs !== "number" || !(waitMs >= 0)) {
    throw invalidArgument("approvalWaitMs", "must be a number of milliseconds ≥ 0 (0: do not wait)", `opjournal: execute ${JSON.stringify(op.key)}: `);
  }
  const register = async (): Promise<Registered> => {
    // The lease runs from before the request is sent: the journal's lease
    // started after that, so network delay only shortens ours.
    const sentAt = performance.now();
    let reg: RegisterResult;
    try {
      reg = await journal.register(
        { key: op.key, action: op.action, payload, refs, parentKey,
          claim: { workerId: journal.workerId, leaseSeconds: journal.leaseSeconds } },
        options.signal ? { signal: options.signal } : undefined,
      );
    } catch (e) {
      if (e instanceof OpjournalError && e.code === "PAYLOAD_MISMATCH") {
        return { decision: { call: false, outcome: { kind: "conflict", key: op.key, message: e.detail, field: e.field } } };
      }
      if (e instanceof OpjournalError && e.code === "BUDGET_EXCEEDED") {
        return { decision: { call: false, outcome: budgetOutcome(op.key, e) } };
      }
      throw e;
    }
    return { decision: decideNext(op.key, reg), reg, sentAt };
  };
  let r = await register();
  if (!r.decision.call && r.decision.outcome.kind === "awaiting_approval" && waitMs > 0) {
    r = await awaitApproval(journal, op.key, r.decision.outcome, waitMs, options.signal, register);
  }
  const { decision, reg, sentAt } = r;
  if (!decision.call) return decision.outcome;
  return runAttempt(journal, {
    key: op.key, attempt: decision.attempt, leaseSeconds: decision.leaseSeconds, sentAt: sentAt!, operation: reg!.operation,
  }, fn, options);
}

/**
 * The budget_exceeded outcome of a BUDGET_EXCEEDED refusal: the budget its
 * ErrorInfo names (all metadata values are strings) and its RetryInfo (or
 * retry_after_seconds; absent when the request never fits).
 */
export function budgetOutcome(key: string, e: OpjournalError): BudgetExceeded {
  const d = e.details;
  const int = (name: string): number => {
    const n = Number(d[name] ?? "");
    return Number.isFinite(n) ? n : 0;
  };
  return {
    kind: "budget_exceeded", key, budget: d["budget"] ?? "", action: d["action"] ?? "",
    limit: int("limit"), used: int("used"), windowSeconds: int("window_seconds"),
    retryAfterMs: e.retryAfterMs > 0 ? e.retryAfterMs : int("retry_after_seconds") * 1000,
    message: e.detail,
  };
}

/** A register's decision, with the answer and when it was sent when the journal answered. */
interface Registered {
  decision: Decision;
  reg?: RegisterResult | undefined;
  sentAt?: number | undefined;
}

/** The longest long poll lookup takes (waitSeconds ≤ 60). */
const MAX_LOOKUP_WAIT_SECONDS = 60;

/**
 * The least time between two lookups of one wait for an approval: a
 * journal that answers at once (one without the long poll, or a first
 * approval of two under two_person) is not asked in a tight loop.
 */
const MIN_APPROVAL_POLL_MS = 1000;

/**
 * Waits up to waitMs for a person's decision with lookup's long poll,
 * calling nothing; once the operation no longer awaits approval it
 * registers again (the same request) and the journal's answer decides.
 * The awaiting_approval outcome (with the latest record) when the wait
 * ends first; an abort of signal ends it with a CANCELED OpjournalError.
 */
async function awaitApproval(journal: Journal, key: string, out: AwaitingApproval, waitMs: number,
  signal: AbortSignal | undefined, register: () => Promise<Registered>): Promise<Registered> {
  const end = performance.now() + waitMs;
  const canceled = () => new OpjournalError("CANCELED", "the caller's signal ended the wait for an approval; nothing was called",
    { prefix: `opjournal: execute ${JSON.stringify(key)}: `, cause: signal?.reason });
  for (;;) {
    if (signal?.aborted) throw canceled();
    const left = end - performance.now();
    if (left <= 0) return { decision: { call: false, outcome: out } };
    const asked = performance.now();
    const slice = AbortSignal.timeout(Math.ceil(left));
    let op: Operation | undefined;
    try {
      op = await journal.lookup(key, {
        view: "basic",
        waitSeconds: Math.min(MAX_LOOKUP_WAIT_SECONDS, Math.max(1, Math.ceil(left / 1000))),
        signal: signal ? AbortSignal.any([signal, slice]) : slice,
        timeoutMs: Math.ceil(left) + 1000,
      });
    } catch (e) {
      if (signal?.aborted) throw canceled();
      // The bound passed while the journal held the answer, or it could
      // not be reached (asked again after the pause); anything else ends it.
      if (!(slice.aborted || (e instanceof OpjournalError && (e.code === "UNAVAILABLE" || e.code === "RATE_LIMITED")))) throw e;
    }
    if (op !== undefined && op.status !== "awaiting_approval") {
      // Decided (or changed otherwise): the journal's answer to the same
      // request says what happens now.
      const next = await register();
      if (next.decision.call || next.decision.outcome.kind !== "awaiting_approval") return next;
      out = next.decision.outcome;
    } else if (op !== undefined) {
      out = { ...out, operation: op, needsReview: op.needsReview };
    }
    const pause = Math.min(MIN_APPROVAL_POLL_MS - (performance.now() - asked), end - performance.now());
    if (pause > 0) await sleep(pause, signal);
  }
}

/** Resolves after ms, or at once when signal aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** A claimed attempt: whose, which, under what lease, sent when (performance.now()). */
interface Claimed {
  key: string;
  attempt: number;
  leaseSeconds: number;
  sentAt: number;
  /** The latest record seen. */
  operation: Operation;
}

/** How fn ended. */
type Settled = { ok: true; effect: Effect } | { ok: false; error: unknown };

/**
 * The end of an attempt's lease less the safety margin, on
 * performance.now()'s clock: from when the claim (or a heartbeat that
 * extended it) was sent.
 */
class LeaseClock {
  deadline: number;
  /** Called when a heartbeat moved the deadline. */
  onMoved: (() => void) | undefined;

  constructor(sentAt: number, leaseSeconds: number) {
    this.deadline = sentAt + (leaseSeconds - leaseSafetyMarginSeconds(leaseSeconds)) * 1000;
  }

  /** A heartbeat sent at sentAt was granted leaseSeconds: the deadline moves if that ends later. */
  extended(sentAt: number, leaseSeconds: number): void {
    const d = sentAt + (leaseSeconds - leaseSafetyMarginSeconds(leaseSeconds)) * 1000;
    if (d > this.deadline) {
      this.deadline = d;
      this.onMoved?.();
    }
  }
}

/** Journal errors after which a heartbeat is never sent again (the lease is gone, or cannot be extended). */
const HEARTBEAT_REFUSALS = new Set(["STALE_ATTEMPT", "INVALID_STATE", "NOT_FOUND", "INVALID_ARGUMENT", "PERMISSION_DENIED", "UNAUTHENTICATED"]);

/** Calls fn under the claimed lease, heartbeats, gives up at the deadline, records the outcome. */
async function runAttempt(journal: Journal, a: Claimed, fn: AttemptFn, options: ExecuteOptions): Promise<Outcome> {
  const lease = new LeaseClock(a.sentAt, a.leaseSeconds);
  const leaseEnd = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, leaseEnd.signal]) : leaseEnd.signal;
  const ctx: AttemptContext = {
    key: a.key,
    attempt: a.attempt,
    signal,
    leaseSeconds: a.leaseSeconds,
    get deadline() { return lease.deadline; },
    remainingMs: () => Math.max(0, Math.floor(lease.deadline - performance.now())),
  };
  const leaseError = new UnknownOutcomeError(LEASE_EXPIRED,
    `execute gave up on attempt ${a.attempt} of ${JSON.stringify(a.key)} at the end of its lease less the safety margin ` +
    "(the lease could not be kept); the provider call was told to stop and its outcome is unknown");
  if (performance.now() >= lease.deadline) {
    // The claim took the whole lease: fn is not called at all.
    return giveUp(journal, a, leaseError);
  }

  const stop = new AbortController(); // ends the timers and a heartbeat in flight
  let giveUpTimer: ReturnType<typeof setTimeout> | undefined;
  let beatTimer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<"expired">((resolve) => {
    const arm = () => {
      if (stop.signal.aborted) return;
      const wait = lease.deadline - performance.now();
      if (wait <= 0) {
        resolve("expired");
        return;
      }
      giveUpTimer = setTimeout(arm, Math.ceil(wait));
    };
    lease.onMoved = () => {
      clearTimeout(giveUpTimer);
      arm();
    };
    arm();
  });

  if (options.heartbeat !== false) {
    const intervalMs = heartbeatIntervalSeconds(a.leaseSeconds) * 1000;
    const beat = async () => {
      const sentAt = performance.now();
      let again = true;
      try {
        const r = await journal.extendLease(a.key, a.attempt, 0, { signal: stop.signal, timeoutMs: Math.max(intervalMs, 1000) });
        if (stop.signal.aborted) return;
        a.operation = r.operation;
        lease.extended(sentAt, r.leaseSeconds);
      } catch (e) {
        if (stop.signal.aborted) return;
        // A refusal ends the heartbeats and the lease ends as it stands;
        // anything else (unreachable, slow) is tried again.
        if (e instanceof OpjournalError && HEARTBEAT_REFUSALS.has(e.code)) again = false;
      }
      if (again && !stop.signal.aborted) beatTimer = setTimeout(beat, Math.max(0, sentAt + intervalMs - performance.now()));
    };
    beatTimer = setTimeout(beat, intervalMs);
  }

  // fn starts under a running clock: the give-up timer and the heartbeats
  // are armed first.
  let fnP: Promise<Effect>;
  try {
    fnP = Promise.resolve(fn(ctx));
  } catch (e) {
    fnP = Promise.reject(e);
  }
  const settled: Promise<Settled> = fnP.then((effect) => ({ ok: true, effect }), (error: unknown) => ({ ok: false, error }));

  const first = await Promise.race([settled, expired]);
  stop.abort();
  lease.onMoved = undefined;
  clearTimeout(giveUpTimer);
  clearTimeout(beatTimer);

  if (first !== "expired") {
    return first.ok ? recordSuccess(journal, a, first.effect) : recordFailure(journal, a, first.error);
  }
  leaseEnd.abort(leaseError);
  const marked = giveUp(journal, a, leaseError);
  // A confirmed effect that arrives after execute gave up is still a fact:
  // recorded once the unknown is (or failed to be), errors swallowed.
  void Promise.allSettled([marked, settled]).then(async ([, late]) => {
    if (late.status === "fulfilled" && late.value.ok) await recordSuccess(journal, a, late.value.effect);
  }).catch(() => {});
  return marked;
}

/**
 * Records an attempt execute gave up on as unknown ("lease_expired"). A
 * refusal because the lease already ran out (STALE_ATTEMPT) changes
 * nothing: the journal reads an expired lease as unknown anyway.
 */
async function giveUp(journal: Journal, a: Claimed, cause: UnknownOutcomeError): Promise<Outcome> {
  let op: Operation;
  try {
    op = await journal.markUnknown({ key: a.key, attempt: a.attempt, errorCode: LEASE_EXPIRED }, recordOptions());
  } catch (e) {
    const err = asJournalError(e);
    if (err.code !== "STALE_ATTEMPT") {
      throw new NotRecordedError(a.key, a.attempt, "verification_required", err, { fnError: cause });
    }
    op = await journal.lookup(a.key, recordOptions()).catch(() => a.operation);
  }
  return { kind: "verification_required", key: a.key, errorCode: LEASE_EXPIRED, needsReview: op.needsReview, operation: op, cause,
    message: cause.message };
}

/** Checks op on the client and encodes its payload and refs (INVALID_ARGUMENT otherwise). */
function validate(op: Op, fn: unknown): { payload: JsonObject; refs: Record<string, string>; parentKey: string } {
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
  const refs = checkRefs(op.refs, prefix);
  const parentKey = checkParentKey(op.parentKey, prefix);
  try {
    return { payload: encodeObject("payload", op.payload), refs, parentKey };
  } catch (e) {
    if (e instanceof OpjournalError) throw new OpjournalError(e.code, e.detail, { field: e.field, prefix });
    throw e;
  }
}

const recordOptions = () => ({ timeoutMs: RECORD_TIMEOUT_MS });

/** A thrown value as "Name: message" (an Error), else what it is. */
function describeError(e: unknown): string {
  if (e instanceof Error) return e.message ? `${e.name}: ${e.message}` : e.name;
  if (typeof e === "object" && e !== null) {
    const { name, message } = e as { name?: unknown; message?: unknown };
    if (typeof message === "string") return typeof name === "string" && name ? `${name}: ${message}` : message;
  }
  try {
    return `a thrown ${typeof e}: ${typeof e === "string" ? JSON.stringify(e) : String(e)}`;
  } catch {
    return `a thrown ${typeof e}`;
  }
}

/** Records fn's throw: failed_final for a Rejected, unknown for anything else. */
async function recordFailure(journal: Journal, ctx: { key: string; attempt: number }, fnError: unknown): Promise<Outcome> {
  const { final, code } = classifyError(fnError);
  const message = describeError(fnError);
  if (!final && code === "error") {
    // Nothing in the error says what the provider did: most likely a bug in
    // fn. It is still recorded as unknown, since fn may have called the
    // provider before it failed, but it must not pass unseen.
    console.warn(`opjournal: fn of operation ${JSON.stringify(ctx.key)} (attempt ${ctx.attempt}) threw ${message}; ` +
      "recorded as unknown (errorCode \"error\"), since the provider may have been called: the reconciler or an " +
      "operator settles it before the key is called again", fnError);
  }
  const params = { key: ctx.key, attempt: ctx.attempt, errorCode: code };
  if (final) {
    let op: Operation;
    try {
      op = await journal.markFailedFinal(params, recordOptions());
    } catch (e) {
      throw new NotRecordedError(ctx.key, ctx.attempt, "failed_final", asJournalError(e), { fnError });
    }
    return { kind: "failed_final", key: ctx.key, replayed: false, errorCode: code, needsReview: op.needsReview, operation: op, cause: fnError,
      message };
  }
  let op: Operation;
  try {
    op = await journal.markUnknown(params, recordOptions());
  } catch (e) {
    throw new NotRecordedError(ctx.key, ctx.attempt, "verification_required", asJournalError(e), { fnError });
  }
  return { kind: "verification_required", key: ctx.key, errorCode: code, needsReview: op.needsReview, operation: op, cause: fnError,
    message };
}

/**
 * Records a confirmed effect. A result the journal cannot store does not
 * lose the effect: it is recorded without the result, and the outcome
 * carries resultError.
 */
async function recordSuccess(journal: Journal, ctx: { key: string; attempt: number }, effect: Effect): Promise<Outcome> {
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
  let sent = result;
  try {
    try {
      op = await mark(result);
    } catch (e) {
      if (result === undefined || !refusedResult(e)) throw e;
      resultError = e as OpjournalError;
      sent = undefined;
      op = await mark(undefined);
    }
  } catch (e) {
    throw new NotRecordedError(ctx.key, ctx.attempt, "succeeded", asJournalError(e), { externalId });
  }
  let stored: JsonObject | null = sent ?? null; // the answer ("basic") leaves the result out: it is the one sent
  if (op.externalId !== externalId) {
    // The journal holds another effect (a duplicate, now under review): the
    // stored result is that one's. Best effort: the effect is recorded
    // whether or not it can be read.
    try {
      stored = (await journal.lookup(ctx.key, { view: "full", ...recordOptions() })).result;
    } catch {
      stored = null;
    }
  }
  const out: Succeeded = {
    kind: "succeeded", key: ctx.key, replayed: false, externalId: op.externalId, result: stored,
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
  /** Heartbeats while the tool runs (default true); a call's own options.heartbeat wins. */
  heartbeat?: boolean | undefined;
  /** The business references of a call (see Op.refs), fixed at registration. */
  refs?: ((args: A) => Record<string, string>) | undefined;
  /** The key of the operation a call's effect belongs to (see Op.parentKey); "" for none. */
  parentKey?: ((args: A) => string) | undefined;
}

/**
 * Wraps an agent tool so that every call goes through execute: the tool
 * runs at most once per intent, and its retries get the stored answer. The
 * tool gets execute's AttemptContext (pass ctx.key and ctx.signal on, and
 * bound the call by ctx.remainingMs()); the lease rule of execute applies.
 *
 *     const pay = idempotent(journal, {
 *       action: "create_payment",
 *       key: (a) => `payment:order-${a.orderId}:intent-${a.intent}`,
 *       payload: (a) => ({ order_id: a.orderId, amount_minor: a.amountMinor, currency: a.currency }),
 *     }, async (a, ctx) => { ... return { externalId, result }; });
 *     const outcome = await pay({ orderId: "817", intent: "01", amountMinor: 490000, currency: "RUB" });
 *
 * The key is made once per intent by orchestrator code: a key it stored
 * (newKey) comes in with the arguments (key: (a) => a.paymentKey). refs
 * and parentKey, if given, make a call's business references and parent
 * (a child's key: childKey(a.paymentKey, "receipt_email")).
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
    if (spec.refs) op.refs = spec.refs(args);
    if (spec.parentKey) op.parentKey = spec.parentKey(args);
    const opts: ExecuteOptions = { ...options };
    if (opts.heartbeat === undefined && spec.heartbeat !== undefined) opts.heartbeat = spec.heartbeat;
    return execute(journal, op, (ctx) => tool(args, ctx), opts);
  };
}
