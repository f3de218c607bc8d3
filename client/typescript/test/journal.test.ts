// The Journal's RPCs over the wire, against the real opjournal binary:
// register/claim/mark/lookup, replay, conflicts, stale attempts, typed
// errors, bearer tokens and TLS.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Journal, NextStep, OpjournalError } from "../src/index.js";
import {
  closedPort, makeToken, startJournal, tempDir, uniqueKey, writeTokensFile, type JournalServer,
} from "../testutil/harness.js";

const payment = (amount: number) => ({ order_id: "817", amount_minor: amount, currency: "RUB" });

/** Awaits p and returns its OpjournalError, failing if it resolves or throws something else. */
async function journalErr(p: Promise<unknown>): Promise<OpjournalError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof OpjournalError, `want an OpjournalError, got ${String(e)}`);
    return e;
  }
  assert.fail("the call succeeded; want an OpjournalError");
}

describe("Journal over gRPC", () => {
  let srv: JournalServer;
  let journal: Journal;

  before(async () => {
    srv = await startJournal();
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-agent-1" });
  });
  after(async () => {
    journal?.close();
    await srv?.stop();
  });

  test("register, claim, markSucceeded, lookup; a repeat replays the stored result", async () => {
    const key = uniqueKey("payment:order-817");
    const reg = await journal.register({ key, action: "create_payment", payload: payment(490000) }, { view: "full" });
    assert.equal(reg.created, true);
    assert.equal(reg.claimed, false);
    assert.equal(reg.operation.status, "pending");
    assert.equal(reg.operation.operationKey, key);
    assert.equal(reg.operation.actionType, "create_payment");
    assert.match(reg.operation.requestHash, /^[0-9a-f]{64}$/);
    assert.deepEqual(reg.operation.payload, payment(490000));
    assert.ok(reg.operation.createdAt instanceof Date);

    const claim = await journal.claim(key);
    assert.equal(claim.claimed, true);
    assert.equal(claim.attempt, 1);
    assert.ok(claim.leaseUntil instanceof Date && claim.leaseUntil.getTime() > Date.now() - 5_000);
    assert.equal(claim.operation.status, "in_progress");
    assert.equal(claim.operation.leaseOwner, "ts-agent-1");

    const other = await journal.claim(key, { workerId: "ts-agent-2" });
    assert.equal(other.claimed, false, "a second worker must not get the lease");
    assert.ok(other.retryAfterSeconds > 0);
    assert.equal(other.operation.status, "in_progress");

    const done = await journal.markSucceeded({
      key, attempt: 1, externalId: "pay_5f2c", result: { payment_id: "pay_5f2c", status: "captured" },
    });
    assert.equal(done.status, "succeeded");
    assert.equal(done.externalId, "pay_5f2c");
    assert.deepEqual([done.payload, done.result], [null, null], "a mark's answer is basic by default");

    const seen = await journal.lookup(key);
    assert.equal(seen.status, "succeeded");
    assert.equal(seen.attemptCount, 1);
    assert.deepEqual(seen.result, { payment_id: "pay_5f2c", status: "captured" });

    // Same intent, keys in another order and 4.9e5 for 490000: a replay.
    const again = await journal.register({
      key, action: "create_payment", payload: { currency: "RUB", amount_minor: 4.9e5, order_id: "817" }, claim: true,
    });
    assert.equal(again.created, false);
    assert.equal(again.claimed, false);
    assert.equal(again.operation.status, "succeeded");
    assert.deepEqual(again.operation.result, { payment_id: "pay_5f2c", status: "captured" });
    assert.equal(again.operation.requestHash, reg.operation.requestHash);
  });

  test("the agent's calls answer in the basic view unless asked for full; a replay keeps the stored result", async () => {
    const key = uniqueKey("payment:views");
    const reg = await journal.register({ key, action: "create_payment", payload: payment(100), claim: true });
    assert.equal(reg.operation.payload, null);
    const ext = await journal.extendLease(key, reg.attempt);
    assert.equal(ext.operation.payload, null);
    assert.deepEqual((await journal.extendLease(key, reg.attempt, 0, { view: "full" })).operation.payload, payment(100));
    const done = await journal.markSucceeded({ key, attempt: reg.attempt, externalId: "pay_v", result: { payment_id: "pay_v" } }, { view: "full" });
    assert.deepEqual([done.payload, done.result], [payment(100), { payment_id: "pay_v" }]);
    const again = await journal.register({ key, action: "create_payment", payload: payment(100), claim: true });
    assert.deepEqual([again.operation.payload, again.operation.result], [null, { payment_id: "pay_v" }]);
    const claim = await journal.claim(key);
    assert.deepEqual([claim.operation.payload, claim.operation.result], [null, { payment_id: "pay_v" }]);
    assert.deepEqual((await journal.register({ key, action: "create_payment", payload: payment(100) }, { view: "full" })).operation.payload, payment(100));

    const key2 = uniqueKey("payment:views-failed");
    const reg2 = await journal.register({ key: key2, action: "create_payment", payload: payment(100), claim: true });
    const failed = await journal.markFailedFinal({ key: key2, attempt: reg2.attempt, errorCode: "card_declined" });
    assert.deepEqual([failed.status, failed.payload, failed.result], ["failed_final", null, null]);
  });

  test("register with claim takes the lease in one round trip", async () => {
    const key = uniqueKey("payment:claim");
    const reg = await journal.register({ key, action: "create_payment", payload: payment(100), claim: true });
    assert.equal(reg.created, true);
    assert.equal(reg.claimed, true);
    assert.equal(reg.attempt, 1);
    assert.ok(reg.leaseUntil instanceof Date);
    assert.equal(reg.operation.status, "in_progress");
  });

  test("the same key with other parameters is PAYLOAD_MISMATCH and changes nothing", async () => {
    const key = uniqueKey("payment:conflict");
    await journal.register({ key, action: "create_payment", payload: payment(490000) });
    const err = await journalErr(journal.register({ key, action: "create_payment", payload: payment(500000) }));
    assert.equal(err.code, "PAYLOAD_MISMATCH");
    assert.equal(err.field, "payload");
    assert.match(err.message, /^opjournal: register ".*": PAYLOAD_MISMATCH: payload: /);
    const op = await journal.lookup(key);
    assert.equal(op.status, "pending");
    assert.deepEqual(op.payload, payment(490000));
  });

  test("a stale attempt is refused with STALE_ATTEMPT and changes nothing", async () => {
    // create_ticket is retry_same_key: after an unknown outcome the next claim gets attempt 2.
    const key = uniqueKey("ticket:stale");
    const reg = await journal.register({ key, action: "create_ticket", payload: { title: "printer" }, claim: true });
    assert.equal(reg.attempt, 1);
    const unknown = await journal.markUnknown({ key, attempt: 1, errorCode: "timeout" });
    assert.equal(unknown.status, "unknown");
    assert.equal(unknown.errorCode, "timeout");
    const second = await journal.claim(key, { workerId: "ts-agent-2" });
    assert.equal(second.claimed, true);
    assert.equal(second.attempt, 2);

    const stale = await journalErr(journal.markFailedFinal({ key, attempt: 1, errorCode: "rejected" }));
    assert.equal(stale.code, "STALE_ATTEMPT");
    assert.equal(stale.grpcCode, 9); // FAILED_PRECONDITION
    const staleUnknown = await journalErr(journal.markUnknown({ key, attempt: 1, errorCode: "timeout" }));
    assert.equal(staleUnknown.code, "STALE_ATTEMPT");
    let op = await journal.lookup(key);
    assert.equal(op.status, "in_progress");
    assert.equal(op.attemptCount, 2);
    assert.equal(op.leaseOwner, "ts-agent-2");

    const never = await journalErr(journal.markUnknown({ key, attempt: 3, errorCode: "timeout" }));
    assert.equal(never.code, "INVALID_ARGUMENT", "an attempt that was never issued");
    assert.equal(never.field, "attempt");

    // A confirmed effect is a fact, even from a stale attempt.
    op = await journal.markSucceeded({ key, attempt: 1, externalId: "tkt_1" });
    assert.equal(op.status, "succeeded");
    assert.equal(op.externalId, "tkt_1");
  });

  test("UNKNOWN_ACTION, INVALID_ARGUMENT (amount_minor 1.5) and NOT_FOUND are typed errors", async () => {
    const ua = await journalErr(journal.register({ key: uniqueKey("rocket"), action: "launch_rocket", payload: {} }));
    assert.equal(ua.code, "UNKNOWN_ACTION");
    assert.equal(ua.grpcCode, 3); // INVALID_ARGUMENT

    const key = uniqueKey("payment:float");
    const ia = await journalErr(journal.register({ key, action: "create_payment", payload: payment(1.5) }));
    assert.equal(ia.code, "INVALID_ARGUMENT");
    assert.equal(ia.field, "payload/amount_minor");
    const nf = await journalErr(journal.lookup(key));
    assert.equal(nf.code, "NOT_FOUND", "a refused register must store nothing");
  });

  test("numbers JSON cannot carry exactly are refused before sending", async () => {
    const key = uniqueKey("payment:big");
    const err = await journalErr(journal.register({ key, action: "create_payment", payload: payment(2 ** 53) }));
    assert.equal(err.code, "INVALID_ARGUMENT");
    assert.equal(err.field, "payload/amount_minor");
    assert.equal(err.grpcCode, undefined, "refused on the client");
    const nan = await journalErr(journal.register({ key, action: "create_payment", payload: { amount_minor: NaN } }));
    assert.equal(nan.field, "payload/amount_minor");
  });

  test("an unreachable journal is UNAVAILABLE", async () => {
    const port = await closedPort();
    const j = new Journal({ baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 5_000 });
    try {
      const err = await journalErr(j.lookup("k"));
      assert.equal(err.code, "UNAVAILABLE");
    } finally {
      j.close();
    }
  });

  test("a call ended by the caller's signal is CANCELED", async () => {
    const ac = new AbortController();
    ac.abort();
    const err = await journalErr(journal.lookup("k", { signal: ac.signal }));
    assert.equal(err.code, "CANCELED");
  });
});

