// execute's lease rules against a scripted journal: the deadline is the
// lease the journal granted less the safety margin, heartbeats move it only
// by what the journal grants, refusals stop them, transport errors do not,
// a give-up refused as STALE_ATTEMPT is still verification_required, and no
// timer outlives execute. (The same rules against the real binary are in
// lease.test.ts.)

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";

import {
  execute, heartbeatIntervalSeconds, idempotent, leaseSafetyMarginSeconds, limits, NextStep, NotRecordedError, OpjournalError,
  UnknownOutcomeError, type AttemptContext, type Effect,
} from "../src/index.js";
import { OperationSchema, RegisterResponseSchema, Status as PbStatus } from "../src/gen/opjournal/v1/journal_pb.js";
import { registerResultOf, type RegisterResult } from "../src/journal.js";
import { deferred, waitFor } from "../testutil/harness.js";
import { fakeOperation, FakeJournal } from "../testutil/fake.js";

/** The answer of a register that claimed attempt 1 with a lease of leaseSeconds. */
function claimed(key: string, leaseSeconds: number, attempt = 1): RegisterResult {
  return registerResultOf(create(RegisterResponseSchema, {
    next: NextStep.CALL_PROVIDER, claimed: true, attempt, leaseSeconds, created: attempt === 1,
    operation: create(OperationSchema, { operationKey: key, status: PbStatus.IN_PROGRESS, attemptCount: attempt }),
  }));
}

/** How late a give-up may come on a loaded machine. */
const SLACK_MS = 1000;

const op = (key: string) => ({ key, action: "create_payment", payload: { amount_minor: 1 } });

/** A fn that runs until released (ignoring its signal), noting what it saw. */
function slowFn() {
  const release = deferred<Effect>();
  const seen: { ctx?: AttemptContext; initialDeadline?: number; abortedAt?: number; calls: number } = { calls: 0 };
  const fn = async (ctx: AttemptContext): Promise<Effect> => {
    seen.calls++;
    seen.ctx = ctx;
    seen.initialDeadline = ctx.deadline;
    ctx.signal.addEventListener("abort", () => { seen.abortedAt = performance.now(); });
    return release.promise;
  };
  return { fn, seen, release };
}

test("the rules are limits.go's: margin = min(max(lease/10, 0.5), 5), heartbeat = max(lease/3, 0.1)", () => {
  assert.equal(limits.LEASE_MARGIN_DIVISOR, 10);
  for (const [lease, margin] of [[1, 0.5], [2, 0.5], [5, 0.5], [10, 1], [30, 3], [50, 5], [600, 5]] as const) {
    assert.equal(leaseSafetyMarginSeconds(lease), margin, `margin of ${lease}`);
  }
  for (const [lease, beat] of [[0.2, 0.1], [1, 1 / 3], [3, 1], [30, 10]] as const) {
    assert.equal(heartbeatIntervalSeconds(lease), beat, `heartbeat of ${lease}`);
  }
});

