// The Journal client: thin, typed calls of opjournal's JournalService over
// plain gRPC (HTTP/2), with plain objects in and out.

import { hostname } from "node:os";
import { isIP } from "node:net";
import type { SecureClientSessionOptions } from "node:http2";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type { JsonObject } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";

import {
  JournalService,
  NextStep,
  OperationView as PbOperationView,
  Status as PbStatus,
  type ClaimResponse as PbClaimResponse,
  type Event as PbEvent,
  type Operation as PbOperation,
  type RegisterResponse as PbRegisterResponse,
} from "./gen/opjournal/v1/journal_pb.js";
import { journalError, OpjournalError, invalidArgument } from "./errors.js";
import { encodeObject } from "./json.js";

/** The state of an operation (see the states of docs/spec.md). */
export type Status = "pending" | "in_progress" | "unknown" | "succeeded" | "failed_final" | "awaiting_approval";

/** The journal's record of one business intent. */
export interface Operation {
  operationKey: string;
  actionType: string;
  /** Lowercase hex SHA-256 of the canonical JSON of {"action", "payload"}. */
  requestHash: string;
  /** An in_progress operation whose lease expired reads as "unknown". */
  status: Status;
  /** Claims so far; the latest is the current attempt. */
  attemptCount: number;
  /** The provider's identifier of the effect, once confirmed ("" before). */
  externalId: string;
  /** The stored (sanitized) result, once succeeded; null if none (and in the "basic" view). */
  result: JsonObject | null;
  /** The last error code recorded by markUnknown or markFailedFinal. */
  errorCode: string;
  leaseUntil: Date | null;
  /** A person must decide; see reviewReason. */
  needsReview: boolean;
  reviewReason: string;
  createdAt: Date | null;
  updatedAt: Date | null;
  /** The worker holding (or last holding) the lease. */
  leaseOwner: string;
  /** A different external id reported by a later markSucceeded (a detected duplicate effect): the first of duplicateExternalIds. */
  duplicateExternalId: string;
  /**
   * The distinct other external ids reported by later markSucceeded calls
   * (detected duplicate effects), oldest first, at most
   * MAX_DUPLICATE_EXTERNAL_IDS.
   */
  duplicateExternalIds: string[];
  /** How many markSucceeded calls reported an external id other than the confirmed one (every report, also beyond those kept). */
  duplicateReports: number;
  /** When the current (or last) attempt was claimed (database clock); the policy's max_attempt_seconds counts from here. */
  attemptStartedAt: Date | null;
  /** When the first attempt was claimed (database clock); the policy's retry.provider_dedup_window counts from here. */
  firstAttemptAt: Date | null;
  /**
   * The business references given at registration ({ order_id: "817" };
   * empty for none): fixed at registration, searchable (listOperations refs).
   */
  refs: Record<string, string>;
  /** The key of the operation this one is a side effect of ("" for none), fixed at registration. */
  parentKey: string;
  /** The registered payload, null members removed, redact_fields blanked (null in the "basic" view). */
  payload: JsonObject | null;
  unknownSince: Date | null;
  checkCount: number;
  lastCheckedAt: Date | null;
  nextCheckAt: Date | null;
  /** The approval the action's policy asked for at registration (see Approval); null when none was needed. */
  approval: Approval | null;
}

/**
 * What the action's policy asked of an operation at registration: a
 * person's approval of this exact request (its requestHash), who may give
 * it, and the decisions so far. Recorded once: a later policy change does
 * not re-open a decided question.
 */
export interface Approval {
  /** A person had to approve before any attempt. */
  required: boolean;
  /** The roles that may decide ("operator", "admin"). */
  approvers: string[];
  /** The principal who registered it may not approve it. */
  distinctFromRequester: boolean;
  /** Two distinct principals must approve. */
  twoPerson: boolean;
  /** The principal who registered it ("" without authentication). */
  requestedBy: string;
  /** When the question times out (database clock); null for never. */
  deadline: Date | null;
  /** What happens then: "reject" (failed_final, "approval_timeout") or "escalate" (needs_review). */
  onTimeout: string;
  /** The approvals given so far, oldest first. */
  approvals: { principal: string; at: Date | null; reason: string }[];
  /** Why the policy asked: the `when` expression that held, or "required". */
  rule: string;
}

/**
 * How much of an operation an answer carries: "basic" is every field but
 * payload and result (they read as null), "full" is every field. Lookup
 * defaults to "full", listOperations to "basic", and so do the agent's
 * calls (register, claim, extendLease, markSucceeded, markUnknown,
 * markFailedFinal), whose caller sent the payload and result itself; but
 * the answers of register and claim keep the stored result in "basic", as
 * it is what a replay returns.
 */
export type OperationView = "basic" | "full";

