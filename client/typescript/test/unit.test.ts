// Unit tests without a server: ErrorInfo decoding, error mapping, outcome
// classification, payload encoding.

import { test } from "node:test";
import assert from "node:assert/strict";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";

import {
  classifyError, classifyHttp, decodeErrorInfo, encodeObject, HttpStatusError, OpjournalError, Rejected,
  sanitizeCode, UnknownOutcomeError, unknownCode,
} from "../src/index.js";
import { journalError } from "../src/errors.js";

function errorInfoBytes(reason: string, domain: string, metadata: Record<string, string>, extra = false): Uint8Array {
  const w = new BinaryWriter();
  if (extra) w.tag(9, 0).uint64(42n); // an unknown varint field, skipped
  w.tag(1, 2).string(reason);
  w.tag(2, 2).string(domain);
  for (const [k, v] of Object.entries(metadata)) {
    w.tag(3, 2).fork().tag(1, 2).string(k).tag(2, 2).string(v).join();
  }
  if (extra) w.tag(10, 2).bytes(new Uint8Array([1, 2, 3]));
  return w.finish();
}

test("decodeErrorInfo reads reason, domain and metadata, skipping unknown fields", () => {
  const info = decodeErrorInfo(errorInfoBytes("PAYLOAD_MISMATCH", "opjournal", { field: "payload", other: "x" }, true));
  assert.deepEqual(info, { reason: "PAYLOAD_MISMATCH", domain: "opjournal", metadata: { field: "payload", other: "x" } });
  assert.deepEqual(decodeErrorInfo(new Uint8Array()), { reason: "", domain: "", metadata: {} });
  assert.throws(() => decodeErrorInfo(new Uint8Array([0x0a, 0x05, 0x41])), "a truncated string is an error");
});

test("journalError maps a ConnectError with an opjournal ErrorInfo to its reason and field", () => {
  const ce = new ConnectError("payload/amount_minor: must be an integer", Code.InvalidArgument);
  ce.details.push({ type: "google.rpc.ErrorInfo", value: errorInfoBytes("INVALID_ARGUMENT", "opjournal", { field: "payload/amount_minor" }) });
  const e = journalError("register", "k1", ce);
  assert.ok(e instanceof OpjournalError);
  assert.equal(e.code, "INVALID_ARGUMENT");
  assert.equal(e.field, "payload/amount_minor");
  assert.equal(e.detail, "must be an integer");
  assert.equal(e.grpcCode, Code.InvalidArgument);
  assert.equal(e.message, 'opjournal: register "k1": INVALID_ARGUMENT: payload/amount_minor: must be an integer');
  assert.equal(e.cause, ce);
});

test("journalError ignores other domains and falls back on the gRPC code", () => {
  const foreign = new ConnectError("nope", Code.FailedPrecondition);
  foreign.details.push({ type: "google.rpc.ErrorInfo", value: errorInfoBytes("STALE_ATTEMPT", "example.com", {}) });
  assert.equal(journalError("x", "k", foreign).code, "INTERNAL");
  assert.equal(journalError("x", "k", new ConnectError("down", Code.Unavailable)).code, "UNAVAILABLE");
  assert.equal(journalError("x", "k", new ConnectError("slow", Code.DeadlineExceeded)).code, "UNAVAILABLE");
  assert.equal(journalError("x", "k", new ConnectError("who", Code.Unauthenticated)).code, "UNAUTHENTICATED");
  const ac = new AbortController();
  ac.abort();
  assert.equal(journalError("x", "k", new ConnectError("c", Code.Canceled), ac.signal).code, "CANCELED");
  assert.equal(journalError("x", "k", new Error("weird")).code, "INTERNAL");
});

test("classifyHttp: 2xx ok; 408/409/425/429/5xx/1xx/3xx unknown; other 4xx rejected", () => {
  for (const s of [200, 201, 204, 299]) assert.equal(classifyHttp({ status: s }), undefined, String(s));
  for (const s of [408, 409, 425, 429, 500, 502, 503, 504, 100, 301, 304, 600]) {
    const e = classifyHttp({ status: s, statusText: "x" });
    assert.ok(e instanceof HttpStatusError, String(s));
    assert.equal(e.code, `http_${s}`);
    assert.equal(e.status, s);
    assert.equal(classifyError(e).final, false);
  }
  for (const s of [400, 401, 402, 403, 404, 410, 422, 499]) {
    const e = classifyHttp({ status: s });
    assert.ok(Rejected.is(e), String(s));
    assert.equal(e.code, `http_${s}`);
    assert.deepEqual(classifyError(e), { final: true, code: `http_${s}` });
  }
  assert.ok(Rejected.is(classifyHttp({ statusCode: 404, statusMessage: "Not Found" })), "node:http IncomingMessage");
  assert.equal(classifyHttp(new Response(null, { status: 201 })), undefined);
  assert.equal(classifyHttp(undefined)?.code, "no_response");
  const timeout = classifyHttp(new DOMException("The operation was aborted due to timeout", "TimeoutError"));
  assert.ok(UnknownOutcomeError.is(timeout));
  assert.equal(timeout.code, "timeout");
});

