// Lease-bounded execution against the real opjournal binary, with a test
// policy of 2-second leases: heartbeats keep a slow call's lease alive;
// without them execute gives up at lease − margin, aborts fn's signal,
// records lease_expired, and still records the effect fn confirms later;
// and max_attempt_seconds caps what heartbeats can keep.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import {
  execute, Journal, leaseSafetyMarginSeconds, UnknownOutcomeError, type AttemptContext, type Effect, type JournalEvent,
} from "../src/index.js";
import { startJournal, uniqueKey, waitFor, type JournalServer } from "../testutil/harness.js";

// No redact_fields (they need hash keys) and no reconcile section: only the
// lease settings matter here.
const POLICY = `
actions:
  slow_call:
    lease_seconds: 2
  capped_call:
    lease_seconds: 2
    max_attempt_seconds: 2
`;
const LEASE_S = 2;
const BUDGET_MS = (LEASE_S - leaseSafetyMarginSeconds(LEASE_S)) * 1000; // 1500: how long fn may run without heartbeats
const SLACK_MS = 1000;

/**
 * A provider call slower than the lease that ignores its signal (the worst
 * case): it resolves its Effect after runMs, noting what it saw.
 */
function slowCall(runMs: number, externalId: string) {
  const seen: { ctx?: AttemptContext; initialDeadline?: number; calls: number; done: boolean; abortedAt?: number } = { calls: 0, done: false };
  const fn = async (ctx: AttemptContext): Promise<Effect> => {
    seen.calls++;
    seen.ctx = ctx;
    seen.initialDeadline = ctx.deadline;
    ctx.signal.addEventListener("abort", () => { seen.abortedAt = performance.now(); });
    await new Promise((r) => setTimeout(r, runMs)); // the provider's work
    seen.done = true;
    return { externalId, result: { id: externalId } };
  };
  return { fn, seen };
}

const reasons = (events: JournalEvent[]) => events.map((e) => e.reason);