/** One entry of an operation's history (listEvents), written in the same transaction as the change it records. */
export interface JournalEvent {
  /** Increases with every event of the journal (int64). */
  id: bigint;
  /** When it happened (database clock). */
  at: Date | null;
  /** The status before; null for the registration. */
  fromStatus: Status | null;
  /** The status after. */
  toStatus: Status;
  /** The attempt the event concerns (0 before the first claim). */
  attempt: number;
  /**
   * Who: with authentication, the authenticated principal (the token's
   * name); without it, the caller-stated actor, worker id or lease owner.
   */
  actor: string;
  /** Why, in words: "claimed", "lease extended", "marked unknown: timeout", … */
  reason: string;
  /** The external id involved, if any ("" otherwise). */
  externalId: string;
  /**
   * What the caller SAID it acts as (the actor or worker_id of the request),
   * not verified; "" when it said nothing. Under authentication the
   * verified identity is actor.
   */
  statedActor: string;
}

/** TLS settings for a journal served with --tls-cert/--tls-key. */
export interface JournalTlsOptions {
  /** PEM CA certificate(s) to trust instead of the system's (e.g. the server's own certificate). */
  ca?: string | Buffer | Array<string | Buffer> | undefined;
  /** Client certificate and key, if a proxy in front of the journal asks for one. */
  cert?: string | Buffer | undefined;
  key?: string | Buffer | undefined;
  /** The name the certificate must carry, if not the host of baseUrl. */
  servername?: string | undefined;
}

/** Options of new Journal(...). */
export interface JournalOptions {
  /**
   * The journal's gRPC listener: "http://127.0.0.1:9090", "https://journal.internal:9090"
   * (TLS), or "host:port".
   */
  baseUrl: string;
  /**
   * Bearer token for a journal that runs with --auth-file, sent as
   * "authorization: Bearer <token>" with every call. It decides the tenant
   * and the roles; keep it out of logs and source code.
   */
  token?: string | undefined;
  /** Deadline of each journal call in milliseconds (default 10 000; 0 for none). */
  timeoutMs?: number | undefined;
  /** Stored as the lease owner (1–200 visible ASCII characters); default "<hostname>-<pid>". */
  workerId?: string | undefined;
  /** Lease asked for on each claim; 0 or unset takes the action policy's lease_seconds. */
  leaseSeconds?: number | undefined;
  /** Use TLS (true, or settings); an "https://" baseUrl uses TLS as well. */
  tls?: boolean | JournalTlsOptions | undefined;
  /**
   * Allow sending the token without TLS to a host that is not a loopback
   * address. Off by default: a bearer token in clear text on the network
   * can be read by anyone on the path.
   */
  insecure?: boolean | undefined;
  /**
   * The trace context to send with every call, by hand: returns W3C trace
   * context headers ({ traceparent, tracestate?, baggage? }), called once
   * per call. Only those three names are sent, and only values of
   * printable ASCII (no newlines); anything else is dropped. When unset and
   * @opentelemetry/api is installed, the active OpenTelemetry context is
   * sent (propagation.inject); without it nothing is sent.
   */
  traceContext?: (() => Record<string, string>) | undefined;
}

/** Per-call options. */
export interface CallOptions {
  /** Ends the call early (the journal may or may not have applied it: CANCELED). */
  signal?: AbortSignal | undefined;
  /** Overrides the Journal's timeoutMs for this call. */
  timeoutMs?: number | undefined;
}

/** Options of lookup: per-call options, the view and the long poll. */
export interface LookupOptions extends CallOptions {
  /** How much of the operation to return (default "full"). */
  view?: OperationView | undefined;
  /**
   * A long poll (0–60 seconds; default 0): while the operation awaits
   * approval the journal holds the answer until it is decided or this
   * many seconds pass. The call's timeout grows by as much.
   */
  waitSeconds?: number | undefined;
}

/** Options of the agent's calls (register, claim, extendLease, the marks): per-call options and the answer's view. */
export interface AnswerOptions extends CallOptions {
  /**
   * How much of the operation the answer carries (default "basic": no
   * payload; no result either, but for the stored result in the answers
   * of register and claim, which a replay returns). "full" is every field.
   */
  view?: OperationView | undefined;
}

/** What register sends. */
export interface RegisterParams {
  key: string;
  action: string;
  /** The request parameters: anything that JSON-encodes as an object. */
  payload: unknown;
  /** Also claim the operation in the same round trip (true: this Journal's workerId and leaseSeconds). */
  claim?: boolean | ClaimParams | undefined;
  /**
   * Business references stored with the operation and searchable
   * (listOperations refs): { order_id: "817", customer: "c-93" }, at most
   * MAX_REFS, names of [a-z0-9_.-] starting with a letter or digit, short
   * values, nothing secret. Part of neither the key nor the request hash,
   * and fixed at registration: the same key and payload with other refs
   * fail with PAYLOAD_MISMATCH (field "refs").
   */
  refs?: Record<string, string> | undefined;
  /**
   * The key of the operation this one is a side effect of (see childKey);
   * fixed at registration like refs (another one: PAYLOAD_MISMATCH, field
   * "parent_key").
   */
  parentKey?: string | undefined;
}

