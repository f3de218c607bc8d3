// Business references (refs), parent keys and child operations against the
// real opjournal binary: stored and returned, fixed at registration,
// searchable; and a payment whose receipt email is its child (childKey),
// run twice, with one effect each.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

import {
  childKey, classifyHttp, execute, idempotent, Journal, limits, newKey, OpjournalError, type AttemptContext, type Effect,
} from "../src/index.js";
import { Provider, startJournal, uniqueKey, type JournalServer } from "../testutil/harness.js";

const payment = { order_id: "817", amount_minor: 490000, currency: "RUB" };
const email = { to: "customer-93@example.com", subject: "Receipt for order 817" };

/** A ref value no other test (or run) uses. */
const runId = () => randomUUID().slice(0, 12);

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

/** fn that POSTs body to url with the key as Idempotency-Key. */
function post(url: string, body: object) {
  return async (ctx: AttemptContext): Promise<Effect> => {
    const res = await fetch(url, {
      method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json", "Idempotency-Key": ctx.key },
      // remainingMs() is fractional; AbortSignal.timeout wants whole milliseconds.
      signal: AbortSignal.any([ctx.signal, AbortSignal.timeout(Math.max(1, Math.floor(ctx.remainingMs())))]),
    });
    const err = classifyHttp(res);
    if (err) throw err;
    return { externalId: ((await res.json()) as { id: string }).id };
  };
}