test("unknownCode names timeouts, aborts, network errors and the rest", () => {
  const sys = (code: string) => Object.assign(new Error(code), { code, syscall: "connect" });
  assert.equal(unknownCode(new DOMException("t", "TimeoutError")), "timeout");
  assert.equal(unknownCode(new TypeError("fetch failed", { cause: sys("ETIMEDOUT") })), "timeout");
  assert.equal(unknownCode(Object.assign(new Error("h"), { code: "UND_ERR_HEADERS_TIMEOUT" })), "timeout");
  assert.equal(unknownCode(new DOMException("a", "AbortError")), "canceled");
  assert.equal(unknownCode(new TypeError("fetch failed", { cause: sys("ECONNREFUSED") })), "network_error");
  assert.equal(unknownCode(new TypeError("fetch failed")), "network_error");
  assert.equal(unknownCode(sys("ECONNRESET")), "network_error");
  assert.equal(unknownCode(Object.assign(new Error("s"), { code: "UND_ERR_SOCKET" })), "network_error");
  assert.equal(unknownCode(new HttpStatusError(503)), "http_503");
  assert.equal(unknownCode(new Error("boom")), "error");
  assert.equal(unknownCode("a string"), "error");
  assert.equal(unknownCode(undefined), "error");
  const loop: Error & { cause?: unknown } = new Error("loop");
  loop.cause = loop;
  assert.equal(unknownCode(loop), "error", "a cause cycle ends");
});

test("classifyError: only a Rejected is final, and an UnknownOutcomeError anywhere wins", () => {
  assert.deepEqual(classifyError(new Rejected("card_declined")), { final: true, code: "card_declined" });
  assert.deepEqual(classifyError(new Error("wrapped", { cause: new Rejected("card_declined") })), { final: true, code: "card_declined" });
  assert.deepEqual(classifyError(new UnknownOutcomeError("http_502", "", { cause: new Rejected("x") })), { final: false, code: "http_502" });
  assert.deepEqual(classifyError(new Rejected("x", "", { cause: new HttpStatusError(503) })), { final: false, code: "http_503" });
  assert.deepEqual(classifyError(new AggregateError([new Error("a"), new DOMException("t", "TimeoutError")])), { final: false, code: "timeout" });
  assert.deepEqual(classifyError(new Rejected("")), { final: true, code: "rejected" });
  assert.deepEqual(classifyError(null), { final: false, code: "error" });
});

test("sanitizeCode keeps codes within the journal's limits", () => {
  assert.equal(sanitizeCode("card_declined", "x"), "card_declined");
  assert.equal(sanitizeCode("", "fallback"), "fallback");
  assert.equal(sanitizeCode("a\nb\x7fc", "x"), "a_b_c");
  assert.equal(sanitizeCode("é".repeat(60), "x"), "é".repeat(50), "100 bytes, cut at a character boundary");
  assert.equal(sanitizeCode("a\ud800b", "x"), "a\ufffdb", "a lone surrogate is replaced");
});

test("encodeObject refuses what JSON or the journal cannot carry, naming the path", () => {
  const field = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      assert.ok(e instanceof OpjournalError && e.code === "INVALID_ARGUMENT");
      return e.field;
    }
    assert.fail("no error");
  };
  assert.deepEqual(encodeObject("payload", { a: 1, b: undefined, c: new Date(0), d: [1, { e: null }] }),
    { a: 1, c: "1970-01-01T00:00:00.000Z", d: [1, { e: null }] });
  assert.equal(field(() => encodeObject("payload", { items: [{ amount_minor: 2 ** 53 }] })), "payload/items/0/amount_minor");
  assert.equal(field(() => encodeObject("payload", { x: -(2 ** 60) })), "payload/x");
  assert.equal(field(() => encodeObject("payload", { x: NaN })), "payload/x");
  assert.equal(field(() => encodeObject("payload", { x: Infinity })), "payload/x");
  assert.equal(field(() => encodeObject("payload", { x: { y: 10n } })), "payload/x/y");
  assert.equal(field(() => encodeObject("payload", [1, 2])), "payload");
  assert.equal(field(() => encodeObject("payload", "str")), "payload");
  assert.equal(field(() => encodeObject("payload", null)), "payload");
  assert.equal(field(() => encodeObject("result", new Uint8Array(2))), "result");
  const cyclic: Record<string, unknown> = {};
  cyclic["self"] = cyclic;
  assert.equal(field(() => encodeObject("payload", cyclic)), "payload");
  assert.deepEqual(encodeObject("payload", { n: Number.MAX_SAFE_INTEGER, m: -Number.MAX_SAFE_INTEGER, f: 1.5 }),
    { n: Number.MAX_SAFE_INTEGER, m: -Number.MAX_SAFE_INTEGER, f: 1.5 });
});

test("asStored blanks what the journal redacted, so a call compares equal to its own record", async () => {
  const { asStored } = await import("../src/tools.js");
  const { canonicalJson } = await import("../src/canonical.js");
  const stored = { amount_minor: 120000, card: "[redacted]", meta: { token: "[redacted]", note: "x" }, items: [{ pan: "[redacted]" }] };
  const call = { card: { number: "4242424242424242" }, amount_minor: 120000, meta: { note: "x", token: "t" }, items: [{ pan: "5555" }] };
  assert.equal(canonicalJson(asStored(stored, call)), canonicalJson(stored));
  // Any member the journal holds in clear still has to match.
  assert.notEqual(canonicalJson(asStored(stored, { ...call, amount_minor: 1 })), canonicalJson(stored));
  assert.notEqual(canonicalJson(asStored(stored, { ...call, meta: { note: "y", token: "t" } })), canonicalJson(stored));
  // Nothing redacted: the call as it is.
  assert.deepEqual(asStored({ a: 1 }, { a: 2, b: [1] }), { a: 2, b: [1] });
});
