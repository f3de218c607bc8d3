"""Business references (refs), parent keys and child operations against the
real opjournal binary: stored and returned, fixed at registration,
searchable; and a payment whose receipt email is its child (child_key), run
twice, with one effect each."""

import json
import unittest
import uuid

from _harness import Provider, Server, new_key, opjournal_request

import opjournal
from opjournal import OutcomeKind

PAYLOAD = {"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
server = None


def setUpModule():
    global server
    server = Server()


def tearDownModule():
    server.stop()


def run_id() -> str:
    """A ref value no other test (or run) uses."""
    return uuid.uuid4().hex[:12]


class RefsTest(unittest.TestCase):
    def setUp(self):
        self.j = server.journal()
        self.addCleanup(self.j.close)

    def test_refs_round_trip(self):
        key = opjournal.new_key()
        refs = {"order_id": "817", "customer": "c-93", "trace.id": "ü-1"}
        reg = self.j.register(key, "create_payment", PAYLOAD, refs=refs, claim=True)
        self.assertTrue(reg.created)
        self.assertEqual(reg.operation.refs, refs)
        self.assertEqual(reg.operation.parent_key, "")
        self.assertIsNotNone(reg.operation.first_attempt_at)
        self.assertEqual(reg.operation.first_attempt_at, reg.operation.attempt_started_at)
        looked = self.j.lookup(key)
        self.assertEqual(looked.refs, refs)
        self.assertIsInstance(looked.refs, dict)
        self.assertEqual(self.j.lookup(key, view="basic").refs, refs)  # refs are in every view

    def test_no_refs_is_an_empty_dict(self):
        key = new_key()
        op = self.j.register(key, "create_payment", PAYLOAD).operation
        self.assertEqual((op.refs, op.parent_key, op.first_attempt_at), ({}, "", None))
        self.j.claim(key)
        self.assertIsNotNone(self.j.lookup(key).first_attempt_at)

    def test_same_refs_replay_other_refs_are_a_mismatch(self):
        key = opjournal.new_key()
        refs = {"order_id": "817", "customer": "c-93"}
        reg = self.j.register(key, "create_payment", PAYLOAD, refs=refs, claim=True)
        self.j.mark_succeeded(key, reg.attempt, "pay_1", {"payment_id": "pay_1"})
        # The same refs (in another order): a replay.
        again = self.j.register(key, "create_payment", PAYLOAD, refs={"customer": "c-93", "order_id": "817"},
                                claim=True)
        self.assertFalse(again.created)
        self.assertEqual(again.next, "replay")
        self.assertEqual(again.operation.result, {"payment_id": "pay_1"})
        # Other refs, fewer refs, no refs: refs are fixed at registration.
        for other in ({"order_id": "818", "customer": "c-93"}, {"order_id": "817"}, None):
            with self.subTest(refs=other):
                with self.assertRaises(opjournal.PayloadMismatch) as cm:
                    self.j.register(key, "create_payment", PAYLOAD, refs=other)
                self.assertEqual(cm.exception.field, "refs")
        self.assertEqual(self.j.lookup(key).refs, refs)

    def test_execute_with_other_refs_is_a_conflict(self):
        key = opjournal.new_key()
        calls = []

        def fn(k, attempt):
            calls.append(k)
            return opjournal.Effect("pay_%d" % len(calls))

        first = opjournal.execute(self.j, key, "create_payment", PAYLOAD, fn, refs={"order_id": "817"})
        self.assertIs(first.kind, OutcomeKind.SUCCEEDED)
        self.assertEqual(first.operation.refs, {"order_id": "817"})
        same = opjournal.execute(self.j, key, "create_payment", PAYLOAD, fn, refs={"order_id": "817"})
        self.assertTrue(same.replayed)
        other = opjournal.execute(self.j, key, "create_payment", PAYLOAD, fn, refs={"order_id": "818"})
        self.assertIs(other.kind, OutcomeKind.CONFLICT)
        self.assertIsInstance(other.cause, opjournal.PayloadMismatch)
        self.assertEqual(other.cause.field, "refs")
        self.assertEqual(calls, [key])

    def test_list_by_refs_needs_every_ref_to_match(self):
        order, other_order = run_id(), run_id()
        a, b, c = (opjournal.new_key() for _ in range(3))
        self.j.register(a, "create_payment", PAYLOAD, refs={"order_id": order, "customer": "c-1"})
        self.j.register(b, "create_payment", PAYLOAD, refs={"order_id": order, "customer": "c-2"})
        self.j.register(c, "create_payment", PAYLOAD, refs={"order_id": other_order, "customer": "c-1"})

        both = self.j.list_operations(refs={"order_id": order, "customer": "c-1"}, page_size=1000)
        self.assertEqual([op.operation_key for op in both.operations], [a])
        self.assertEqual(both.operations[0].refs, {"order_id": order, "customer": "c-1"})
        by_order = self.j.list_operations(refs={"order_id": order}, page_size=1000)
        self.assertEqual([op.operation_key for op in by_order.operations], sorted([a, b]))
        none = self.j.list_operations(refs={"order_id": order, "customer": "c-3"})
        self.assertEqual(none.operations, ())
        # With the other filters as well.
        self.assertEqual(self.j.list_operations(refs={"order_id": order}, statuses=["succeeded"]).operations, ())

    def test_parent_key_recorded_and_listed(self):
        parent = opjournal.new_key()
        self.j.register(parent, "create_payment", PAYLOAD, refs={"order_id": "817"})
        receipt = opjournal.child_key(parent, "receipt_email")
        webhook = opjournal.child_key(parent, "webhook-1")
        for k in (receipt, webhook):
            op = self.j.register(k, "send_email", {"to": "customer-93@example.com"}, parent_key=parent).operation
            self.assertEqual(op.parent_key, parent)
            self.assertEqual(op.refs, {})
        self.assertEqual(self.j.lookup(receipt).parent_key, parent)

        children = self.j.list_operations(parent_key=parent)
        self.assertEqual([op.operation_key for op in children.operations], sorted([receipt, webhook]))
        self.assertTrue(all(op.parent_key == parent for op in children.operations))
        self.assertEqual(self.j.list_operations(parent_key=receipt).operations, ())

        # The same parent replays; another one (or none) is a mismatch.
        again = self.j.register(receipt, "send_email", {"to": "customer-93@example.com"}, parent_key=parent)
        self.assertFalse(again.created)
        for other in (webhook, None):
            with self.subTest(parent_key=other):
                with self.assertRaises(opjournal.PayloadMismatch) as cm:
                    self.j.register(receipt, "send_email", {"to": "customer-93@example.com"}, parent_key=other)
                self.assertEqual(cm.exception.field, "parent_key")
        # A key is never its own parent.
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            k = opjournal.new_key()
            self.j.register(k, "send_email", {"to": "x@example.com"}, parent_key=k)
        self.assertEqual(cm.exception.field, "parent_key")

    def test_invalid_refs(self):
        # What the wire cannot carry is refused before any call...
        for refs, field in (({"order_id": 817}, "refs/order_id"), ({7: "x"}, "refs"), (["order_id"], "refs"),
                            ({"order_id": "\udc80"}, "refs/order_id")):
            with self.subTest(refs=refs):
                with self.assertRaises(opjournal.InvalidArgument) as cm:
                    self.j.register(new_key(), "create_payment", PAYLOAD, refs=refs)
                self.assertEqual(cm.exception.field, field)
                self.assertIsNone(cm.exception.grpc_code)  # the client's own check
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.register(new_key(), "create_payment", PAYLOAD, parent_key=7)
        self.assertEqual(cm.exception.field, "parent_key")
        # ...the rest is the journal's to judge, and it names the field.
        for refs, field in (({"Order": "817"}, "refs"), ({"order_id": ""}, "refs/order_id"),
                            ({"order_id": "a\nb"}, "refs/order_id"),
                            ({"r%d" % i: "v" for i in range(opjournal._limits.MAX_REFS + 1)}, "refs")):
            with self.subTest(refs=refs):
                with self.assertRaises(opjournal.InvalidArgument) as cm:
                    self.j.register(new_key(), "create_payment", PAYLOAD, refs=refs)
                self.assertEqual(cm.exception.field, field)
                self.assertIsNotNone(cm.exception.grpc_code)
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.list_operations(refs={"Order": "817"})
        self.assertEqual(cm.exception.field, "refs")


class ChildOperationTest(unittest.TestCase):
    """The example of docs/spec.md: a payment and its receipt email. The key is
    made once per intent and stored; the business links go in refs; the
    email inside the handler gets a key derived from the payment's."""

    def setUp(self):
        self.j = server.journal()
        self.addCleanup(self.j.close)
        self.payments, self.mail = Provider(), Provider()
        self.addCleanup(self.payments.stop)
        self.addCleanup(self.mail.stop)

    def send(self, provider, key, body):
        with opjournal.urlopen(opjournal_request(provider.url, key, body), timeout=5) as resp:
            return opjournal.Effect(external_id=json.loads(resp.read())["id"])

    def test_payment_and_its_receipt_email_run_twice(self):
        # The orchestrator makes the key when the order asks for a payment,
        # and stores it with the order.
        payment_key = opjournal.new_key()
        email = {"to": "customer-93@example.com", "subject": "Receipt for order 817"}

        def handle():
            paid = opjournal.execute(self.j, payment_key, "create_payment", PAYLOAD,
                                     lambda key, attempt: self.send(self.payments, key, PAYLOAD),
                                     refs={"order_id": "817", "customer": "c-93"})
            self.assertIs(paid.kind, OutcomeKind.SUCCEEDED, paid)
            receipt_key = opjournal.child_key(payment_key, "receipt_email")
            sent = opjournal.execute(self.j, receipt_key, "send_email", email,
                                     lambda key, attempt: self.send(self.mail, key, email),
                                     parent_key=payment_key)
            self.assertIs(sent.kind, OutcomeKind.SUCCEEDED, sent)
            self.assertEqual(sent.operation.parent_key, payment_key)
            return paid, sent

        paid1, sent1 = handle()
        paid2, sent2 = handle()  # the handler runs again after a crash or a timeout upstream
        self.assertEqual((paid1.replayed, sent1.replayed), (False, False))
        self.assertEqual((paid2.replayed, sent2.replayed), (True, True))
        self.assertEqual((paid2.external_id, sent2.external_id), (paid1.external_id, sent1.external_id))
        self.assertEqual((self.payments.calls, self.mail.calls), (1, 1))
        receipt_key = opjournal.child_key(payment_key, "receipt_email")
        self.assertEqual((self.payments.keys, self.mail.keys), ([payment_key], [receipt_key]))
        # The payment is found by its order, the email by its parent.
        by_order = self.j.list_operations(refs={"order_id": "817", "customer": "c-93"}, page_size=1000)
        self.assertIn(payment_key, [op.operation_key for op in by_order.operations])
        children = self.j.list_operations(parent_key=payment_key)
        self.assertEqual([op.operation_key for op in children.operations], [receipt_key])

    def test_decorated_tools_with_refs_and_a_parent(self):
        payments, mail = self.payments, self.mail
        send = self.send

        @opjournal.idempotent(self.j, action="create_payment", key="{payment_key}",
                              payload=["order_id", "amount_minor", "currency"],
                              refs={"order_id": "{order_id}", "customer": "{customer}"})
        def create_payment(payment_key, order_id, customer, amount_minor, currency="RUB", *, op_key):
            return send(payments, op_key, {"order_id": order_id, "amount_minor": amount_minor})

        @opjournal.idempotent(self.j, action="send_email",
                              key=lambda payment_key, **_: opjournal.child_key(payment_key, "receipt_email"),
                              payload=["to"], parent_key="{payment_key}",
                              refs=lambda customer, **_: {"customer": customer})
        def send_receipt(payment_key, customer, to, *, op_key):
            return send(mail, op_key, {"to": to})

        payment_key = opjournal.new_key()
        customer = run_id()
        for _ in range(2):
            paid = create_payment(payment_key, "817", customer, 490000)
            self.assertIs(paid.kind, OutcomeKind.SUCCEEDED)
            self.assertEqual(paid.operation.refs, {"order_id": "817", "customer": customer})
            self.assertEqual(self.j.lookup(payment_key).payload, PAYLOAD)
            sent = send_receipt(payment_key, customer, "customer-93@example.com")
            self.assertIs(sent.kind, OutcomeKind.SUCCEEDED)
            self.assertEqual(sent.operation.parent_key, payment_key)
            self.assertEqual(sent.operation.refs, {"customer": customer})
        self.assertTrue(paid.replayed and sent.replayed)
        self.assertEqual((payments.calls, mail.calls), (1, 1))
        mine = self.j.list_operations(refs={"customer": customer})
        self.assertEqual(sorted(op.operation_key for op in mine.operations),
                         sorted([payment_key, opjournal.child_key(payment_key, "receipt_email")]))

        with self.assertRaises(TypeError):
            opjournal.idempotent(self.j, action="send_email", key="k", refs=["customer"])
        with self.assertRaises(TypeError):
            opjournal.idempotent(self.j, action="send_email", key="k", parent_key=7)


if __name__ == "__main__":
    unittest.main()