/** Who claims, and for how long. */
export interface ClaimParams {
  workerId?: string | undefined;
  leaseSeconds?: number | undefined;
}

/** The answer of register. */
export interface RegisterResult {
  operation: Operation;
  /** True when this call inserted the operation. */
  created: boolean;
  /** With claim: true when this caller now holds the lease. */
  claimed: boolean;
  /** With claim and claimed: the fencing token to pass to the mark calls. */
  attempt: number;
  /** With claim and claimed: when the lease ends (database clock). */
  leaseUntil: Date | null;
  /** With claim, not claimed, and another worker's lease live: seconds until it ends. */
  retryAfterSeconds: number;
  /**
   * What the caller does next: the journal's decision, and the only thing
   * execute acts on (NextStep.CALL_PROVIDER, REPLAY, WAIT,
   * VERIFICATION_REQUIRED, FAILED_FINAL, CLAIM). A value newer than this
   * client is passed through as its number.
   */
  next: NextStep;
  /**
   * With claim and claimed: the lease granted, in seconds. It runs from
   * when the request was SENT, measured on the caller's monotonic clock
   * (never from leaseUntil, which is on the database's clock).
   */
  leaseSeconds: number;
}

/** The answer of claim. */
export interface ClaimResult {
  operation: Operation;
  /** True when this caller now holds the lease. */
  claimed: boolean;
  /** When claimed: the fencing token to pass to the mark calls. */
  attempt: number;
  /** When claimed: when the lease ends (database clock). */
  leaseUntil: Date | null;
  /** When not claimed because another worker's lease is live: seconds until it ends. */
  retryAfterSeconds: number;
  /** What the caller does next (see RegisterResult.next). */
  next: NextStep;
  /** When claimed: the lease granted, in seconds (see RegisterResult.leaseSeconds). */
  leaseSeconds: number;
}

/** The answer of extendLease. */
export interface ExtendLeaseResult {
  operation: Operation;
  /**
   * The lease granted from now, in whole seconds rounded down: less than
   * asked when the attempt nears the policy's max_attempt_seconds.
   */
  leaseSeconds: number;
  /** When the lease now ends (database clock). */
  leaseUntil: Date | null;
}

/** The policy the journal enforces (getPolicy). */
export interface PolicyInfo {
  /**
   * Lowercase hex SHA-256 of the policy's canonical form (its effective
   * settings, whatever the file's formatting): equal fingerprints mean
   * equal policies.
   */
  fingerprint: string;
  /** The policy file as the server loaded it (YAML, without secrets). */
  source: string;
}

/** One page of paging: how many, and where to continue. */
export interface PageParams {
  /** At most this many (default DEFAULT_PAGE_SIZE, at most MAX_PAGE_SIZE). */
  pageSize?: number | undefined;
  /** A previous page's nextPageToken. */
  pageToken?: string | undefined;
}

/** One page of an operation's history, oldest first. */
export interface EventPage {
  events: JournalEvent[];
  /** Pass as pageToken for the next page; "" on the last page. */
  nextPageToken: string;
}

/** What listOperations filters on, and its paging. */
export interface ListOperationsParams extends PageParams {
  /** Only these (effective) statuses: an expired lease is "unknown"; empty or unset means all. */
  statuses?: Status[] | undefined;
  /** If set, only operations whose needsReview equals it. */
  needsReview?: boolean | undefined;
  /** If set, only this action. */
  action?: string | undefined;
  /** Only operations due for a reconciliation check. */
  dueForCheck?: boolean | undefined;
  /** Only operations with ALL of these business references. */
  refs?: Record<string, string> | undefined;
  /** Only the children of this operation (those registered with this parentKey). */
  parentKey?: string | undefined;
  /** How much of each operation (default "basic": no payload, no result). */
  view?: OperationView | undefined;
}

/** One page of operations, in key order. */
export interface OperationPage {
  operations: Operation[];
  /** Pass as pageToken for the next page; "" on the last page. */
  nextPageToken: string;
}

/** What markSucceeded sends. */
export interface MarkSucceededParams {
  key: string;
  /** The attempt that observed the effect (current or stale). */
  attempt: number;
  /** The provider's identifier of the effect (≤ 200 characters). */
  externalId: string;
  /** A sanitized result returned on every replay: anything that JSON-encodes as an object. */
  result?: unknown;
  /** Who reports the effect (default: the lease owner). */
  actor?: string | undefined;
}

