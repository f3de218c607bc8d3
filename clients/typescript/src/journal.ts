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
  Status as PbStatus,
  type Operation as PbOperation,
} from "./gen/opjournal/v1/journal_pb.js";
import { journalError, OpjournalError, invalidArgument } from "./errors.js";
import { encodeObject } from "./json.js";

/** The state of an operation (see the SPEC's state table). */
export type Status = "pending" | "in_progress" | "unknown" | "succeeded" | "failed_final";

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
  /** The stored (sanitized) result, once succeeded; null if none. */
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
  /** A different external id reported by a later markSucceeded (a detected duplicate effect). */
  duplicateExternalId: string;
  /** The registered payload, null members removed, redact_fields blanked. */
  payload: JsonObject | null;
  unknownSince: Date | null;
  checkCount: number;
  lastCheckedAt: Date | null;
  nextCheckAt: Date | null;
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
}

/** Per-call options. */
export interface CallOptions {
  /** Ends the call early (the journal may or may not have applied it: CANCELED). */
  signal?: AbortSignal | undefined;
  /** Overrides the Journal's timeoutMs for this call. */
  timeoutMs?: number | undefined;
}

/** What register sends. */
export interface RegisterParams {
  key: string;
  action: string;
  /** The request parameters: anything that JSON-encodes as an object. */
  payload: unknown;
  /** Also claim the operation in the same round trip (true: this Journal's workerId and leaseSeconds). */
  claim?: boolean | ClaimParams | undefined;
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
}

/** The answer of claim. */
export interface ClaimResult {
  operation: Operation;
  claimed: boolean;
  attempt: number;
  leaseUntil: Date | null;
  retryAfterSeconds: number;
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
  /**
   * The generated Connect client (with the token interceptor), for the
   * RPCs this class does not wrap (ListOperations, ListEvents, …).
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
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
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
   */
  async register(params: RegisterParams, options?: CallOptions): Promise<RegisterResult> {
    const payload = encodeObject("payload", params.payload);
    const claim = params.claim === true ? {} : params.claim || undefined;
    try {
      const resp = await this.rpc.register({
        operationKey: params.key,
        actionType: params.action,
        payload,
        ...(claim ? {
          claim: {
            workerId: claim.workerId ?? this.workerId,
            leaseSeconds: claim.leaseSeconds ?? this.leaseSeconds,
          },
        } : {}),
      }, callOptions(options));
      return {
        operation: operationOf(resp.operation),
        created: resp.created,
        claimed: resp.claimed,
        attempt: resp.attempt,
        leaseUntil: dateOf(resp.leaseUntil),
        retryAfterSeconds: resp.retryAfterSeconds,
      };
    } catch (e) {
      throw journalError("register", params.key, e, options?.signal);
    }
  }

  /**
   * Takes a lease so the caller may call the provider: from pending always;
   * from unknown or an expired lease only for retry_same_key actions. A lost
   * race is not an error: claimed is false, with the current state.
   */
  async claim(key: string, params: ClaimParams = {}, options?: CallOptions): Promise<ClaimResult> {
    try {
      const resp = await this.rpc.claim({
        operationKey: key,
        workerId: params.workerId ?? this.workerId,
        leaseSeconds: params.leaseSeconds ?? this.leaseSeconds,
      }, callOptions(options));
      return {
        operation: operationOf(resp.operation),
        claimed: resp.claimed,
        attempt: resp.attempt,
        leaseUntil: dateOf(resp.leaseUntil),
        retryAfterSeconds: resp.retryAfterSeconds,
      };
    } catch (e) {
      throw journalError("claim", key, e, options?.signal);
    }
  }

  /**
   * Records a confirmed effect; accepted from a stale attempt too. The same
   * externalId again is a no-op; a different one is kept as
   * duplicateExternalId and sets needsReview.
   */
  async markSucceeded(params: MarkSucceededParams, options?: CallOptions): Promise<Operation> {
    const result = params.result === undefined || params.result === null
      ? undefined : encodeObject("result", params.result);
    try {
      const resp = await this.rpc.markSucceeded({
        operationKey: params.key,
        attempt: params.attempt,
        externalId: params.externalId,
        ...(result ? { result } : {}),
        actor: params.actor ?? "",
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
  async markUnknown(params: MarkParams, options?: CallOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.markUnknown({
        operationKey: params.key, attempt: params.attempt, errorCode: params.errorCode,
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
  async markFailedFinal(params: MarkParams, options?: CallOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.markFailedFinal({
        operationKey: params.key, attempt: params.attempt, errorCode: params.errorCode,
      }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("mark failed_final", params.key, e, options?.signal);
    }
  }

  /** Returns the journal's record of an operation; an unknown key is NOT_FOUND. */
  async lookup(key: string, options?: CallOptions): Promise<Operation> {
    try {
      const resp = await this.rpc.lookup({ operationKey: key }, callOptions(options));
      return operationOf(resp.operation);
    } catch (e) {
      throw journalError("lookup", key, e, options?.signal);
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
    default:
      return "unknown";
  }
}

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
    payload: op.payload ?? null,
    unknownSince: dateOf(op.unknownSince),
    checkCount: op.checkCount,
    lastCheckedAt: dateOf(op.lastCheckedAt),
    nextCheckAt: dateOf(op.nextCheckAt),
  };
}
