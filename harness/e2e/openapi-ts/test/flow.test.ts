// The flow of docs/spec.md through a REST client generated from the OpenAPI 3.1
// document (proto/openapi/opjournal.openapi.json → src/opjournal.d.ts by
// openapi-typescript; requests by openapi-fetch), against the real binary:
// register with a claim, mark succeeded, replay, conflict. tsc checks the
// calls and fields against the generated types before anything runs.

import { strict as assert } from "node:assert";
import { after, before, test } from "node:test";

import createClient from "openapi-fetch";

import type { components, paths } from "../src/opjournal.js";
import { startJournal, type Journal } from "../testutil/journal.js";

type ErrorCode = components["schemas"]["ErrorCode"];

let journal: Journal;
before(async () => { journal = await startJournal(); });
after(async () => { await journal?.stop(); });

test("register → claim → markSucceeded → replay → conflict through the generated client", async () => {
  const client = createClient<paths>({ baseUrl: journal.baseUrl });
  const key = "payment:order-817:intent-01";
  const payload = { order_id: "817", amount_minor: 490000, currency: "RUB" };

  // Register before calling the provider, with a claim.
  const reg = await client.POST("/v1/operations:register", {
    body: { operation_key: key, action_type: "create_payment", payload, claim: { worker_id: "ts-agent" } },
  });
  assert.equal(reg.response.status, 200, JSON.stringify(reg.error));
  assert.ok(reg.data);
  assert.equal(reg.data.created, true);
  assert.equal(reg.data.claimed, true);
  assert.equal(reg.data.next, "NEXT_STEP_CALL_PROVIDER");
  assert.equal(reg.data.operation?.status, "STATUS_IN_PROGRESS");
  assert.ok(reg.data.lease_until !== null && !Number.isNaN(Date.parse(reg.data.lease_until)));
  const attempt: number = reg.data.attempt;
  assert.equal(attempt, 1);

  // The provider charged the card: record it.
  const ms = await client.POST("/v1/operations:markSucceeded", {
    body: { operation_key: key, attempt, external_id: "pay_5f2c", result: { payment_id: "pay_5f2c" } },
  });
  assert.equal(ms.response.status, 200, JSON.stringify(ms.error));
  assert.equal(ms.data?.operation?.status, "STATUS_SUCCEEDED");
  assert.equal(ms.data?.operation?.external_id, "pay_5f2c");

  // A retry of the same intent (other member order) replays the stored result.
  const replay = await client.POST("/v1/operations:register", {
    body: { operation_key: key, action_type: "create_payment", payload: { currency: "RUB", amount_minor: 490000, order_id: "817" },
      claim: { worker_id: "ts-agent" } },
  });
  assert.equal(replay.response.status, 200, JSON.stringify(replay.error));
  assert.equal(replay.data?.created, false);
  assert.equal(replay.data?.claimed, false);
  assert.equal(replay.data?.next, "NEXT_STEP_REPLAY");
  assert.deepEqual(replay.data?.operation?.result, { payment_id: "pay_5f2c" });
  assert.equal(replay.data?.operation?.request_hash, reg.data.operation?.request_hash);

  // The same key with another amount is a conflict, in the documented error body.
  const conflict = await client.POST("/v1/operations:register", {
    body: { operation_key: key, action_type: "create_payment", payload: { ...payload, amount_minor: 500000 } },
  });
  assert.equal(conflict.response.status, 422);
  assert.equal(conflict.data, undefined);
  const code: ErrorCode | undefined = conflict.error?.error.code;
  assert.equal(code, "PAYLOAD_MISMATCH");
  assert.equal(conflict.error?.error.field, "payload");
  assert.ok(conflict.error?.error.message);

  // Nothing changed: the record still holds the first result.
  const lk = await client.GET("/v1/operations:lookup", { params: { query: { operation_key: key } } });
  assert.equal(lk.response.status, 200, JSON.stringify(lk.error));
  assert.equal(lk.data?.operation?.status, "STATUS_SUCCEEDED");
  assert.equal(lk.data?.operation?.attempt_count, 1);
  assert.deepEqual(lk.data?.operation?.result, { payment_id: "pay_5f2c" });

  // A missing key is 404 NOT_FOUND.
  const missing = await client.GET("/v1/operations:lookup", { params: { query: { operation_key: "payment:order-817:intent-99" } } });
  assert.equal(missing.response.status, 404);
  assert.equal(missing.error?.error.code, "NOT_FOUND");
});