/** What markUnknown and markFailedFinal send. */
export interface MarkParams {
  key: string;
  /** The current attempt (fencing token). */
  attempt: number;
  /** What was observed ("timeout", "card_declined"; ≤ 100 characters, no secrets). */
  errorCode: string;
}

const DEFAULT_TIMEOUT_MS = 10_000;

/**
 * A client of the opjournal JournalService. One Journal keeps one HTTP/2
 * connection; it is safe for concurrent use. close() releases it.
 *
 *     const journal = new Journal({ baseUrl: "http://127.0.0.1:9090" });
 *     const r = await journal.register({ key, action: "create_payment", payload, claim: true });
 */
export class Journal {
  /** The worker id sent with claims. */
  readonly workerId: string;
  /** The lease asked for on claims (0: the policy's). */
  readonly leaseSeconds: number;
  /** The deadline of each call in milliseconds (0: none). */
  readonly timeoutMs: number;
  /**
   * The generated Connect client (with the token and trace context interceptors), for the
   * RPCs this class does not wrap (ReleaseForRetry, RecordCheck, Escalate, Resolve).
   */
  readonly rpc: Client<typeof JournalService>;
  private readonly sessions: Http2SessionManager;

  constructor(options: JournalOptions) {
    const url = baseUrlOf(options);
    if (options.token !== undefined) {
      if (options.token === "" || /[\s\x00-\x1f\x7f]/.test(options.token)) {
        throw invalidArgument("token", "must be a non-empty token without spaces or control characters");
      }
      if (url.protocol !== "https:" && !options.insecure && !isLoopback(url.hostname)) {
        throw invalidArgument("token",
          `would be sent in clear text to ${url.host}; use TLS (an https:// baseUrl or tls: true), ` +
          "or set insecure: true if the network path is trusted");
      }
    }
    this.workerId = options.workerId ?? defaultWorkerId();
    this.leaseSeconds = options.leaseSeconds ?? 0;
    const tls = typeof options.tls === "object" ? options.tls : undefined;
    const nodeOptions: SecureClientSessionOptions = {};
    if (tls?.ca !== undefined) nodeOptions.ca = tls.ca;
    if (tls?.cert !== undefined) nodeOptions.cert = tls.cert;
    if (tls?.key !== undefined) nodeOptions.key = tls.key;
    if (tls?.servername !== undefined) nodeOptions.servername = tls.servername;
    this.sessions = new Http2SessionManager(url, { idleConnectionTimeoutMs: 60_000 }, nodeOptions);
    const interceptors: Interceptor[] = [];
    if (options.token !== undefined) interceptors.push(bearer(options.token));
    interceptors.push(traceHeaders(options.traceContext));
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.timeoutMs = timeoutMs;
    const transport = createGrpcTransport({
      baseUrl: url.origin + url.pathname.replace(/\/+$/, ""),
      sessionManager: this.sessions,
      interceptors,
      ...(timeoutMs > 0 ? { defaultTimeoutMs: timeoutMs } : {}),
    });
    this.rpc = createClient(JournalService, transport);
  }

  /**
   * Registers an operation before its external call. A new key is inserted
   * as pending (created); the same key with the same request hash returns
   * the existing record, with the stored result when terminal; the same key
   * with another payload fails with PAYLOAD_MISMATCH and changes nothing.
   * With claim, the operation is also claimed in the same round trip.
   * refs and parentKey are fixed at registration: other ones for the same
   * key fail with PAYLOAD_MISMATCH (field "refs" or "parent_key").
   */
  async register(params: RegisterParams, options?: AnswerOptions): Promise<RegisterResult> {
    const payload = encodeObject("payload", params.payload);
    const refs = checkRefs(params.refs);
    const parentKey = checkParentKey(params.parentKey);
    const claim = params.claim === true ? {} : params.claim || undefined;
    try {
      const resp = await this.rpc.register({
        operationKey: params.key,
        actionType: params.action,
        payload,
        refs,
        parentKey,
        ...(claim ? {
          claim: {
            workerId: claim.workerId ?? this.workerId,
            leaseSeconds: claim.leaseSeconds ?? this.leaseSeconds,
          },
        } : {}),
        view: answerViewOf(options),
      }, callOptions(options));
      return registerResultOf(resp);
    } catch (e) {
      throw journalError("register", params.key, e, options?.signal);
    }
  }

  /**
   * Takes a lease so the caller may call the provider: from pending always;
   * from unknown or an expired lease only for retry_same_key actions. A lost
   * race is not an error: claimed is false, with the current state.
   */
  async claim(key: string, params: ClaimParams = {}, options?: AnswerOptions): Promise<ClaimResult> {
    try {
      const resp = await this.rpc.claim({
        operationKey: key,
        workerId: params.workerId ?? this.workerId,
        leaseSeconds: params.leaseSeconds ?? this.leaseSeconds,
        view: answerViewOf(options),
      }, callOptions(options));
      return claimResultOf(resp);
    } catch (e) {
      throw journalError("claim", key, e, options?.signal);
    }
  }

