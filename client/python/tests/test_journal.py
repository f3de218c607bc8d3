"""The thin Journal calls against the real opjournal binary, over gRPC."""

import datetime
import unittest

from _harness import Server, new_key

import opjournal

PAYLOAD = {"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
server = None


def setUpModule():
    global server
    server = Server()


def tearDownModule():
    server.stop()


class JournalCallsTest(unittest.TestCase):
    def setUp(self):
        self.j = server.journal()
        self.addCleanup(self.j.close)

    def test_register_claim_mark_lookup(self):
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, view="full")
        self.assertTrue(reg.created)
        self.assertFalse(reg.claimed)
        op = reg.operation
        self.assertIsInstance(op, opjournal.Operation)
        self.assertEqual(op.operation_key, key)
        self.assertEqual(op.action_type, "create_payment")
        self.assertEqual(op.status, "pending")
        self.assertEqual(op.payload, PAYLOAD)
        self.assertIsInstance(op.payload["amount_minor"], int)
        self.assertRegex(op.request_hash, r"^[0-9a-f]{64}$")
        self.assertIsInstance(op.created_at, datetime.datetime)
        self.assertIsNotNone(op.created_at.tzinfo)
        self.assertIsNone(op.lease_until)

        c = self.j.claim(key)
        self.assertTrue(c.claimed)
        self.assertEqual(c.attempt, 1)
        self.assertEqual(c.operation.status, "in_progress")
        self.assertEqual(c.operation.lease_owner, "py-test")
        self.assertGreater(c.lease_until, datetime.datetime.now(datetime.timezone.utc))

        # Anyone else gets a polite no with the time left, not an error.
        other = self.j.claim(key, worker_id="agent-2")
        self.assertFalse(other.claimed)
        self.assertEqual(other.attempt, 0)
        self.assertGreaterEqual(other.retry_after_seconds, 1)

        op = self.j.mark_succeeded(key, 1, "pay_5f2c", {"payment_id": "pay_5f2c", "status": "captured"})
        self.assertEqual(op.status, "succeeded")
        self.assertEqual(op.external_id, "pay_5f2c")
        # The lean answer ("basic", the default): the caller sent the result.
        self.assertIsNone(op.result)
        self.assertIsNone(op.payload)

        looked = self.j.lookup(key)
        self.assertEqual(looked.status, "succeeded")
        self.assertEqual(looked.result, {"payment_id": "pay_5f2c", "status": "captured"})
        self.assertEqual(looked.attempt_count, 1)

    def test_views_of_the_agents_calls(self):
        key = new_key()
        # "basic" (the default) leaves the payload out; "full" carries it.
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.assertIsNone(reg.operation.payload)
        ext = self.j.extend_lease(key, reg.attempt)
        self.assertIsNone(ext.operation.payload)
        self.assertEqual(self.j.extend_lease(key, reg.attempt, view="full").operation.payload, PAYLOAD)
        op = self.j.mark_succeeded(key, reg.attempt, "pay_v", {"payment_id": "pay_v"}, view="full")
        self.assertEqual((op.payload, op.result), (PAYLOAD, {"payment_id": "pay_v"}))
        # A replay carries the stored result in "basic" too, still without the payload.
        again = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.assertEqual((again.next, again.operation.result, again.operation.payload), ("replay", {"payment_id": "pay_v"}, None))
        self.assertEqual(self.j.register(key, "create_payment", PAYLOAD, view="full").operation.payload, PAYLOAD)
        c = self.j.claim(key)
        self.assertEqual((c.operation.result, c.operation.payload), ({"payment_id": "pay_v"}, None))
        # A mark's "basic" answer carries neither.
        key2 = new_key()
        reg2 = self.j.register(key2, "create_payment", PAYLOAD, claim=True)
        failed = self.j.mark_failed_final(key2, reg2.attempt, "card_declined")
        self.assertEqual((failed.status, failed.payload, failed.result), ("failed_final", None, None))
        with self.assertRaises(opjournal.InvalidArgument):
            self.j.register(key, "create_payment", PAYLOAD, view="everything")

    def test_replay_returns_the_stored_result(self):
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.assertTrue(reg.created and reg.claimed)
        self.assertEqual(reg.attempt, 1)
        self.j.mark_succeeded(key, reg.attempt, "pay_1", {"payment_id": "pay_1"})
        # Same intent, keys in another order, the amount in another number form.
        again = self.j.register(key, "create_payment", {"currency": "RUB", "amount_minor": 4.9e5, "order_id": "817"},
                                claim=True)
        self.assertFalse(again.created)
        self.assertFalse(again.claimed)
        self.assertEqual(again.operation.status, "succeeded")
        self.assertEqual(again.operation.result, {"payment_id": "pay_1"})

    def test_same_key_other_parameters_is_payload_mismatch(self):
        key = new_key()
        first = self.j.register(key, "create_payment", PAYLOAD)
        with self.assertRaises(opjournal.PayloadMismatch) as cm:
            self.j.register(key, "create_payment", dict(PAYLOAD, amount_minor=500000))
        e = cm.exception
        self.assertEqual(e.code, "PAYLOAD_MISMATCH")
        self.assertEqual(e.field, "payload")
        self.assertIn("other parameters", e.message)
        self.assertIsInstance(e, opjournal.OpjournalError)
        # Nothing changed.
        self.assertEqual(self.j.lookup(key).request_hash, first.operation.request_hash)

    def test_stale_attempt_is_refused(self):
        # create_ticket is retry_same_key: an unknown operation may be
        # claimed again, which makes attempt 1 stale.
        key = new_key("ticket")
        reg = self.j.register(key, "create_ticket", {"title": "printer on fire"}, claim=True)
        self.j.mark_unknown(key, reg.attempt, "timeout")
        second = self.j.claim(key)
        self.assertTrue(second.claimed)
        self.assertEqual(second.attempt, 2)
        for mark in (lambda: self.j.mark_failed_final(key, 1, "rejected"),
                     lambda: self.j.mark_unknown(key, 1, "timeout")):
            with self.assertRaises(opjournal.StaleAttempt) as cm:
                mark()
            self.assertEqual(cm.exception.code, "STALE_ATTEMPT")
        self.assertEqual(self.j.lookup(key).status, "in_progress")
        # A confirmed effect is a fact, even from a stale attempt.
        op = self.j.mark_succeeded(key, 1, "tkt_1")
        self.assertEqual(op.status, "succeeded")

    def test_a_lost_claim_on_an_unknown_operation_is_not_an_error(self):
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        op = self.j.mark_unknown(key, reg.attempt, "timeout")
        self.assertEqual((op.status, op.error_code), ("unknown", "timeout"))
        self.assertIsNotNone(op.unknown_since)
        c = self.j.claim(key)  # reconcile_before_retry: wait for the reconciler
        self.assertFalse(c.claimed)
        self.assertEqual(c.operation.status, "unknown")

    def test_not_found(self):
        with self.assertRaises(opjournal.NotFound) as cm:
            self.j.lookup(new_key())
        self.assertEqual(cm.exception.code, "NOT_FOUND")

    def test_unknown_action(self):
        with self.assertRaises(opjournal.UnknownAction) as cm:
            self.j.register(new_key(), "launch_rockets", {})
        self.assertEqual(cm.exception.code, "UNKNOWN_ACTION")
        self.assertEqual(cm.exception.field, "action_type")

    def test_float_money_is_invalid_argument(self):
        key = new_key()
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.register(key, "create_payment", dict(PAYLOAD, amount_minor=1.5))
        e = cm.exception
        self.assertEqual(e.code, "INVALID_ARGUMENT")
        self.assertEqual(e.field, "payload/amount_minor")
        self.assertFalse(e.message.startswith("payload/amount_minor"), e.message)
        with self.assertRaises(opjournal.NotFound):
            self.j.lookup(key)  # nothing was registered

    def test_invalid_key_is_refused_by_the_server(self):
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.register("has a space", "create_payment", PAYLOAD)
        self.assertEqual(cm.exception.field, "operation_key")

    def test_numbers_json_cannot_carry_are_refused_before_the_call(self):
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.register(new_key(), "create_payment", dict(PAYLOAD, amount_minor=2 ** 53))
        self.assertEqual(cm.exception.field, "payload/amount_minor")
        self.assertIsNone(cm.exception.grpc_code)  # refused by the client

    def test_duplicate_effect_needs_review(self):
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.j.mark_succeeded(key, reg.attempt, "pay_a")
        op = self.j.mark_succeeded(key, reg.attempt, "pay_b")
        self.assertEqual(op.external_id, "pay_a")
        self.assertEqual(op.duplicate_external_id, "pay_b")
        self.assertTrue(op.needs_review)

    def test_unreachable_journal_is_unavailable(self):
        with opjournal.Journal("127.0.0.1:1", timeout=2) as j:
            with self.assertRaises(opjournal.Unavailable) as cm:
                j.lookup(new_key())
        self.assertEqual(cm.exception.code, "UNAVAILABLE")

    def test_raw_stub_with_the_journal_metadata(self):
        from opjournal.v1 import journal_pb2 as pb
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        resp = self.j.stub.ListEvents(pb.ListEventsRequest(operation_key=key), metadata=self.j.metadata or None,
                                      timeout=5)
        self.assertEqual([(e.reason, e.attempt, e.actor, e.to_status) for e in resp.events],
                         [("registered and claimed", reg.attempt, "py-test", pb.STATUS_IN_PROGRESS)])