describe("Journal: next steps, heartbeats, duplicates, history, views, policy", () => {
  let srv: JournalServer;
  let journal: Journal;

  before(async () => {
    srv = await startJournal();
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-agent-1" });
  });
  after(async () => {
    journal?.close();
    await srv?.stop();
  });

  test("register and claim carry the journal's next step and the lease it granted", async () => {
    const key = uniqueKey("payment:next");
    const reg = await journal.register({ key, action: "create_payment", payload: payment(100), claim: true });
    assert.equal(reg.next, NextStep.CALL_PROVIDER);
    assert.equal(reg.leaseSeconds, 30, "the policy's lease_seconds for create_payment");
    assert.equal(reg.attempt, 1);

    const other = await journal.register({ key, action: "create_payment", payload: payment(100), claim: { workerId: "ts-agent-2" } });
    assert.equal(other.next, NextStep.WAIT);
    assert.equal(other.claimed, false);
    assert.equal(other.leaseSeconds, 0, "no lease for the loser");
    assert.ok(other.retryAfterSeconds > 0);
    const lost = await journal.claim(key, { workerId: "ts-agent-2" });
    assert.equal(lost.next, NextStep.WAIT);

    await journal.markSucceeded({ key, attempt: 1, externalId: "pay_next" });
    const replay = await journal.register({ key, action: "create_payment", payload: payment(100), claim: true });
    assert.equal(replay.next, NextStep.REPLAY);

    const key2 = uniqueKey("payment:next-claim");
    const pending = await journal.register({ key: key2, action: "create_payment", payload: payment(100) });
    assert.equal(pending.next, NextStep.CLAIM, "registered without a claim: claim it");
    const claim = await journal.claim(key2, { leaseSeconds: 5 });
    assert.equal(claim.next, NextStep.CALL_PROVIDER);
    assert.equal(claim.leaseSeconds, 5, "the lease asked for");
    await journal.markUnknown({ key: key2, attempt: 1, errorCode: "timeout" });
    const verify = await journal.claim(key2);
    assert.equal(verify.next, NextStep.VERIFICATION_REQUIRED);
  });

  test("extendLease extends the holder's live lease, within the policy; anyone else is refused", async () => {
    const key = uniqueKey("payment:extend");
    const claim = await journal.register({ key, action: "create_payment", payload: payment(100), claim: { leaseSeconds: 5 } });
    assert.equal(claim.leaseSeconds, 5);
    const ext = await journal.extendLease(key, 1);
    assert.ok(ext.leaseSeconds >= 29 && ext.leaseSeconds <= 30, `granted ${ext.leaseSeconds}: 0 asks for the policy's 30`);
    assert.ok(ext.leaseUntil instanceof Date && ext.leaseUntil.getTime() > claim.leaseUntil!.getTime() + 20_000);
    assert.equal(ext.operation.status, "in_progress");
    assert.ok(ext.operation.attemptStartedAt instanceof Date);
    assert.equal(ext.operation.attemptStartedAt!.getTime(), claim.operation.attemptStartedAt!.getTime(),
      "a heartbeat does not restart the attempt");
    const ten = await journal.extendLease(key, 1, 10);
    assert.ok(ten.leaseSeconds >= 9 && ten.leaseSeconds <= 10, `granted ${ten.leaseSeconds}`);

    const tooLong = await journalErr(journal.extendLease(key, 1, 31));
    assert.equal(tooLong.code, "INVALID_ARGUMENT");
    assert.equal(tooLong.field, "lease_seconds");
    const never = await journalErr(journal.extendLease(key, 2));
    assert.equal(never.code, "INVALID_ARGUMENT", "an attempt that was never issued");
    await journal.markUnknown({ key, attempt: 1, errorCode: "timeout" });
    const stale = await journalErr(journal.extendLease(key, 1));
    assert.equal(stale.code, "STALE_ATTEMPT", "an ended lease is never revived");
    const events = await journal.listAllEvents(key);
    assert.equal(events.filter((e) => e.reason === "lease extended").length, 2);
  });

  test("duplicate effects are kept and counted; acknowledge clears the review, never the status", async () => {
    const key = uniqueKey("payment:dup");
    await journal.register({ key, action: "create_payment", payload: payment(100), claim: true });
    let op = await journal.markSucceeded({ key, attempt: 1, externalId: "pay_1" });
    assert.deepEqual([op.needsReview, op.duplicateExternalIds, op.duplicateReports], [false, [], 0]);
    op = await journal.markSucceeded({ key, attempt: 1, externalId: "pay_2", actor: "late-worker" });
    assert.equal(op.needsReview, true);
    assert.equal(op.externalId, "pay_1", "the first confirmed effect is kept");
    assert.deepEqual(op.duplicateExternalIds, ["pay_2"]);
    assert.equal(op.duplicateExternalId, "pay_2");
    assert.equal(op.duplicateReports, 1);
    op = await journal.markSucceeded({ key, attempt: 1, externalId: "pay_3" });
    op = await journal.markSucceeded({ key, attempt: 1, externalId: "pay_2" });
    assert.deepEqual(op.duplicateExternalIds, ["pay_2", "pay_3"], "distinct, oldest first");
    assert.equal(op.duplicateReports, 3, "every report counts");

    const missing = await journalErr(journal.acknowledge(key, "", "ops-1"));
    assert.equal(missing.code, "INVALID_ARGUMENT", "a reason is required");
    const acked = await journal.acknowledge(key, "refunded pay_2 and pay_3", "ops-1");
    assert.equal(acked.needsReview, false);
    assert.equal(acked.status, "succeeded");
    assert.equal(acked.externalId, "pay_1");
    const again = await journalErr(journal.acknowledge(key, "again", "ops-1"));
    assert.equal(again.code, "INVALID_STATE", "nothing under review to acknowledge");

    const events = await journal.listAllEvents(key);
    const last = events[events.length - 1]!;
    assert.equal(last.statedActor, "ops-1");
    assert.match(last.reason, /refunded pay_2 and pay_3/);
    assert.ok(events.some((e) => e.statedActor === "late-worker" && e.externalId === "pay_2"), "the stated actor of a report");
  });

  test("listEvents pages through the history; listAllEvents collects every page", async () => {
    const key = uniqueKey("ticket:history");
    await journal.register({ key, action: "create_ticket", payload: { title: "t" }, claim: true });
    await journal.markUnknown({ key, attempt: 1, errorCode: "timeout" });
    await journal.claim(key);
    await journal.markSucceeded({ key, attempt: 2, externalId: "tkt_1" });

    const pages: string[][] = [];
    const ids: bigint[] = [];
    let pageToken = "";
    do {
      const page = await journal.listEvents(key, { pageSize: 2, pageToken });
      assert.ok(page.events.length <= 2);
      pages.push(page.events.map((e) => e.reason));
      ids.push(...page.events.map((e) => e.id));
      pageToken = page.nextPageToken;
    } while (pageToken !== "" && pages.length < 10);
    assert.equal(pages.length, 2, `4 events in pages of 2: ${JSON.stringify(pages)}`);
    const all = await journal.listAllEvents(key, { pageSize: 1 });
    assert.deepEqual(all.map((e) => e.id), ids, "the same history, whatever the page size");
    assert.ok(ids.every((id, i) => i === 0 || id > ids[i - 1]!), "oldest first");
    assert.equal(all[0]!.fromStatus, null, "the registration has no status before");
    assert.equal(all[0]!.toStatus, "in_progress");
    assert.equal(all[0]!.statedActor, "ts-agent-1", "the worker id it stated");
    assert.deepEqual(all.map((e) => e.attempt), [1, 1, 2, 2]);
    assert.ok(all.every((e) => e.at instanceof Date));
    assert.equal(all[3]!.externalId, "tkt_1");
    assert.equal(all[3]!.toStatus, "succeeded");
  });

  test("views: lookup and listOperations leave out payload and result in the basic view", async () => {
    const key = uniqueKey("email:view");
    await journal.register({ key, action: "send_email", payload: { to: "a@example.com" }, claim: true });
    await journal.markSucceeded({ key, attempt: 1, externalId: "eml_1", result: { message_id: "eml_1" } });
    const full = await journal.lookup(key);
    assert.deepEqual([full.payload, full.result], [{ to: "a@example.com" }, { message_id: "eml_1" }]);
    const basic = await journal.lookup(key, { view: "basic" });
    assert.deepEqual([basic.payload, basic.result, basic.externalId, basic.status], [null, null, "eml_1", "succeeded"]);
    assert.deepEqual((await journal.lookup(key, { view: "full" })).result, { message_id: "eml_1" });

    const listed = await journal.listOperations({ action: "send_email", statuses: ["succeeded"] });
    const mine = listed.operations.find((o) => o.operationKey === key);
    assert.ok(mine, "listed");
    assert.equal(mine.payload, null, "listOperations defaults to basic");
    const listedFull = await journal.listOperations({ action: "send_email", statuses: ["succeeded"], view: "full" });
    assert.deepEqual(listedFull.operations.find((o) => o.operationKey === key)?.result, { message_id: "eml_1" });
    const none = await journal.listOperations({ action: "send_email", statuses: ["failed_final"] });
    assert.ok(!none.operations.some((o) => o.operationKey === key), "filtered by status");

    const bad = await journalErr(journal.lookup(key, { view: "everything" as "full" }));
    assert.equal(bad.field, "view");
  });

  test("getPolicy returns the enforced policy's fingerprint and source", async () => {
    const p = await journal.getPolicy();
    assert.match(p.fingerprint, /^[0-9a-f]{64}$/);
    assert.match(p.source, /create_payment:/);
    assert.deepEqual(await journal.getPolicy(), p, "the same policy, the same fingerprint");
  });
});