  /**
   * A heartbeat: keeps the caller's live lease alive while a long provider
   * call runs. Only the current holder may (matching attempt, in progress,
   * lease not yet expired on the database clock): anyone else gets
   * STALE_ATTEMPT, and once the policy's max_attempt_seconds is reached it
   * is INVALID_STATE. An expired lease is never revived. The new lease ends
   * leaseSeconds from now (0, the default: the policy's lease_seconds; more
   * is INVALID_ARGUMENT), never later than max_attempt_seconds after the
   * claim. execute calls it for you.
   */
  async extendLease(key: string, attempt: number, leaseSeconds = 0, options?: AnswerOptions): Promise<ExtendLeaseResult> {
    try {
      const resp = await this.rpc.extendLease({ operationKey: key, attempt, leaseSeconds, view: answerViewOf(options) }, callOptions(options));
      return {
        operation: operationOf(resp.operation),
        leaseSeconds: resp.leaseSeconds,
        leaseUntil: dateOf(resp.leaseUntil),
      };
    } catch (e) {
      throw journalError("extend lease", key, e, options?.signal);
    }
  }

  /**
   * Records a confirmed effect; accepted from a stale attempt too. The same
   * externalId again is a no-op; a different one is kept as
   * duplicateExternalId and sets needsReview. The answer ("basic" by
   * default) carries neither payload nor result; "full" returns the stored
   * result (redacted by the policy; after a duplicate effect, the first
   * one's) and the payload.
   */
  async markSucceeded(params: MarkSucceededParams, options?: AnswerOptions): Promise<Operation> {
    const result = params.result === undefined || params.result === null
      ? undefined : encodeObject("result", params.result);
    try {
      const resp = await this.rpc.markSucceeded({
        operationKey: params.key,
        attempt: params.attempt,
        externalId: params.externalId,
        ...(result ? { result } : {}),
        actor: params.actor ?? "",
        view: answerViewOf(options),
      }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("mark succeeded", params.key, e, options?.signal);
    }
  }

  /**
   * Records that the attempt ended without a definite answer. Only the
   * current lease holder may: anyone else gets STALE_ATTEMPT.
   */
  async markUnknown(params: MarkParams, options?: AnswerOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.markUnknown({
        operationKey: params.key, attempt: params.attempt, errorCode: params.errorCode, view: answerViewOf(options),
      }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("mark unknown", params.key, e, options?.signal);
    }
  }

  /**
   * Records a confirmed rejection (no effect, no automatic retry). Only the
   * current lease holder may: anyone else gets STALE_ATTEMPT.
   */
  async markFailedFinal(params: MarkParams, options?: AnswerOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.markFailedFinal({
        operationKey: params.key, attempt: params.attempt, errorCode: params.errorCode, view: answerViewOf(options),
      }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("mark failed_final", params.key, e, options?.signal);
    }
  }

  /**
   * Returns the journal's record of an operation (view "full" by default;
   * "basic" leaves out payload and result); an unknown key is NOT_FOUND.
   */
  async lookup(key: string, options?: LookupOptions): Promise<Operation> {
    const waitSeconds = options?.waitSeconds ?? 0;
    if (!Number.isInteger(waitSeconds) || waitSeconds < 0 || waitSeconds > 60) {
      throw invalidArgument("wait_seconds", "must be a whole number of seconds, 0–60", `opjournal: lookup ${JSON.stringify(key)}: `);
    }
    const call = callOptions(options);
    if (waitSeconds > 0 && call.timeoutMs === undefined && this.timeoutMs > 0) call.timeoutMs = this.timeoutMs + waitSeconds * 1000;
    try {
      const resp = await this.rpc.lookup({ operationKey: key, view: viewOf(options?.view), waitSeconds }, call);
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("lookup", key, e, options?.signal);
    }
  }

  /**
   * One page of operations in key order, filtered by status (effective:
   * an expired lease is "unknown"), review flag, action, "due for a
   * check", business references (all of the given refs must match) or
   * parent (the children of parentKey). The view defaults to "basic" (no
   * payload, no result). A page is also cut before it would exceed 1 MiB;
   * nextPageToken continues it.
   */
  async listOperations(params: ListOperationsParams = {}, options?: CallOptions): Promise<OperationPage> {
    const refs = checkRefs(params.refs);
    const parentKey = checkParentKey(params.parentKey);
    try {
      const resp = await this.rpc.listOperations({
        statuses: (params.statuses ?? []).map(pbStatusOf),
        ...(params.needsReview !== undefined ? { needsReview: params.needsReview } : {}),
        actionType: params.action ?? "",
        dueForCheck: params.dueForCheck ?? false,
        refs,
        parentKey,
        pageSize: params.pageSize ?? 0,
        pageToken: params.pageToken ?? "",
        view: viewOf(params.view),
      }, callOptions(options));
      return { operations: resp.operations.map(operationOf), nextPageToken: resp.nextPageToken };
    } catch (e) {
      throw journalError("list operations", "", e, options?.signal);
    }
  }

  /**
   * One page of an operation's history, oldest first; pass nextPageToken
   * back as pageToken for the next page ("" on the last one).
   */
  async listEvents(key: string, page: PageParams = {}, options?: CallOptions): Promise<EventPage> {
    try {
      const resp = await this.rpc.listEvents({
        operationKey: key, pageSize: page.pageSize ?? 0, pageToken: page.pageToken ?? "",
      }, callOptions(options));
      return { events: resp.events.map(eventOf), nextPageToken: resp.nextPageToken };
    } catch (e) {
      throw journalError("list events", key, e, options?.signal);
    }
  }

  /**
   * The whole history of an operation, oldest first: listEvents page after
   * page until the last (each call has its own deadline).
   */
  async listAllEvents(key: string, options?: CallOptions & { pageSize?: number | undefined }): Promise<JournalEvent[]> {
    const all: JournalEvent[] = [];
    let pageToken = "";
    do {
      const page = await this.listEvents(key, { pageSize: options?.pageSize, pageToken }, options);
      all.push(...page.events);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return all;
  }

  /**
   * An operator's decision on a TERMINAL operation under review (for
   * example a detected duplicate effect): clears needsReview and records
   * the reason (required, ≤ MAX_REASON_LEN bytes, no secrets). The status
   * never changes. actor names who decided: optional under authentication
   * (the principal is the actor), required without it.
   */
  async acknowledge(key: string, reason: string, actor?: string, options?: CallOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.acknowledge({ operationKey: key, reason, actor: actor ?? "" }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("acknowledge", key, e, options?.signal);
    }
  }

  /**
   * A person's approval of an operation awaiting approval, bound to the
   * request they saw (requestHash: Operation.requestHash; another one fails
   * with PAYLOAD_MISMATCH, so a changed request is never approved by an
   * answer to the old one). The approver is this Journal's credential, never
   * a name the caller states; reason (required, no secrets) goes to the
   * history. Returns the record after the decision.
   */
  async approve(key: string, requestHash: string, reason: string, options?: CallOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.approve({ operationKey: key, requestHash, reason }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("approve", key, e, options?.signal);
    }
  }

  /**
   * A person's refusal of an operation awaiting approval, bound like
   * approve to requestHash: the operation becomes failed_final with
   * errorCode "approval_rejected" and every later call replays that refusal.
   */
  async reject(key: string, requestHash: string, reason: string, options?: CallOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.reject({ operationKey: key, requestHash, reason }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("reject", key, e, options?.signal);
    }
  }

  /** The policy this journal enforces: its fingerprint and its source, to check that a reconciler works from the same one. */
  async getPolicy(options?: CallOptions): Promise<PolicyInfo> {
    try {
      const resp = await this.rpc.getPolicy({}, callOptions(options));
      return { fingerprint: resp.fingerprint, source: resp.source };
    } catch (e) {
      throw journalError("get policy", "", e, options?.signal);
    }
  }

  /** Closes the connection (calls in flight fail). A later call opens a new one. */
  close(): void {
    this.sessions.abort();
  }
}

function callOptions(options: CallOptions | undefined): { signal?: AbortSignal; timeoutMs?: number } {
  const o: { signal?: AbortSignal; timeoutMs?: number } = {};
  if (options?.signal) o.signal = options.signal;
  if (options?.timeoutMs !== undefined) o.timeoutMs = options.timeoutMs;
  return o;
}

function bearer(token: string): Interceptor {
  const value = `Bearer ${token}`;
  return (next) => async (req) => {
    req.header.set("authorization", value);
    return next(req);
  };
}

/** The W3C trace context headers the journal reads (the only ones sent). */
const TRACE_HEADERS: ReadonlySet<string> = new Set(["traceparent", "tracestate", "baggage"]);

/** What the trace interceptor uses of @opentelemetry/api (kept out of the declarations: it is optional). */
interface OtelApi {
  context: { active(): unknown };
  propagation: { inject(context: unknown, carrier: Record<string, string>): void };
}

/** @opentelemetry/api once loaded: undefined before, null when it is not installed. */
let otelApi: OtelApi | null | undefined;
let otelLoading: Promise<OtelApi | null> | undefined;

/** Loads @opentelemetry/api once (a missing or broken one is null: no tracing, no error). */
function loadOtel(): Promise<OtelApi | null> {
  otelLoading ??= import("@opentelemetry/api").then(
    (m) => (otelApi = (m.propagation && m.context ? m : null) as OtelApi | null),
    () => (otelApi = null),
  );
  return otelLoading;
}

/**
 * Sets the caller's trace context on each request: the traceContext hook's
 * headers when given, else the active OpenTelemetry context if
 * @opentelemetry/api is installed. A failing hook or propagator sends no
 * trace headers; it never fails the journal call.
 */
function traceHeaders(hook: (() => Record<string, string>) | undefined): Interceptor {
  return (next) => async (req) => {
    let carrier: Record<string, string> | undefined;
    try {
      if (hook) {
        carrier = hook();
      } else {
        // The caller's async context is kept across the await (AsyncLocalStorage).
        const api = otelApi === undefined ? await loadOtel() : otelApi;
        if (api) {
          carrier = {};
          api.propagation.inject(api.context.active(), carrier);
        }
      }
    } catch {
      carrier = undefined;
    }
    for (const [name, value] of traceEntries(carrier)) req.header.set(name, value);
    return next(req);
  };
}

/** The entries of a carrier that may be sent: the three W3C names (any case), printable ASCII values. */
export function traceEntries(carrier: unknown): Array<[string, string]> {
  if (carrier === null || typeof carrier !== "object") return [];
  const out: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(carrier)) {
    const name = k.toLowerCase();
    if (TRACE_HEADERS.has(name) && typeof v === "string" && v !== "" && /^[\x20-\x7e]+$/.test(v)) out.push([name, v]);
  }
  return out;
}

function baseUrlOf(options: JournalOptions): URL {
  let raw = options.baseUrl;
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(raw)) raw = "http://" + raw;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalidArgument("baseUrl", `${JSON.stringify(options.baseUrl)} is not a URL (http://host:port or https://host:port)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw invalidArgument("baseUrl", `has the scheme ${url.protocol}; use http:// or https://`);
  }
  if (options.tls && url.protocol === "http:") url = new URL("https://" + raw.slice(raw.indexOf("://") + 3));
  return url;
}

