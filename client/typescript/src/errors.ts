// Errors of the opjournal client: the journal's refusals (OpjournalError),
// the provider's confirmed rejections (Rejected), observations that leave an
// outcome unknown (UnknownOutcomeError, HttpStatusError) and an outcome the
// journal could not record (NotRecordedError).

import { Code, ConnectError } from "@connectrpc/connect";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/**
 * The journal's error codes (the `reason` of the google.rpc.ErrorInfo that
 * every refusal carries, domain "opjournal"), plus CANCELED: the call was
 * ended by the caller's AbortSignal, so the journal may or may not have
 * applied it.
 */
export type ErrorCode =
  | "INVALID_ARGUMENT"
  | "UNKNOWN_ACTION"
  | "TOO_LARGE"
  | "PAYLOAD_MISMATCH"
  | "STALE_ATTEMPT"
  | "INVALID_STATE"
  | "NOT_FOUND"
  | "UNAUTHENTICATED"
  | "PERMISSION_DENIED"
  | "RATE_LIMITED"
  | "BUDGET_EXCEEDED"
  | "UNAVAILABLE"
  | "INTERNAL"
  | "CANCELED";

/** The ErrorInfo domain of opjournal's errors. */
export const ERROR_DOMAIN = "opjournal";

/**
 * An error of a journal call, or a request the client refused to send.
 * `code` is the journal's reason (PAYLOAD_MISMATCH, STALE_ATTEMPT, …),
 * `field` names the offending request field ("payload/amount_minor") when
 * there is one. Messages never contain the bearer token.
 */
export class OpjournalError extends Error {
  override name = "OpjournalError";
  /** The journal's error code; a code newer than this client is passed through as is. */
  readonly code: ErrorCode | (string & {});
  /** The request field at fault ("payload/amount_minor"), or "". */
  readonly field: string;
  /** The journal's message, without the field prefix. */
  readonly detail: string;
  /** The gRPC status code of the answer (undefined for a client-side refusal). */
  readonly grpcCode: Code | undefined;
  /**
   * What the refusal says beyond its field, all strings: the metadata of
   * its ErrorInfo without "field" (BUDGET_EXCEEDED: budget, action, limit,
   * used, window_seconds, retry_after_seconds). Empty when it has none.
   */
  readonly details: Readonly<Record<string, string>>;
  /**
   * The journal's hint of when the same request may succeed, in
   * milliseconds (its google.rpc.RetryInfo); 0 when it gave none.
   */
  readonly retryAfterMs: number;

  constructor(
    code: ErrorCode | (string & {}),
    detail: string,
    options: {
      field?: string; prefix?: string; grpcCode?: Code; cause?: unknown;
      details?: Record<string, string>; retryAfterMs?: number;
    } = {},
  ) {
    const field = options.field ?? "";
    super(`${options.prefix ?? "opjournal: "}${code}: ${field ? field + ": " : ""}${detail}`,
      options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.field = field;
    this.detail = detail;
    this.grpcCode = options.grpcCode;
    this.details = options.details ?? {};
    this.retryAfterMs = options.retryAfterMs ?? 0;
  }
}

/** A client-side INVALID_ARGUMENT naming the field. */
export function invalidArgument(field: string, detail: string, prefix?: string): OpjournalError {
  return new OpjournalError("INVALID_ARGUMENT", detail, prefix === undefined ? { field } : { field, prefix });
}

/** A decoded google.rpc.ErrorInfo. */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

/**
 * Decodes the bytes of a google.rpc.ErrorInfo: field 1 reason (string),
 * 2 domain (string), 3 metadata (map<string, string>, entries with key 1 and
 * value 2). Unknown fields are skipped. Throws on malformed input.
 */
export function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const info: ErrorInfo = { reason: "", domain: "", metadata: {} };
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      info.reason = r.string();
    } else if (no === 2 && wt === WireType.LengthDelimited) {
      info.domain = r.string();
    } else if (no === 3 && wt === WireType.LengthDelimited) {
      const e = new BinaryReader(r.bytes());
      let key = "";
      let value = "";
      while (e.pos < e.len) {
        const [eno, ewt] = e.tag();
        if (eno === 1 && ewt === WireType.LengthDelimited) key = e.string();
        else if (eno === 2 && ewt === WireType.LengthDelimited) value = e.string();
        else e.skip(ewt, eno);
      }
      info.metadata[key] = value;
    } else {
      r.skip(wt, no);
    }
  }
  return info;
}