describe("bearer tokens (--auth-file)", () => {
  let srv: JournalServer;
  let agent: { token: string; entry: string };
  let recon: { token: string; entry: string };
  const tmp = tempDir();

  before(async () => {
    agent = await makeToken("t", "x", "agent");
    recon = await makeToken("r", "x", "reconciler");
    const file = writeTokensFile(tmp.dir, [agent.entry, recon.entry]);
    srv = await startJournal({ args: ["--auth-file", file] });
  });
  after(async () => {
    await srv?.stop();
    tmp.cleanup();
  });

  test("a valid token is sent as authorization: Bearer and accepted", async () => {
    const j = new Journal({ baseUrl: srv.baseUrl, token: agent.token });
    try {
      const key = uniqueKey("payment:auth");
      const reg = await j.register({ key, action: "create_payment", payload: payment(100), claim: true });
      assert.equal(reg.claimed, true);
      assert.equal((await j.lookup(key)).status, "in_progress");
    } finally {
      j.close();
    }
  });

  test("a missing or wrong token is UNAUTHENTICATED; a role without the right is PERMISSION_DENIED", async () => {
    const none = new Journal({ baseUrl: srv.baseUrl });
    const wrong = new Journal({ baseUrl: srv.baseUrl, token: "opj_not-a-real-token" });
    const reconciler = new Journal({ baseUrl: srv.baseUrl, token: recon.token });
    try {
      const e1 = await journalErr(none.lookup("k"));
      assert.equal(e1.code, "UNAUTHENTICATED");
      const e2 = await journalErr(wrong.register({ key: "k", action: "create_payment", payload: payment(1) }));
      assert.equal(e2.code, "UNAUTHENTICATED");
      assert.ok(!e2.message.includes("opj_not-a-real-token"), "the token must not appear in errors");
      const e3 = await journalErr(reconciler.register({ key: "k", action: "create_payment", payload: payment(1) }));
      assert.equal(e3.code, "PERMISSION_DENIED");
    } finally {
      none.close();
      wrong.close();
      reconciler.close();
    }
    assert.ok(!srv.logs.join("\n").includes(agent.token), "the server must not log tokens");
  });

  test("a token is never sent in clear text to another host unless insecure is set", () => {
    assert.throws(() => new Journal({ baseUrl: "http://10.9.8.7:9090", token: agent.token }),
      (e: unknown) => e instanceof OpjournalError && e.code === "INVALID_ARGUMENT" && e.field === "token"
        && !e.message.includes(agent.token));
    new Journal({ baseUrl: "http://10.9.8.7:9090", token: agent.token, insecure: true }).close();
    new Journal({ baseUrl: "https://10.9.8.7:9090", token: agent.token }).close();
    new Journal({ baseUrl: "10.9.8.7:9090", tls: true, token: agent.token }).close();
  });
});