function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "");
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  return h === "::1";
}

/** "<hostname>-<pid>", reduced to what the journal accepts (visible ASCII, ≤ 200 characters). */
export function defaultWorkerId(): string {
  let host = "worker";
  try {
    host = hostname() || "worker";
  } catch {
    // keep "worker"
  }
  const id = `${host}-${process.pid}`.replace(/[^\x21-\x7e]/g, "_");
  return id.length > 200 ? id.slice(id.length - 200) : id;
}

/** The status name of the journal's enum; an unspecified status reads as "unknown", the safe reading. */
export function statusName(s: PbStatus): Status {
  switch (s) {
    case PbStatus.PENDING:
      return "pending";
    case PbStatus.IN_PROGRESS:
      return "in_progress";
    case PbStatus.SUCCEEDED:
      return "succeeded";
    case PbStatus.FAILED_FINAL:
      return "failed_final";
    case PbStatus.AWAITING_APPROVAL:
      return "awaiting_approval";
    default:
      return "unknown";
  }
}

/** The journal's enum value of a status name. */
function pbStatusOf(s: Status): PbStatus {
  switch (s) {
    case "pending":
      return PbStatus.PENDING;
    case "in_progress":
      return PbStatus.IN_PROGRESS;
    case "unknown":
      return PbStatus.UNKNOWN;
    case "succeeded":
      return PbStatus.SUCCEEDED;
    case "failed_final":
      return PbStatus.FAILED_FINAL;
    case "awaiting_approval":
      return PbStatus.AWAITING_APPROVAL;
    default:
      throw invalidArgument("statuses",
        `${JSON.stringify(s)} is not a status (pending, in_progress, unknown, succeeded, failed_final, awaiting_approval)`);
  }
}