/** The opjournal ErrorInfo among a ConnectError's details, if any. */
export function findErrorInfo(err: ConnectError): ErrorInfo | undefined {
  for (const d of err.details) {
    if (!("type" in d) || d.type !== "google.rpc.ErrorInfo") continue;
    try {
      const info = decodeErrorInfo(d.value);
      if (info.domain === ERROR_DOMAIN) return info;
    } catch {
      // a malformed detail is ignored, like any unknown detail
    }
  }
  return undefined;
}

/**
 * Decodes the bytes of a google.rpc.RetryInfo (field 1 retry_delay, a
 * google.protobuf.Duration: 1 seconds, 2 nanos) into milliseconds, rounded
 * up. Unknown fields are skipped. Throws on malformed input.
 */
export function decodeRetryInfo(bytes: Uint8Array): number {
  let ms = 0;
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      const d = new BinaryReader(r.bytes());
      let seconds = 0;
      let nanos = 0;
      while (d.pos < d.len) {
        const [dno, dwt] = d.tag();
        if (dno === 1 && dwt === WireType.Varint) seconds = Number(d.int64());
        else if (dno === 2 && dwt === WireType.Varint) nanos = d.int32();
        else d.skip(dwt, dno);
      }
      ms = seconds * 1000 + Math.ceil(nanos / 1e6);
    } else {
      r.skip(wt, no);
    }
  }
  return Math.max(ms, 0);
}

/** The retry delay of a ConnectError's google.rpc.RetryInfo in milliseconds, or 0 without one. */
export function findRetryAfterMs(err: ConnectError): number {
  for (const d of err.details) {
    if (!("type" in d) || d.type !== "google.rpc.RetryInfo") continue;
    try {
      return decodeRetryInfo(d.value);
    } catch {
      // a malformed detail is ignored, like any unknown detail
    }
  }
  return 0;
}

/**
 * Converts the failure of a journal call into an OpjournalError whose code
 * is the journal's reason. `what` and `key` prefix the message
 * (`opjournal: register "payment:1": PAYLOAD_MISMATCH: payload: …`). A call
 * ended by the caller's own signal is CANCELED; an unreachable or silent
 * journal is UNAVAILABLE.
 */
export function journalError(what: string, key: string, reason: unknown, signal?: AbortSignal): OpjournalError {
  const prefix = `opjournal: ${what} ${JSON.stringify(key)}: `;
  if (reason instanceof OpjournalError) return reason;
  const ce = ConnectError.from(reason);
  if (signal?.aborted && (ce.code === Code.Canceled || ce.code === Code.DeadlineExceeded)) {
    return new OpjournalError("CANCELED", "the caller's signal ended the call; the journal may or may not have applied it",
      { prefix, grpcCode: ce.code, cause: reason });
  }
  const info = findErrorInfo(ce);
  if (info) {
    const { field = "", ...details } = info.metadata;
    let detail = ce.rawMessage;
    if (field && detail.startsWith(field + ": ")) detail = detail.slice(field.length + 2);
    return new OpjournalError(info.reason || "INTERNAL", detail,
      { field, prefix, grpcCode: ce.code, cause: reason, details, retryAfterMs: findRetryAfterMs(ce) });
  }
  let code: ErrorCode = "INTERNAL";
  let detail = `${Code[ce.code] ?? ce.code}: ${ce.rawMessage}`;
  if ((ce.code === Code.Internal || ce.code === Code.Unknown) && isNodeError(ce.cause)) {
    // The connection failed on this side (TLS verification, a reset socket):
    // the journal was not reached, as grpc-go reports it.
    return new OpjournalError("UNAVAILABLE", "journal unreachable: " + ce.rawMessage, { prefix, grpcCode: ce.code, cause: reason });
  }
  switch (ce.code) {
    case Code.Unavailable:
      code = "UNAVAILABLE";
      detail = "journal unreachable: " + ce.rawMessage;
      break;
    case Code.DeadlineExceeded:
      code = "UNAVAILABLE";
      detail = "journal did not answer in time: " + ce.rawMessage;
      break;
    case Code.Unauthenticated:
      code = "UNAUTHENTICATED";
      break;
    case Code.PermissionDenied:
      code = "PERMISSION_DENIED";
      break;
  }
  return new OpjournalError(code, detail, { prefix, grpcCode: ce.code, cause: reason });
}

