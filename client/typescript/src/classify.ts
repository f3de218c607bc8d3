// Outcome classification: only an error that proves no effect happened is
// final (a Rejected); a timeout, a dropped connection, a 5xx, anything else
// leaves the outcome unknown.

import { HttpStatusError, Rejected, UnknownOutcomeError } from "./errors.js";

/** Something with an HTTP status: a fetch Response, or node:http's IncomingMessage. */
export type HttpAnswer = { status: number; statusText?: string } | { statusCode?: number; statusMessage?: string };

/**
 * Classifies a provider's HTTP answer, or the error of the request, for
 * execute: it returns undefined for a success, else the error for fn to
 * throw.
 *
 * - 2xx: undefined, a success.
 * - 408, 425, 429, every 5xx, 1xx and 3xx: HttpStatusError ("http_503"),
 *   unknown. A 5xx may come after the effect.
 * - 409: HttpStatusError, unknown. An idempotent provider answers 409 while
 *   a request with the same Idempotency-Key is still in flight.
 * - any other 4xx: Rejected("http_<status>"), a confirmed rejection.
 * - an error (a timeout, a reset connection, fetch's "fetch failed"):
 *   UnknownOutcomeError with code "timeout", "canceled", "network_error"
 *   or "error". The request may have reached the provider.
 *
 * It does not read the body. If a provider documents other statuses as
 * definite (or not), classify them yourself first.
 *
 *     const res = await fetch(url, { method: "POST", headers: { "Idempotency-Key": key }, body, signal });
 *     const err = classifyHttp(res);
 *     if (err) throw err;
 */
export function classifyHttp(answer: HttpAnswer | Response | unknown): HttpStatusError | UnknownOutcomeError | Rejected | undefined {
  const status = statusOf(answer);
  if (status === undefined) {
    if (answer === undefined || answer === null) {
      return new UnknownOutcomeError("no_response", "no HTTP response");
    }
    return new UnknownOutcomeError(unknownCode(answer), describe(answer), { cause: answer });
  }
  const text = statusTextOf(answer);
  if (status >= 200 && status <= 299) return undefined;
  if (status === 408 || status === 409 || status === 425 || status === 429) return new HttpStatusError(status, text);
  if (status >= 400 && status <= 499) {
    return new Rejected(`http_${status}`, `provider answered ${status}${text ? " " + text : ""}`, { status });
  }
  return new HttpStatusError(status, text); // 1xx, 3xx, 5xx and nonsense
}

function statusOf(v: unknown): number | undefined {
  if (typeof v !== "object" || v === null || v instanceof Error) return undefined;
  const o = v as { status?: unknown; statusCode?: unknown };
  if (typeof o.status === "number") return o.status;
  if (typeof o.statusCode === "number") return o.statusCode;
  return undefined;
}

function statusTextOf(v: unknown): string {
  const o = v as { statusText?: unknown; statusMessage?: unknown };
  if (typeof o.statusText === "string") return o.statusText;
  if (typeof o.statusMessage === "string") return o.statusMessage;
  return "";
}

function describe(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

const TIMEOUT_CODES = new Set([
  "ETIMEDOUT", "ESOCKETTIMEDOUT", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT",
  "ERR_HTTP2_STREAM_CANCEL_TIMEOUT",
]);

const NETWORK_CODES = new Set([
  "ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH",
  "ENETUNREACH", "ENETDOWN", "EHOSTDOWN", "EADDRNOTAVAIL", "ERR_STREAM_PREMATURE_CLOSE", "ERR_SOCKET_CLOSED",
]);

/**
 * Every error reachable from err through `cause` (and AggregateError's
 * `errors`), err first, each once, at most 64.
 */
export function* errorChain(err: unknown): Generator<unknown> {
  const seen = new Set<unknown>();
  const queue: unknown[] = [err];
  while (queue.length > 0 && seen.size < 64) {
    const e = queue.shift();
    if (e === undefined || e === null || seen.has(e)) continue;
    seen.add(e);
    yield e;
    if (typeof e === "object") {
      const o = e as { cause?: unknown; errors?: unknown };
      if (o.cause !== undefined) queue.push(o.cause);
      if (e instanceof AggregateError && Array.isArray(o.errors)) queue.push(...o.errors);
    }
  }
}

/**
 * Names an error that leaves the outcome unknown: the code of an
 * UnknownOutcomeError (HttpStatusError: "http_503"), "timeout" for a
 * TimeoutError (AbortSignal.timeout) or a socket/undici timeout,
 * "canceled" for another abort, "network_error" for a failed connection or
 * fetch's "fetch failed", else "error".
 */
export function unknownCode(err: unknown): string {
  const chain = [...errorChain(err)];
  for (const e of chain) {
    if (UnknownOutcomeError.is(e) && e.code) return e.code;
  }
  for (const e of chain) {
    const name = nameOf(e);
    const code = codeOf(e);
    if (name === "TimeoutError" || (code !== undefined && TIMEOUT_CODES.has(code))) return "timeout";
  }
  for (const e of chain) {
    if (nameOf(e) === "AbortError" || codeOf(e) === "ABORT_ERR") return "canceled";
  }
  for (const e of chain) {
    const code = codeOf(e);
    if (code !== undefined && (NETWORK_CODES.has(code) || code.startsWith("UND_ERR_"))) return "network_error";
    if (typeof e === "object" && e !== null && "syscall" in e) return "network_error";
    if (e instanceof TypeError && e.message === "fetch failed") return "network_error";
  }
  return "error";
}

function nameOf(e: unknown): string | undefined {
  if (typeof e !== "object" || e === null) return undefined;
  const n = (e as { name?: unknown }).name;
  return typeof n === "string" ? n : undefined;
}

function codeOf(e: unknown): string | undefined {
  if (typeof e !== "object" || e === null) return undefined;
  const c = (e as { code?: unknown }).code;
  return typeof c === "string" ? c : undefined;
}

/**
 * How fn's error is recorded: final (failed_final) only when a Rejected is
 * in its chain and no UnknownOutcomeError is (unknown is the safer
 * reading); the code is sanitized for the journal.
 */
export function classifyError(err: unknown): { final: boolean; code: string } {
  let rejected: Rejected | undefined;
  let unknown = false;
  for (const e of errorChain(err)) {
    if (UnknownOutcomeError.is(e)) unknown = true;
    else if (rejected === undefined && Rejected.is(e)) rejected = e;
  }
  if (rejected && !unknown) return { final: true, code: sanitizeCode(rejected.code, "rejected") };
  return { final: false, code: sanitizeCode(unknownCode(err), "error") };
}

/** The journal's limit on error_code, in bytes of UTF-8. */
export const MAX_ERROR_CODE_BYTES = 100;

/**
 * Makes code acceptable to the journal (≤ 100 bytes of UTF-8, no control
 * characters, well-formed), so a rejection is never lost to a malformed code.
 */
export function sanitizeCode(code: string, fallback: string): string {
  if (typeof code !== "string" || code === "") return fallback;
  // Lone surrogates become U+FFFD on the way through UTF-8.
  let s = new TextDecoder().decode(new TextEncoder().encode(code));
  s = s.replace(/[\x00-\x1f\x7f]/g, "_");
  const enc = new TextEncoder();
  while (enc.encode(s).length > MAX_ERROR_CODE_BYTES) {
    const cps = Array.from(s);
    cps.pop();
    s = cps.join("");
  }
  return s;
}