/** The view of an agent's call: "basic" unless asked otherwise, whatever the server's default. */
function answerViewOf(options: AnswerOptions | undefined): PbOperationView {
  return viewOf(options?.view ?? "basic");
}

function viewOf(v: OperationView | undefined): PbOperationView {
  switch (v) {
    case undefined:
      return PbOperationView.UNSPECIFIED;
    case "basic":
      return PbOperationView.BASIC;
    case "full":
      return PbOperationView.FULL;
    default:
      throw invalidArgument("view", `${JSON.stringify(v)} is not a view ("basic" or "full")`);
  }
}

/**
 * Checks the types of business references (an object of string values, or
 * undefined for none) and returns a copy. It refuses (INVALID_ARGUMENT,
 * "refs", or "refs/<name>" for a value, never quoting one) only what the
 * wire would carry changed or not at all: a value that is not a string, a
 * lone surrogate (UTF-8 encoding would replace it). The rest (how many,
 * which names, how long) is the journal's to judge.
 */
export function checkRefs(refs: unknown, prefix?: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (refs === undefined || refs === null) return out;
  if (typeof refs !== "object" || Array.isArray(refs) || refs instanceof Map) {
    throw invalidArgument("refs", "must be an object of string values ({ order_id: \"817\" })", prefix);
  }
  for (const [name, value] of Object.entries(refs)) {
    if (LONE_SURROGATE.test(name)) throw invalidArgument("refs", "has a name that is not well-formed Unicode (a lone surrogate)", prefix);
    // A plain object cannot carry this name (assigning it sets the prototype), so it would vanish on the way.
    if (name === "__proto__") throw invalidArgument("refs", "has the name __proto__, which is not a ref name", prefix);
    if (typeof value !== "string") throw invalidArgument(`refs/${name}`, `is a ${value === null ? "null" : typeof value}; ref values are strings`, prefix);
    if (LONE_SURROGATE.test(value)) throw invalidArgument(`refs/${name}`, "is not well-formed Unicode (a lone surrogate)", prefix);
    out[name] = value;
  }
  return out;
}

