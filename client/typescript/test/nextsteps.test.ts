// The journal decides the next step: every vector of protocol/testdata/next_steps.json
// (shared by the Go, Python and TypeScript suites) through decideNext and
// through execute, against a scripted journal. execute acts on the
// answer's next and nothing else, and a step it does not know is an error,
// never a call.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";

import {
  decideNext, execute, leaseSafetyMarginSeconds, NextStep, OpjournalError, type AttemptContext, type Outcome,
} from "../src/index.js";
import { OperationSchema, RegisterResponseSchema, Status as PbStatus } from "../src/gen/opjournal/v1/journal_pb.js";
import { registerResultOf, type RegisterResult } from "../src/journal.js";
import { FakeJournal } from "../testutil/fake.js";

interface Vector {
  name: string;
  answer?: JsonValue;
  error?: { code: string; grpc_code?: string; http_status?: number };
  expect: {
    call?: boolean;
    attempt?: number;
    lease_seconds?: number;
    error?: boolean;
    kind?: string;
    replayed?: boolean;
    external_id?: string;
    result?: JsonValue;
    error_code?: string;
    retry_after_seconds?: number;
    needs_review?: boolean;
  };
}

// dist/test/nextsteps.test.js → the repository's testdata/.
const vectorsFile = fileURLToPath(new URL("../../../../protocol/testdata/next_steps.json", import.meta.url));
const vectors = (JSON.parse(readFileSync(vectorsFile, "utf8")) as { vectors: Vector[] }).vectors;

/** The journal's answer of a vector, as register returns it: the generated message from its proto-named JSON. */
function answerOf(v: Vector): RegisterResult {
  return registerResultOf(fromJson(RegisterResponseSchema, v.answer!));
}

/** Checks an outcome against the fields of expect that are given. */
function checkOutcome(name: string, out: Outcome, want: Vector["expect"]): void {
  assert.equal(out.kind, want.kind, name);
  const o = out as Outcome & Record<string, unknown>;
  if (want.replayed !== undefined) assert.equal(o["replayed"], want.replayed, `${name}: replayed`);
  if (want.external_id !== undefined) assert.equal(o["externalId"], want.external_id, `${name}: externalId`);
  if (want.result !== undefined) assert.deepEqual(o["result"], want.result, `${name}: result`);
  if (want.error_code !== undefined) assert.equal(o["errorCode"], want.error_code, `${name}: errorCode`);
  if (want.retry_after_seconds !== undefined) {
    assert.equal(o["retryAfterMs"], want.retry_after_seconds * 1000, `${name}: retryAfterMs`);
  }
  if (want.needs_review !== undefined) assert.equal(o["needsReview"], want.needs_review, `${name}: needsReview`);
}

test("the vectors file is there and covers every kind of answer", () => {
  assert.ok(vectors.length >= 10, `only ${vectors.length} vectors in ${vectorsFile}`);
  const kinds = new Set(vectors.map((v) => (v.expect.call ? "call" : v.expect.error ? "error" : v.expect.kind)));
  for (const k of ["call", "error", "succeeded", "failed_final", "in_progress_elsewhere", "verification_required", "conflict", "awaiting_approval"]) {
    assert.ok(kinds.has(k), `no vector for ${k}`);
  }
});

test("decideNext gives every vector's decision", () => {
  for (const v of vectors) {
    if (v.error) continue; // an error, not an answer: execute's conflict (next test)
    const answer = answerOf(v);
    if (v.expect.error) {
      assert.throws(() => decideNext("k", answer), (e: unknown) => e instanceof OpjournalError, v.name);
      continue;
    }
    const d = decideNext("k", answer);
    if (v.expect.call) {
      assert.deepEqual(d, { call: true, attempt: v.expect.attempt, leaseSeconds: v.expect.lease_seconds }, v.name);
    } else {
      assert.ok(!d.call, `${v.name}: must not call`);
      checkOutcome(v.name, d.outcome, v.expect);
    }
  }
});