describe("TLS (--tls-cert/--tls-key)", () => {
  const tmp = tempDir();
  let srv: JournalServer;
  let ca: string;

  before(async () => {
    // A self-signed certificate for 127.0.0.1 from Go's own generator (Go is needed anyway).
    const go = process.env["GO"] || "go";
    const goroot = execFileSync(go, ["env", "GOROOT"], { encoding: "utf8" }).trim();
    execFileSync(go, ["run", join(goroot, "src", "crypto", "tls", "generate_cert.go"),
      "--host", "127.0.0.1,localhost", "--ecdsa-curve", "P256", "--duration", "1h"], { cwd: tmp.dir, stdio: "pipe" });
    const cert = join(tmp.dir, "cert.pem");
    const key = join(tmp.dir, "key.pem");
    ca = readFileSync(cert, "utf8");
    srv = await startJournal({ args: ["--tls-cert", cert, "--tls-key", key], tls: true });
  });
  after(async () => {
    await srv?.stop();
    tmp.cleanup();
  });

  test("talks to a TLS journal with its CA, and refuses an untrusted certificate", async () => {
    const j = new Journal({ baseUrl: `http://${srv.grpcAddr}`, tls: { ca } });
    const untrusted = new Journal({ baseUrl: srv.baseUrl, timeoutMs: 5_000 });
    try {
      const key = uniqueKey("payment:tls");
      const reg = await j.register({ key, action: "create_payment", payload: payment(100) });
      assert.equal(reg.created, true);
      const err = await journalErr(untrusted.lookup(key));
      assert.equal(err.code, "UNAVAILABLE");
    } finally {
      j.close();
      untrusted.close();
    }
  });
});