describe("lease-bounded execute against the journal", { concurrency: true }, () => {
  let srv: JournalServer;
  let journal: Journal;

  before(async () => {
    srv = await startJournal({ policy: POLICY });
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-lease" });
  });
  after(async () => {
    journal?.close();
    await srv?.stop();
  });

  test("the journal enforces the test policy (getPolicy)", async () => {
    const p = await journal.getPolicy();
    assert.equal(p.source, POLICY, "the policy file as the server loaded it");
    assert.match(p.fingerprint, /^[0-9a-f]{64}$/);
  });

  test("with heartbeats a call slower than the lease completes: succeeded, attempt 1, lease extended in the history", async () => {
    const key = uniqueKey("slow:heartbeat");
    const { fn, seen } = slowCall(3_500, "pay_slow_hb");
    const out = await execute(journal, { key, action: "slow_call", payload: { n: 1 } }, fn);
    assert.ok(out.kind === "succeeded", `${out.kind}: ${JSON.stringify(out)}`);
    assert.equal(out.replayed, false);
    assert.equal(out.externalId, "pay_slow_hb");
    assert.equal(seen.calls, 1);
    assert.equal(seen.ctx!.attempt, 1);
    assert.equal(seen.ctx!.leaseSeconds, LEASE_S, "the lease the journal granted");
    assert.equal(seen.ctx!.signal.aborted, false, "the lease was kept: fn was never told to stop");
    assert.ok(seen.ctx!.deadline > seen.initialDeadline! + 1_500, "heartbeats moved the deadline");

    const rec = await journal.lookup(key);
    assert.equal(rec.status, "succeeded");
    assert.equal(rec.attemptCount, 1, "one attempt: the lease never ran out");
    assert.equal(rec.externalId, "pay_slow_hb");
    const events = await journal.listAllEvents(key);
    const extended = events.filter((e) => e.reason === "lease extended");
    assert.ok(extended.length >= 1, `no "lease extended" event in ${JSON.stringify(reasons(events))}`);
    assert.ok(extended.every((e) => e.attempt === 1));
    assert.ok(!reasons(events).some((r) => r.startsWith("outcome unknown")), JSON.stringify(reasons(events)));
  });

  test("without heartbeats execute gives up at lease − margin, aborts fn, records lease_expired, then the late effect", async () => {
    const key = uniqueKey("slow:no-heartbeat");
    const { fn, seen } = slowCall(3_000, "pay_slow_late");
    const t0 = performance.now();
    const out = await execute(journal, { key, action: "slow_call", payload: { n: 2 } }, fn, { heartbeat: false });
    const elapsed = performance.now() - t0;
    assert.ok(out.kind === "verification_required", `${out.kind}: ${JSON.stringify(out)}`);
    assert.equal(out.errorCode, "lease_expired");
    assert.ok(elapsed >= BUDGET_MS, `gave up after ${elapsed.toFixed(0)} ms, before lease − margin (${BUDGET_MS})`);
    assert.ok(elapsed <= BUDGET_MS + SLACK_MS, `gave up after ${elapsed.toFixed(0)} ms; lease − margin is ${BUDGET_MS}`);
    assert.equal(seen.done, false, "execute stopped waiting for fn");
    assert.equal(seen.ctx!.signal.aborted, true, "fn's signal was aborted");
    assert.ok(UnknownOutcomeError.is(seen.ctx!.signal.reason) && seen.ctx!.signal.reason.code === "lease_expired");
    assert.ok(seen.abortedAt! - t0 <= BUDGET_MS + SLACK_MS);

    const rec = await journal.lookup(key);
    assert.equal(rec.status, "unknown");
    assert.equal(rec.errorCode, "lease_expired");
    assert.ok(!reasons(await journal.listAllEvents(key)).includes("lease extended"), "heartbeat: false sends none");

    // fn confirms its effect after all: the late markSucceeded lands.
    const done = await waitFor("the late effect in the journal", async () => {
      const r = await journal.lookup(key);
      return r.status === "succeeded" ? r : undefined;
    }, { timeoutMs: 10_000 });
    assert.equal(done.externalId, "pay_slow_late");
    assert.deepEqual(done.result, { id: "pay_slow_late" });
    assert.equal(done.attemptCount, 1);
    assert.equal(seen.calls, 1);
  });

  test("max_attempt_seconds caps the heartbeats: execute gives up at its deadline, never later, while the lease is live", async () => {
    const key = uniqueKey("capped");
    const { fn, seen } = slowCall(3_000, "pay_capped");
    const t0 = performance.now();
    const out = await execute(journal, { key, action: "capped_call", payload: { n: 3 } }, fn);
    const elapsed = performance.now() - t0;
    assert.ok(out.kind === "verification_required", `${out.kind}: ${JSON.stringify(out)}`);
    assert.equal(out.errorCode, "lease_expired");
    assert.ok(elapsed >= BUDGET_MS && elapsed <= BUDGET_MS + SLACK_MS,
      `gave up after ${elapsed.toFixed(0)} ms; the capped lease allows ${BUDGET_MS}`);
    assert.equal(seen.done, false, "execute stopped waiting for fn");
    assert.equal(seen.ctx!.signal.aborted, true);
    assert.ok(seen.ctx!.deadline <= seen.initialDeadline!, "a capped grant never moves the deadline later");

    // lease_expired is on the record, so the markUnknown landed while the
    // lease was still live: execute gave up before the journal's lease
    // ended (an expired lease would have refused it, and read "").
    const rec = await journal.lookup(key);
    assert.equal(rec.status, "unknown");
    assert.equal(rec.errorCode, "lease_expired");
    const events = await journal.listAllEvents(key);
    assert.ok(reasons(events).includes("lease extended"), `heartbeats were sent and capped: ${JSON.stringify(reasons(events))}`);
    // On the journal's clock too: the unknown was recorded before
    // attempt_started_at + max_attempt_seconds, the latest any lease of
    // this attempt could end.
    const unknownAt = events.find((e) => e.reason.startsWith("outcome unknown"))?.at;
    assert.ok(unknownAt && rec.attemptStartedAt, JSON.stringify(reasons(events)));
    assert.ok(unknownAt.getTime() < rec.attemptStartedAt.getTime() + LEASE_S * 1000,
      `marked unknown at ${unknownAt.toISOString()}, after attempt_started_at ${rec.attemptStartedAt.toISOString()} + 2 s`);

    await waitFor("the late effect in the journal", async () => {
      const r = await journal.lookup(key);
      return r.status === "succeeded" && r.externalId === "pay_capped" ? r : undefined;
    }, { timeoutMs: 10_000 });
  });
});