/** A Node.js system or TLS error (it carries a string code such as ECONNRESET or DEPTH_ZERO_SELF_SIGNED_CERT). */
function isNodeError(e: unknown): boolean {
  return e instanceof Error && typeof (e as { code?: unknown }).code === "string";
}

const rejectedBrand = Symbol.for("opjournal.Rejected");
const unknownBrand = Symbol.for("opjournal.UnknownOutcomeError");

/**
 * A provider's confirmed rejection: proof that no effect happened (a
 * validation error, a declined card). Thrown from execute's fn it is
 * recorded as failed_final, and no retry of the key calls fn again. Throw
 * it ONLY when the provider proved that nothing happened; when in doubt
 * throw anything else, which is recorded as unknown.
 *
 *     throw new Rejected("card_declined", "the provider declined the card");
 */
export class Rejected extends Error {
  override name = "Rejected";
  /** Recorded as the operation's error_code ("card_declined", "http_400"); no secrets. */
  readonly code: string;
  /** The HTTP status, when made by classifyHttp. */
  readonly status: number | undefined;

  constructor(code: string, message?: string, options: { cause?: unknown; status?: number | undefined } = {}) {
    super(message ? `rejected (${code}): ${message}` : `rejected (${code})`,
      options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.status = options.status;
    Object.defineProperty(this, rejectedBrand, { value: true });
  }

  /** Whether v is a Rejected (also one made by another copy of this package). */
  static is(v: unknown): v is Rejected {
    return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[rejectedBrand] === true;
  }
}

/**
 * An attempt without a definite answer: the effect may have happened. fn
 * may throw it to name what was observed (`code` becomes the operation's
 * error_code); any other error is recorded as unknown too. It wins over a
 * Rejected in its cause chain: unknown is the safer reading.
 */
export class UnknownOutcomeError extends Error {
  override name = "UnknownOutcomeError";
  /** Recorded as the operation's error_code ("timeout", "http_503"); no secrets. */
  readonly code: string;

  constructor(code: string, message?: string, options: { cause?: unknown } = {}) {
    super(message ? `outcome unknown (${code}): ${message}` : `outcome unknown (${code})`,
      options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    Object.defineProperty(this, unknownBrand, { value: true });
  }

  /** Whether v is an UnknownOutcomeError (also one made by another copy of this package). */
  static is(v: unknown): v is UnknownOutcomeError {
    return typeof v === "object" && v !== null && (v as Record<symbol, unknown>)[unknownBrand] === true;
  }
}

/**
 * A provider's HTTP answer that is not definite (5xx, 408, 409, 425, 429,
 * 1xx, 3xx): unknown, recorded as "http_<status>".
 */
export class HttpStatusError extends UnknownOutcomeError {
  override name = "HttpStatusError";
  readonly status: number;

  constructor(status: number, statusText = "") {
    super(`http_${status}`, `provider answered ${status}${statusText ? " " + statusText : ""}`);
    this.status = status;
  }
}

/** What fn's outcome would have recorded. */
export type ObservedKind = "succeeded" | "failed_final" | "verification_required";

/**
 * fn ran, but the journal could not record its outcome (unreachable, or it
 * refused the request). The operation keeps its lease until it expires,
 * then shows as unknown and goes to reconciliation: it is verified rather
 * than retried blindly. A success the journal has not recorded is never
 * reported as an Outcome. `cause` is the journal's error.
 */
export class NotRecordedError extends Error {
  override name = "NotRecordedError";
  readonly key: string;
  readonly attempt: number;
  readonly observed: ObservedKind;
  /** The provider's identifier when observed is "succeeded". */
  readonly externalId: string;
  /** fn's error, when fn threw. */
  readonly fnError: unknown;

  constructor(key: string, attempt: number, observed: ObservedKind, cause: OpjournalError,
    options: { externalId?: string; fnError?: unknown } = {}) {
    const externalId = options.externalId ?? "";
    const what = observed + (externalId ? `, external_id ${JSON.stringify(externalId)}` : "");
    super(`opjournal: the outcome of operation ${JSON.stringify(key)} attempt ${attempt} (${what}) could not be recorded ` +
      `in the journal: ${cause.message}; the journal will show the operation as unknown once its lease expires, ` +
      "so that it is verified rather than retried blindly", { cause });
    this.key = key;
    this.attempt = attempt;
    this.observed = observed;
    this.externalId = externalId;
    this.fnError = options.fnError;
  }
}