describe("refs and parent keys", () => {
  let srv: JournalServer;
  let journal: Journal;
  let payments: Provider;
  let mail: Provider;

  before(async () => {
    [srv, payments, mail] = await Promise.all([startJournal(), new Provider().start(), new Provider().start()]);
    journal = new Journal({ baseUrl: srv.baseUrl, workerId: "ts-refs" });
  });
  after(async () => {
    journal?.close();
    await Promise.all([srv?.stop(), payments?.close(), mail?.close()]);
  });

  test("refs round trip; an operation without them has none", async () => {
    const key = newKey();
    const refs = { order_id: "817", customer: "c-93", "trace.id": "ü-1" };
    const reg = await journal.register({ key, action: "create_payment", payload: payment, refs, claim: true });
    assert.equal(reg.created, true);
    assert.deepEqual(reg.operation.refs, refs);
    assert.equal(reg.operation.parentKey, "");
    assert.ok(reg.operation.firstAttemptAt instanceof Date);
    assert.deepEqual(reg.operation.firstAttemptAt, reg.operation.attemptStartedAt);
    assert.deepEqual((await journal.lookup(key)).refs, refs);
    assert.deepEqual((await journal.lookup(key, { view: "basic" })).refs, refs, "refs are in every view");

    const plain = uniqueKey("payment:plain");
    const op = (await journal.register({ key: plain, action: "create_payment", payload: payment })).operation;
    assert.deepEqual([op.refs, op.parentKey, op.firstAttemptAt], [{}, "", null]);
    await journal.claim(plain);
    assert.ok((await journal.lookup(plain)).firstAttemptAt instanceof Date);
  });

  test("the same refs replay; other refs are PAYLOAD_MISMATCH on field refs", async () => {
    const key = newKey();
    const refs = { order_id: "817", customer: "c-93" };
    const reg = await journal.register({ key, action: "create_payment", payload: payment, refs, claim: true });
    await journal.markSucceeded({ key, attempt: reg.attempt, externalId: "pay_1", result: { payment_id: "pay_1" } });
    const again = await journal.register({
      key, action: "create_payment", payload: payment, refs: { customer: "c-93", order_id: "817" }, claim: true,
    });
    assert.equal(again.created, false);
    assert.deepEqual(again.operation.result, { payment_id: "pay_1" });
    for (const other of [{ order_id: "818", customer: "c-93" }, { order_id: "817" }, undefined]) {
      const e = await journalErr(journal.register({ key, action: "create_payment", payload: payment, refs: other }));
      assert.equal(e.code, "PAYLOAD_MISMATCH", JSON.stringify(other));
      assert.equal(e.field, "refs", JSON.stringify(other));
    }
    assert.deepEqual((await journal.lookup(key)).refs, refs);
  });

  test("execute with other refs is a conflict on field refs; nothing is called", async () => {
    const key = newKey();
    let calls = 0;
    const fn = () => ({ externalId: `pay_${++calls}` });
    const first = await execute(journal, { key, action: "create_payment", payload: payment, refs: { order_id: "817" } }, fn);
    assert.ok(first.kind === "succeeded");
    assert.deepEqual(first.operation.refs, { order_id: "817" });
    const same = await execute(journal, { key, action: "create_payment", payload: payment, refs: { order_id: "817" } }, fn);
    assert.ok(same.kind === "succeeded" && same.replayed);
    const other = await execute(journal, { key, action: "create_payment", payload: payment, refs: { order_id: "818" } }, fn);
    assert.ok(other.kind === "conflict");
    assert.equal(other.field, "refs");
    const otherPayload = await execute(journal, { key, action: "create_payment", payload: { ...payment, amount_minor: 1 }, refs: { order_id: "817" } }, fn);
    assert.ok(otherPayload.kind === "conflict");
    assert.equal(otherPayload.field, "payload");
    assert.equal(calls, 1);
  });

  test("listOperations by refs: every given ref must match", async () => {
    const order = runId();
    const otherOrder = runId();
    const [a, b, c] = [newKey(), newKey(), newKey()];
    await journal.register({ key: a, action: "create_payment", payload: payment, refs: { order_id: order, customer: "c-1" } });
    await journal.register({ key: b, action: "create_payment", payload: payment, refs: { order_id: order, customer: "c-2" } });
    await journal.register({ key: c, action: "create_payment", payload: payment, refs: { order_id: otherOrder, customer: "c-1" } });

    const both = await journal.listOperations({ refs: { order_id: order, customer: "c-1" }, pageSize: 1000 });
    assert.deepEqual(both.operations.map((o) => o.operationKey), [a]);
    assert.deepEqual(both.operations[0]?.refs, { order_id: order, customer: "c-1" });
    const byOrder = await journal.listOperations({ refs: { order_id: order }, pageSize: 1000 });
    assert.deepEqual(byOrder.operations.map((o) => o.operationKey), [a, b].sort());
    assert.deepEqual((await journal.listOperations({ refs: { order_id: order, customer: "c-3" } })).operations, []);
    assert.deepEqual((await journal.listOperations({ refs: { order_id: order }, statuses: ["succeeded"] })).operations, []);
  });

  test("parentKey is recorded, listed and fixed at registration", async () => {
    const parent = newKey();
    await journal.register({ key: parent, action: "create_payment", payload: payment, refs: { order_id: "817" } });
    const receipt = childKey(parent, "receipt_email");
    const webhook = childKey(parent, "webhook-1");
    for (const k of [receipt, webhook]) {
      const op = (await journal.register({ key: k, action: "send_email", payload: email, parentKey: parent })).operation;
      assert.equal(op.parentKey, parent);
      assert.deepEqual(op.refs, {});
    }
    assert.equal((await journal.lookup(receipt)).parentKey, parent);

    const children = await journal.listOperations({ parentKey: parent });
    assert.deepEqual(children.operations.map((o) => o.operationKey), [receipt, webhook].sort());
    assert.ok(children.operations.every((o) => o.parentKey === parent));
    assert.deepEqual((await journal.listOperations({ parentKey: receipt })).operations, []);

    assert.equal((await journal.register({ key: receipt, action: "send_email", payload: email, parentKey: parent })).created, false);
    for (const other of [webhook, undefined]) {
      const e = await journalErr(journal.register({ key: receipt, action: "send_email", payload: email, parentKey: other }));
      assert.equal(e.code, "PAYLOAD_MISMATCH");
      assert.equal(e.field, "parent_key");
    }
    const own = newKey();
    const e = await journalErr(journal.register({ key: own, action: "send_email", payload: email, parentKey: own }));
    assert.deepEqual([e.code, e.field], ["INVALID_ARGUMENT", "parent_key"]);
  });

  test("invalid refs: what the wire cannot carry is refused before any call, the rest by the journal", async () => {
    const cases: Array<[unknown, string]> = [
      [{ order_id: 817 }, "refs/order_id"], [["order_id"], "refs"], [{ order_id: "a\udc80" }, "refs/order_id"],
      [JSON.parse('{"__proto__": "x"}'), "refs"],
    ];
    for (const [refs, field] of cases) {
      const e = await journalErr(journal.register({
        key: uniqueKey("payment:refs"), action: "create_payment", payload: payment, refs: refs as Record<string, string>,
      }));
      assert.deepEqual([e.code, e.field, e.grpcCode], ["INVALID_ARGUMENT", field, undefined], JSON.stringify(refs));
    }
    const pe = await journalErr(journal.register({
      key: uniqueKey("payment:refs"), action: "create_payment", payload: payment, parentKey: 7 as unknown as string,
    }));
    assert.equal(pe.field, "parent_key");
    const many: Record<string, string> = {};
    for (let i = 0; i <= limits.MAX_REFS; i++) many[`r${i}`] = "v";
    const server: Array<[Record<string, string>, string]> = [
      [{ Order: "817" }, "refs"], [{ order_id: "" }, "refs/order_id"], [{ order_id: "a\nb" }, "refs/order_id"], [many, "refs"],
    ];
    for (const [refs, field] of server) {
      const e = await journalErr(journal.register({ key: uniqueKey("payment:refs"), action: "create_payment", payload: payment, refs }));
      assert.equal(e.code, "INVALID_ARGUMENT", JSON.stringify(refs));
      assert.equal(e.field, field, JSON.stringify(refs));
      assert.notEqual(e.grpcCode, undefined, "the journal's answer");
    }
    assert.equal((await journalErr(journal.listOperations({ refs: { Order: "817" } }))).field, "refs");
    // execute checks before it sends anything.
    const xe = await journalErr(execute(journal, {
      key: newKey(), action: "create_payment", payload: payment, refs: { order_id: 817 } as unknown as Record<string, string>,
    }, () => assert.fail("fn called")));
    assert.equal(xe.field, "refs/order_id");
  });

  // The example of docs/spec.md: a payment and its receipt email. The key is made
  // once per intent and stored; the business links go in refs; the email
  // inside the handler gets a key derived from the payment's.
  test("a payment and its receipt email (a child): the handler runs twice, one effect each", async () => {
    // The orchestrator makes the key when the order asks for a payment, and stores it with the order.
    const paymentKey = newKey();
    const handle = async () => {
      const paid = await execute(journal, {
        key: paymentKey, action: "create_payment", payload: payment, refs: { order_id: "817", customer: "c-93" },
      }, post(`${payments.url}/payments`, payment));
      assert.ok(paid.kind === "succeeded", JSON.stringify(paid));
      const sent = await execute(journal, {
        key: childKey(paymentKey, "receipt_email"), action: "send_email", payload: email, parentKey: paymentKey,
      }, post(`${mail.url}/messages`, email));
      assert.ok(sent.kind === "succeeded", JSON.stringify(sent));
      assert.equal(sent.operation.parentKey, paymentKey);
      return [paid, sent] as const;
    };
    const [paid1, sent1] = await handle();
    const [paid2, sent2] = await handle(); // the handler runs again after a crash or a timeout upstream
    assert.deepEqual([paid1.replayed, sent1.replayed, paid2.replayed, sent2.replayed], [false, false, true, true]);
    assert.deepEqual([paid2.externalId, sent2.externalId], [paid1.externalId, sent1.externalId]);
    const receiptKey = childKey(paymentKey, "receipt_email");
    assert.deepEqual([payments.callsFor(paymentKey), mail.callsFor(receiptKey)], [1, 1]);
    assert.deepEqual(mail.calls.filter((c) => c.idempotencyKey === receiptKey).map((c) => c.path), ["/messages"]);

    const byOrder = await journal.listOperations({ refs: { order_id: "817", customer: "c-93" }, pageSize: 1000 });
    assert.ok(byOrder.operations.some((o) => o.operationKey === paymentKey));
    assert.deepEqual((await journal.listOperations({ parentKey: paymentKey })).operations.map((o) => o.operationKey), [receiptKey]);
  });

  test("idempotent tools with refs and a parent", async () => {
    interface PayArgs { paymentKey: string; orderId: string; customer: string; amountMinor: number }
    const pay = idempotent(journal, {
      action: "create_payment",
      key: (a: PayArgs) => a.paymentKey,
      payload: (a) => ({ order_id: a.orderId, amount_minor: a.amountMinor, currency: "RUB" }),
      refs: (a) => ({ order_id: a.orderId, customer: a.customer }),
    }, (a, ctx) => post(`${payments.url}/payments`, { order_id: a.orderId })(ctx));
    interface ReceiptArgs { paymentKey: string; customer: string; to: string }
    const sendReceipt = idempotent(journal, {
      action: "send_email",
      key: (a: ReceiptArgs) => childKey(a.paymentKey, "receipt_email"),
      payload: (a) => ({ to: a.to }),
      refs: (a) => ({ customer: a.customer }),
      parentKey: (a) => a.paymentKey,
    }, (a, ctx) => post(`${mail.url}/messages`, { to: a.to })(ctx));

    const paymentKey = newKey();
    const customer = runId();
    for (const expectReplay of [false, true]) {
      const paid = await pay({ paymentKey, orderId: "817", customer, amountMinor: 490000 });
      assert.ok(paid.kind === "succeeded");
      assert.equal(paid.replayed, expectReplay);
      assert.deepEqual(paid.operation.refs, { order_id: "817", customer });
      assert.deepEqual((await journal.lookup(paid.key)).payload, payment);
      const sent = await sendReceipt({ paymentKey, customer, to: email.to });
      assert.ok(sent.kind === "succeeded");
      assert.equal(sent.replayed, expectReplay);
      assert.equal(sent.operation.parentKey, paymentKey);
      assert.deepEqual(sent.operation.refs, { customer });
    }
    const receiptKey = childKey(paymentKey, "receipt_email");
    assert.deepEqual([payments.callsFor(paymentKey), mail.callsFor(receiptKey)], [1, 1]);
    const mine = await journal.listOperations({ refs: { customer } });
    assert.deepEqual(mine.operations.map((o) => o.operationKey), [paymentKey, receiptKey].sort());
  });
});