test("execute acts on every vector: calls fn exactly when told to, with the attempt and lease granted", async () => {
  for (const v of vectors) {
    const key = `vector:${v.name.replace(/[^\x21-\x7e]/g, "_")}`;
    const fake = new FakeJournal(() => {
      if (v.error) throw new OpjournalError(v.error.code, "operation has other parameters", { field: "payload" });
      return answerOf(v);
    });
    const calls: Array<{ attempt: number; leaseSeconds: number; remainingMs: number; now: number }> = [];
    const fn = (ctx: AttemptContext) => {
      calls.push({ attempt: ctx.attempt, leaseSeconds: ctx.leaseSeconds, remainingMs: ctx.deadline - performance.now(), now: performance.now() });
      return { externalId: "pay_called" };
    };
    const before = performance.now();
    if (v.expect.error) {
      await assert.rejects(execute(fake.journal, { key, action: "create_payment", payload: {} }, fn),
        (e: unknown) => e instanceof OpjournalError, v.name);
      assert.equal(calls.length, 0, `${v.name}: fn must not be called`);
      continue;
    }
    const out = await execute(fake.journal, { key, action: "create_payment", payload: {} }, fn);
    if (v.expect.call) {
      assert.equal(calls.length, 1, `${v.name}: fn is called once`);
      assert.equal(calls[0]!.attempt, v.expect.attempt, v.name);
      assert.equal(calls[0]!.leaseSeconds, v.expect.lease_seconds, v.name);
      // The deadline is lease − margin after the request was sent (between before and the call).
      const budget = (v.expect.lease_seconds! - leaseSafetyMarginSeconds(v.expect.lease_seconds!)) * 1000;
      assert.ok(calls[0]!.remainingMs <= budget && calls[0]!.remainingMs >= budget - (calls[0]!.now - before) - 1,
        `${v.name}: ${calls[0]!.remainingMs} ms left of ${budget}`);
      assert.equal(out.kind, "succeeded", v.name);
      assert.ok(out.kind === "succeeded" && !out.replayed && out.externalId === "pay_called", v.name);
      const marks = fake.callsOf("markSucceeded");
      assert.equal(marks.length, 1);
      assert.equal((marks[0]!.args[0] as { attempt: number }).attempt, v.expect.attempt, `${v.name}: recorded for its attempt`);
    } else {
      assert.equal(calls.length, 0, `${v.name}: fn must not be called`);
      checkOutcome(v.name, out, v.expect);
      assert.equal(fake.calls.length, 1, `${v.name}: nothing but register: ${fake.calls.map((c) => c.method).join(", ")}`);
    }
  }
});

test("next, not status, decides: a claimed answer with a terminal-looking record, and steps execute does not act on", async () => {
  const op = (status: PbStatus) => create(OperationSchema, { operationKey: "k", status, attemptCount: 1, externalId: "pay_old" });
  const answer = (fields: Partial<{ next: number; claimed: boolean; attempt: number; leaseSeconds: number; status: PbStatus }>) =>
    registerResultOf(create(RegisterResponseSchema, {
      next: fields.next ?? NextStep.CALL_PROVIDER, claimed: fields.claimed ?? true, attempt: fields.attempt ?? 1,
      leaseSeconds: fields.leaseSeconds ?? 30, operation: op(fields.status ?? PbStatus.IN_PROGRESS),
    }));
  // A record that reads succeeded does not make a replay: next says call.
  assert.deepEqual(decideNext("k", answer({ status: PbStatus.SUCCEEDED })), { call: true, attempt: 1, leaseSeconds: 30 });
  // And a record that reads in_progress does not make a call: next says replay.
  const replay = decideNext("k", answer({ next: NextStep.REPLAY, claimed: false, attempt: 0, leaseSeconds: 0 }));
  assert.ok(!replay.call && replay.outcome.kind === "succeeded" && replay.outcome.externalId === "pay_old");

  for (const [what, a] of [
    ["CLAIM", answer({ next: NextStep.CLAIM, claimed: false })],
    ["UNSPECIFIED", answer({ next: NextStep.UNSPECIFIED })],
    ["a step newer than this SDK (99)", answer({ next: 99 })],
    ["CALL_PROVIDER without a claim", answer({ claimed: false })],
    ["CALL_PROVIDER without a lease", answer({ leaseSeconds: 0 })],
    ["CALL_PROVIDER without an attempt", answer({ attempt: 0 })],
  ] as const) {
    assert.throws(() => decideNext("k", a), (e: unknown) => e instanceof OpjournalError && e.code === "INTERNAL", what);
    let called = 0;
    const fake = new FakeJournal(() => a);
    await assert.rejects(execute(fake.journal, { key: "k", action: "create_payment", payload: {} }, () => {
      called++;
      return { externalId: "x" };
    }), (e: unknown) => e instanceof OpjournalError && /nothing was called/.test(e.message), what);
    assert.equal(called, 0, `${what}: fn must not be called`);
    assert.deepEqual(fake.calls.map((c) => c.method), ["register"], what);
  }
});