/** Checks that an optional parentKey is a string ("" or undefined for none); the journal judges its content. */
export function checkParentKey(parentKey: unknown, prefix?: string): string {
  if (parentKey === undefined || parentKey === null) return "";
  if (typeof parentKey !== "string") throw invalidArgument("parent_key", `must be a string; got ${typeof parentKey}`, prefix);
  return parentKey;
}

const LONE_SURROGATE = /\p{Cs}/u;

function dateOf(ts: Timestamp | undefined): Date | null {
  return ts ? timestampDate(ts) : null;
}

/** Converts the generated Operation message into a plain object. */
export function operationOf(op: PbOperation | undefined): Operation {
  if (!op) throw new OpjournalError("INTERNAL", "the journal's answer has no operation record");
  return {
    operationKey: op.operationKey,
    actionType: op.actionType,
    requestHash: op.requestHash,
    status: statusName(op.status),
    attemptCount: op.attemptCount,
    externalId: op.externalId,
    result: op.result ?? null,
    errorCode: op.errorCode,
    leaseUntil: dateOf(op.leaseUntil),
    needsReview: op.needsReview,
    reviewReason: op.reviewReason,
    createdAt: dateOf(op.createdAt),
    updatedAt: dateOf(op.updatedAt),
    leaseOwner: op.leaseOwner,
    duplicateExternalId: op.duplicateExternalId,
    duplicateExternalIds: [...op.duplicateExternalIds],
    duplicateReports: op.duplicateReports,
    attemptStartedAt: dateOf(op.attemptStartedAt),
    firstAttemptAt: dateOf(op.firstAttemptAt),
    refs: { ...op.refs },
    parentKey: op.parentKey,
    payload: op.payload ?? null,
    unknownSince: dateOf(op.unknownSince),
    checkCount: op.checkCount,
    lastCheckedAt: dateOf(op.lastCheckedAt),
    nextCheckAt: dateOf(op.nextCheckAt),
    approval: op.approval ? {
      required: op.approval.required,
      approvers: [...op.approval.approvers],
      distinctFromRequester: op.approval.distinctFromRequester,
      twoPerson: op.approval.twoPerson,
      requestedBy: op.approval.requestedBy,
      deadline: dateOf(op.approval.deadline),
      onTimeout: op.approval.onTimeout,
      approvals: op.approval.approvals.map((d) => ({ principal: d.principal, at: dateOf(d.at), reason: d.reason })),
      rule: op.approval.rule,
    } : null,
  };
}

/** Converts the generated Event message into a plain object. */
export function eventOf(ev: PbEvent): JournalEvent {
  return {
    id: ev.id,
    at: dateOf(ev.at),
    fromStatus: ev.fromStatus === PbStatus.UNSPECIFIED ? null : statusName(ev.fromStatus),
    toStatus: statusName(ev.toStatus),
    attempt: ev.attempt,
    actor: ev.actor,
    reason: ev.reason,
    externalId: ev.externalId,
    statedActor: ev.statedActor,
  };
}

/** Converts the generated RegisterResponse into a RegisterResult (as register returns it). */
export function registerResultOf(resp: PbRegisterResponse): RegisterResult {
  return {
    operation: operationOf(resp.operation),
    created: resp.created,
    claimed: resp.claimed,
    attempt: resp.attempt,
    leaseUntil: dateOf(resp.leaseUntil),
    retryAfterSeconds: resp.retryAfterSeconds,
    next: resp.next,
    leaseSeconds: resp.leaseSeconds,
  };
}

/** Converts the generated ClaimResponse into a ClaimResult (as claim returns it). */
export function claimResultOf(resp: PbClaimResponse): ClaimResult {
  return {
    operation: operationOf(resp.operation),
    claimed: resp.claimed,
    attempt: resp.attempt,
    leaseUntil: dateOf(resp.leaseUntil),
    retryAfterSeconds: resp.retryAfterSeconds,
    next: resp.next,
    leaseSeconds: resp.leaseSeconds,
  };
}