describe("lease rules against a scripted journal", { concurrency: true }, () => {
  test("a refused heartbeat (INVALID_STATE, max_attempt_seconds reached) stops the heartbeats and keeps the deadline", async () => {
    const key = "unit:refused";
    const fake = new FakeJournal(() => claimed(key, 2));
    fake.onExtendLease = async () => { throw new OpjournalError("INVALID_STATE", "max_attempt_seconds reached"); };
    const { fn, seen, release } = slowFn();
    const t0 = performance.now();
    const out = await execute(fake.journal, op(key), fn);
    const elapsed = performance.now() - t0;
    assert.ok(out.kind === "verification_required", out.kind);
    assert.equal(out.errorCode, "lease_expired");
    assert.ok(UnknownOutcomeError.is(out.cause) && out.cause.code === "lease_expired");
    // Beats would come at 0.67 s and 1.33 s; the refusal at the first ends them.
    assert.equal(fake.callsOf("extendLease").length, 1, "no heartbeat after a refusal");
    assert.ok(elapsed >= 1500 && elapsed <= 1500 + SLACK_MS, `gave up after ${elapsed} ms; the deadline is 1500`);
    assert.equal(seen.ctx!.deadline, seen.initialDeadline, "the deadline is kept");
    assert.ok(seen.ctx!.signal.aborted && seen.abortedAt! >= seen.initialDeadline!, "fn's signal aborted at the deadline");
    assert.ok(UnknownOutcomeError.is(seen.ctx!.signal.reason) && seen.ctx!.signal.reason.code === "lease_expired");
    assert.deepEqual(fake.callsOf("markUnknown").map((c) => c.args[0]), [{ key, attempt: 1, errorCode: "lease_expired" }]);

    // fn's effect, confirmed after execute gave up, is still recorded for its attempt.
    release.resolve({ externalId: "pay_late", result: { ok: true } });
    const mark = await waitFor("the late markSucceeded", async () => fake.callsOf("markSucceeded")[0]);
    assert.deepEqual(mark.args[0], { key, attempt: 1, externalId: "pay_late", result: { ok: true } });
    assert.ok(mark.at > fake.callsOf("markUnknown")[0]!.at, "after the unknown was recorded");
  });

  test("a heartbeat the journal does not answer is tried again at the next interval; the deadline stays", async () => {
    const key = "unit:unavailable";
    const fake = new FakeJournal(() => claimed(key, 2));
    fake.onExtendLease = async () => { throw new OpjournalError("UNAVAILABLE", "journal unreachable"); };
    const { fn, seen } = slowFn();
    const t0 = performance.now();
    const out = await execute(fake.journal, op(key), fn);
    const elapsed = performance.now() - t0;
    assert.ok(out.kind === "verification_required" && out.errorCode === "lease_expired");
    assert.equal(fake.callsOf("extendLease").length, 2, "beats at 0.67 s and 1.33 s, both tried");
    assert.ok(elapsed >= 1500 && elapsed <= 1500 + SLACK_MS, `gave up after ${elapsed} ms`);
    assert.equal(seen.ctx!.deadline, seen.initialDeadline);
  });

  test("a granted heartbeat moves the deadline to its send time + g − margin(g); fn outlives the first lease", async () => {
    const key = "unit:granted";
    const fake = new FakeJournal(() => claimed(key, 2));
    const sends: number[] = [];
    fake.onExtendLease = async (_n, k, attempt) => {
      sends.push(performance.now());
      await new Promise((r) => setTimeout(r, 100)); // the round trip: the grant counts from the send
      return { operation: fakeOperation(k, PbStatus.IN_PROGRESS, { attemptCount: attempt }), leaseSeconds: 2, leaseUntil: null };
    };
    let deadlines: Array<{ at: number; deadline: number }> = [];
    const out = await execute(fake.journal, op(key), async (ctx) => {
      const end = performance.now() + 2_300; // longer than the first lease's 1.5 s
      while (performance.now() < end) {
        deadlines.push({ at: performance.now(), deadline: ctx.deadline });
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(ctx.signal.aborted, false);
      return { externalId: "pay_long" };
    });
    assert.ok(out.kind === "succeeded" && out.externalId === "pay_long", out.kind);
    assert.ok(sends.length >= 3, `${sends.length} heartbeats`);
    assert.equal(fake.callsOf("markUnknown").length, 0);
    const first = deadlines[0]!.deadline;
    const last = deadlines[deadlines.length - 1]!.deadline;
    assert.ok(last > first + 1000, `the deadline moved from ${first} to ${last}`);
    // Every deadline fn saw is one beat's send time + 1.5 s (never the receipt time).
    deadlines = deadlines.filter((d) => d.deadline !== first);
    for (const d of deadlines) {
      assert.ok(sends.some((s) => Math.abs(s + 1500 - d.deadline) < 5), `deadline ${d.deadline} is no send + 1500 (${sends})`);
    }
  });

  test("a grant shorter than the time left never brings the deadline forward", async () => {
    const key = "unit:shorter";
    const fake = new FakeJournal(() => claimed(key, 2));
    fake.onExtendLease = async (_n, k, attempt) =>
      ({ operation: fakeOperation(k, PbStatus.IN_PROGRESS, { attemptCount: attempt }), leaseSeconds: 0, leaseUntil: null });
    const { fn, seen } = slowFn();
    const t0 = performance.now();
    const out = await execute(fake.journal, op(key), fn);
    const elapsed = performance.now() - t0;
    assert.ok(out.kind === "verification_required" && out.errorCode === "lease_expired");
    assert.ok(elapsed >= 1500, `gave up after ${elapsed} ms, before the deadline of the claim`);
    assert.equal(seen.ctx!.deadline, seen.initialDeadline);
    assert.equal(fake.callsOf("extendLease").length, 2);
  });

  test("a give-up refused as STALE_ATTEMPT (the lease already ran out) is still verification_required", async () => {
    const key = "unit:stale";
    const fake = new FakeJournal(() => claimed(key, 1));
    fake.onMarkUnknown = async () => { throw new OpjournalError("STALE_ATTEMPT", "no longer holds the lease", { field: "attempt" }); };
    fake.onLookup = async (k) => fakeOperation(k, PbStatus.UNKNOWN, { attemptCount: 1 });
    const out = await execute(fake.journal, op(key), slowFn().fn, { heartbeat: false });
    assert.ok(out.kind === "verification_required", out.kind);
    assert.equal(out.errorCode, "lease_expired");
    assert.equal(out.operation.status, "unknown", "the record read after the refusal");
    assert.equal(fake.callsOf("extendLease").length, 0, "heartbeat: false sends none");
  });

  test("a give-up the journal cannot record (UNAVAILABLE) is a NotRecordedError", async () => {
    const key = "unit:not-recorded";
    const fake = new FakeJournal(() => claimed(key, 1));
    fake.onMarkUnknown = async () => { throw new OpjournalError("UNAVAILABLE", "journal unreachable"); };
    await assert.rejects(execute(fake.journal, op(key), slowFn().fn, { heartbeat: false }),
      (e: unknown) => e instanceof NotRecordedError && e.observed === "verification_required" && e.attempt === 1 &&
        UnknownOutcomeError.is(e.fnError) && e.fnError.code === "lease_expired");
  });

  test("a claim that used up the whole lease calls nothing and records lease_expired", async () => {
    const key = "unit:late-claim";
    const fake = new FakeJournal(async () => {
      await new Promise((r) => setTimeout(r, 600)); // lease 1 s − margin 0.5 s: gone on arrival
      return claimed(key, 1);
    });
    const { fn, seen } = slowFn();
    const out = await execute(fake.journal, op(key), fn);
    assert.ok(out.kind === "verification_required" && out.errorCode === "lease_expired");
    assert.equal(seen.calls, 0, "fn must not be called without time to run");
    assert.deepEqual(fake.calls.map((c) => c.method), ["register", "markUnknown"]);
  });

  test("heartbeat: false turns heartbeats off, on execute and on idempotent", async () => {
    // lease 2: margin 0.5 s, beats at 0.67 s and 1.33 s; fn takes 0.9 s.
    const run = async (how: "execute" | "execute-off" | "idempotent-off" | "idempotent-off-call-on") => {
      const key = `unit:hb-${how}`;
      const fake = new FakeJournal(() => claimed(key, 2));
      const fn = async () => {
        await new Promise((r) => setTimeout(r, 900));
        return { externalId: "pay_1" };
      };
      let out;
      if (how === "execute") out = await execute(fake.journal, op(key), fn);
      else if (how === "execute-off") out = await execute(fake.journal, op(key), fn, { heartbeat: false });
      else {
        const tool = idempotent(fake.journal, { action: "create_payment", key: () => key, heartbeat: false }, fn);
        out = how === "idempotent-off" ? await tool({}) : await tool({}, { heartbeat: true });
      }
      assert.equal(out.kind, "succeeded", how);
      return fake.callsOf("extendLease").length;
    };
    const [on, off, idemOff, idemOn] = await Promise.all([
      run("execute"), run("execute-off"), run("idempotent-off"), run("idempotent-off-call-on"),
    ]);
    assert.equal(on, 1, "heartbeats are on by default");
    assert.equal(off, 0);
    assert.equal(idemOff, 0);
    assert.equal(idemOn, 1, "a call's own option wins over the spec's");
  });
});

test("no timer outlives execute: the give-up timer and the heartbeats end when fn settles", async () => {
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
  const before = timers();
  const fake = new FakeJournal(() => claimed("unit:timers", 30));
  let during = 0;
  const out = await execute(fake.journal, op("unit:timers"), async () => {
    during = timers();
    return { externalId: "pay_t" };
  });
  assert.equal(out.kind, "succeeded");
  assert.ok(during >= before + 2, `a give-up timer and a heartbeat timer while fn runs (${before} → ${during})`);
  assert.equal(timers(), before, "every timer cleared once fn settled");

  const failing = new FakeJournal(() => claimed("unit:timers-2", 30));
  const out2 = await execute(failing.journal, op("unit:timers-2"), async () => { throw new Error("boom"); });
  assert.equal(out2.kind, "verification_required");
  assert.equal(timers(), before, "also when fn throws");
});