class NewCallsTest(unittest.TestCase):
    """The journal's decision (next), leases, views, paging of the history,
    acknowledge, the policy, and the Operation/Event fields."""

    def setUp(self):
        self.j = server.journal()
        self.addCleanup(self.j.close)

    def test_next_and_the_granted_lease(self):
        key = new_key()
        with server.journal(lease_seconds=5) as j5:
            reg = j5.register(key, "create_payment", PAYLOAD, claim=True)
        self.assertEqual((reg.next, reg.lease_seconds, reg.attempt), ("call_provider", 5, 1))
        self.assertIsNotNone(reg.operation.attempt_started_at)
        self.assertEqual(self.j.claim(key, worker_id="agent-2").next, "wait")
        self.j.mark_succeeded(key, 1, "pay_1")
        again = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.assertEqual((again.next, again.lease_seconds, again.claimed), ("replay", 0, False))
        self.assertEqual(self.j.claim(key).next, "replay")

        fresh = new_key()
        self.assertEqual(self.j.register(fresh, "create_payment", PAYLOAD).next, "claim")
        c = self.j.claim(fresh)
        self.assertEqual((c.next, c.attempt), ("call_provider", 1))
        self.assertGreater(c.lease_seconds, 0)
        self.j.mark_failed_final(fresh, 1, "card_declined")
        self.assertEqual(self.j.claim(fresh).next, "failed_final")

        unknown = new_key()
        self.j.register(unknown, "create_payment", PAYLOAD, claim=True)
        self.j.mark_unknown(unknown, 1, "timeout")
        self.assertEqual(self.j.register(unknown, "create_payment", PAYLOAD, claim=True).next,
                         "verification_required")

    def test_views(self):
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.j.mark_succeeded(key, reg.attempt, "pay_v", {"payment_id": "pay_v"})
        full = self.j.lookup(key)
        self.assertEqual((full.payload, full.result), (PAYLOAD, {"payment_id": "pay_v"}))
        self.assertEqual(self.j.lookup(key, view="full"), full)
        basic = self.j.lookup(key, view="basic")
        self.assertEqual((basic.payload, basic.result, basic.external_id), (None, None, "pay_v"))
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.lookup(key, view="everything")
        self.assertEqual(cm.exception.field, "view")

    def test_list_operations(self):
        keys = sorted(new_key("listed") for _ in range(3))
        for k in keys:
            self.j.register(k, "send_email", {"to": k})
        self.j.register(keys[0], "send_email", {"to": keys[0]}, claim=True)
        self.j.mark_unknown(keys[0], 1, "timeout")
        page = self.j.list_operations(statuses=["unknown"], action_type="send_email")
        self.assertIsInstance(page, opjournal.OperationPage)
        self.assertIn(keys[0], [op.operation_key for op in page.operations])
        self.assertTrue(all(op.status == "unknown" for op in page.operations))
        self.assertTrue(all(op.payload is None for op in page.operations))  # basic by default
        full = self.j.list_operations(statuses=["pending"], action_type="send_email", view="full", page_size=1000)
        mine = [op for op in full.operations if op.operation_key in keys]
        self.assertEqual([op.operation_key for op in mine], keys[1:])
        self.assertEqual([op.payload for op in mine], [{"to": k} for k in keys[1:]])
        first = self.j.list_operations(action_type="send_email", page_size=1)
        self.assertEqual(len(first.operations), 1)
        self.assertTrue(first.next_page_token)
        second = self.j.list_operations(action_type="send_email", page_size=1, page_token=first.next_page_token)
        self.assertGreater(second.operations[0].operation_key, first.operations[0].operation_key)
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.list_operations(statuses=["lost"])
        self.assertEqual(cm.exception.field, "statuses")

    def test_list_events_pages_and_stated_actor(self):
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.j.extend_lease(key, reg.attempt)
        self.j.mark_succeeded(key, reg.attempt, "pay_e", actor="payments-webhook")
        want = [("", "in_progress", "registered and claimed", "py-test", ""),
                ("in_progress", "in_progress", "lease extended", "", ""),
                ("in_progress", "succeeded", "effect confirmed", "payments-webhook", "pay_e")]

        def rows(events):
            return [(e.from_status, e.to_status, e.reason, e.stated_actor, e.external_id) for e in events]

        page = self.j.list_events(key)
        self.assertIsInstance(page, opjournal.EventPage)
        self.assertEqual(rows(page.events), want)
        self.assertEqual(page.next_page_token, "")
        self.assertTrue(all(isinstance(e, opjournal.Event) for e in page.events))
        self.assertEqual([e.attempt for e in page.events], [1, 1, 1])
        ids = [e.id for e in page.events]
        self.assertEqual(ids, sorted(ids))
        self.assertIsNotNone(page.events[0].at.tzinfo)

        # One event a page: three pages, then an empty token.
        got, token, pages = [], "", 0
        while True:
            p = self.j.list_events(key, page_size=1, page_token=token)
            self.assertLessEqual(len(p.events), 1)
            got.extend(p.events)
            pages += 1
            token = p.next_page_token
            if not token:
                break
        self.assertEqual(rows(got), want)
        self.assertGreaterEqual(pages, 3)
        self.assertEqual(rows(self.j.iter_events(key, page_size=2)), want)
        with self.assertRaises(opjournal.NotFound):
            self.j.list_events(new_key())

    def test_acknowledge_a_duplicate_effect(self):
        key = new_key()
        reg = self.j.register(key, "create_payment", PAYLOAD, claim=True)
        self.j.mark_succeeded(key, reg.attempt, "pay_a")
        self.j.mark_succeeded(key, reg.attempt, "pay_b")
        op = self.j.mark_succeeded(key, reg.attempt, "pay_c")
        self.assertEqual((op.duplicate_external_ids, op.duplicate_reports), (("pay_b", "pay_c"), 2))
        self.assertTrue(op.needs_review)
        acked = self.j.acknowledge(key, "refunded pay_b and pay_c", actor="ops-anna")
        self.assertFalse(acked.needs_review)
        self.assertEqual((acked.status, acked.external_id), ("succeeded", "pay_a"))
        self.assertEqual(acked.duplicate_external_ids, ("pay_b", "pay_c"))  # kept for the record
        last = list(self.j.iter_events(key))[-1]
        self.assertIn("refunded pay_b and pay_c", last.reason)
        self.assertEqual(last.stated_actor, "ops-anna")
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.acknowledge(key, "", actor="ops-anna")  # a reason is required
        self.assertEqual(cm.exception.field, "reason")

    def test_get_policy(self):
        pol = self.j.get_policy()
        self.assertIsInstance(pol, opjournal.Policy)
        self.assertRegex(pol.fingerprint, r"^[0-9a-f]{64}$")
        self.assertIn("create_payment", pol.source)
        self.assertEqual(self.j.get_policy(), pol)


if __name__ == "__main__":
    unittest.main()
