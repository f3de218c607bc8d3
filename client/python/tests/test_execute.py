"""execute() and @idempotent against the real opjournal binary and a real
HTTP provider that counts its calls (effects are counted at the provider)."""

import socket
import threading
import unittest

from _harness import Provider, Server, new_key

import opjournal
from opjournal import Effect, OutcomeKind, Rejected

PAYLOAD = {"order_id": "817", "amount_minor": 490000, "currency": "RUB"}
server = None


def setUpModule():
    global server
    server = Server()


def tearDownModule():
    server.stop()


class ExecuteTest(unittest.TestCase):
    def setUp(self):
        self.j = server.journal()
        self.addCleanup(self.j.close)
        self.p = Provider()
        self.addCleanup(self.p.stop)
        self.fn_calls = []

    def pay(self, key, attempt, timeout=5.0):
        self.fn_calls.append((key, attempt))
        return self.p.pay(key, PAYLOAD, timeout=timeout)

    def test_success_then_retry_replays_without_calling_fn(self):
        key = new_key()
        out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertIs(out.kind, OutcomeKind.SUCCEEDED)
        self.assertTrue(out.ok)
        self.assertFalse(out.replayed)
        self.assertEqual(out.external_id, "pay_1")
        self.assertEqual(out.result, {"payment_id": "pay_1", "status": "captured"})
        self.assertEqual(out.operation.status, "succeeded")
        self.assertEqual(self.fn_calls, [(key, 1)])
        self.assertEqual(self.p.keys, [key])  # the key went to the provider

        for _ in range(3):
            again = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
            self.assertEqual(again.kind, "succeeded")
            self.assertTrue(again.replayed)
            self.assertEqual(again.result, out.result)
            self.assertEqual(again.external_id, "pay_1")
        self.assertEqual(len(self.fn_calls), 1)
        self.assertEqual(self.p.calls, 1)
        self.assertIs(again.check(), again)

    def test_replays_keep_the_first_answers_member_order(self):
        # The journal stores a result as a map: the first answer and every
        # replay must read in one member order (sorted), nested members too,
        # or an application comparing answers sees two different results.
        key = new_key()
        result = {"status": "captured", "payment_id": "pay_9", "amount_minor": 490000, "currency": "RUB",
                  "meta": {"z": 1, "a": 2, "m": [{"y": 1, "b": 2}]}, "b": True, "a": None}

        def order(r):
            return [list(r), list(r["meta"]), list(r["meta"]["m"][0])]

        first = opjournal.execute(self.j, key, "create_payment", PAYLOAD,
                                  lambda k, a: Effect(external_id="pay_9", result=result))
        self.assertIs(first.kind, OutcomeKind.SUCCEEDED)
        stored = sorted(k for k, v in result.items() if v is not None)  # null members are "not set"
        self.assertEqual(order(first.result), [stored, ["a", "m", "z"], ["b", "y"]])
        for _ in range(20):
            again = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
            self.assertTrue(again.replayed)
            self.assertEqual(order(again.result), order(first.result))
            self.assertEqual(order(self.j.lookup(key, view="full").result), order(first.result))
        self.assertEqual(self.fn_calls, [])

    def test_timeout_is_unknown_and_a_retry_calls_nothing(self):
        key = new_key()
        self.p.mode = "hang"
        out = opjournal.execute(self.j, key, "create_payment", PAYLOAD,
                                lambda k, a: self.pay(k, a, timeout=0.3))
        self.assertTrue(self.p.entered.wait(10))  # the request reached the provider
        self.p.release.set()
        self.assertIs(out.kind, OutcomeKind.VERIFICATION_REQUIRED)
        self.assertEqual(out.error_code, "timeout")
        self.assertIsInstance(out.cause, (TimeoutError, socket.timeout, OSError))
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", "timeout"))

        self.p.mode = "ok"
        again = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertIs(again.kind, OutcomeKind.VERIFICATION_REQUIRED)
        self.assertEqual(again.error_code, "timeout")
        self.assertIsNone(again.cause)
        self.assertEqual(len(self.fn_calls), 1)
        self.assertEqual(self.p.calls, 1)
        with self.assertRaises(opjournal.NotSucceeded) as cm:
            again.check()
        self.assertIn("verification required", str(cm.exception))

    def test_5xx_is_unknown(self):
        key = new_key()
        self.p.mode = "503"
        out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertIs(out.kind, OutcomeKind.VERIFICATION_REQUIRED)
        self.assertEqual(out.error_code, "http_503")
        self.assertIsInstance(out.cause, opjournal.UnknownOutcome)
        self.assertEqual(out.cause.status, 503)
        self.assertEqual(self.j.lookup(key).status, "unknown")

    def test_rejected_is_failed_final_and_stays_final(self):
        key = new_key()
        self.p.mode = "reject"
        out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertIs(out.kind, OutcomeKind.FAILED_FINAL)
        self.assertEqual(out.error_code, "http_400")
        self.assertIsInstance(out.cause, Rejected)
        self.assertIn(b"card_declined", out.cause.body)
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("failed_final", "http_400"))

        self.p.mode = "ok"
        again = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertIs(again.kind, OutcomeKind.FAILED_FINAL)
        self.assertTrue(again.replayed)
        self.assertEqual(again.error_code, "http_400")
        self.assertEqual(self.p.calls, 1)

    def test_rejected_raised_by_fn(self):
        key = new_key()

        def fn(k, a):
            raise Rejected("card_declined", "the bank said no")

        out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, fn)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.FAILED_FINAL, "card_declined"))
        self.assertEqual(self.j.lookup(key).status, "failed_final")

    def test_any_other_exception_is_unknown(self):
        cases = [
            (ConnectionResetError("reset by peer"), "connection_error"),
            (ZeroDivisionError("a bug"), "error"),
            (Rejected("card_declined"), "card_declined"),  # control: final
        ]
        for exc, code in cases:
            key = new_key()

            def fn(k, a, exc=exc):
                raise exc

            out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, fn)
            self.assertEqual(out.error_code, code)
            self.assertIs(out.cause, exc)
            want = "failed_final" if isinstance(exc, Rejected) else "unknown"
            self.assertEqual(self.j.lookup(key).status, want)

    def test_a_bug_in_fn_is_logged_and_described_not_silent(self):
        # The regression: a quick start whose fn used an undefined name got
        # a bare verification_required, the NameError only in out.cause.
        key = new_key()

        def charge(k, a):
            return PROVIDER_URL_NOT_DEFINED  # noqa: F821 - the bug under test

        with self.assertLogs("opjournal", "ERROR") as logs:
            out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, charge)
        # Still unknown: the journal cannot know whether fn reached the provider first.
        self.assertIs(out.kind, OutcomeKind.VERIFICATION_REQUIRED)
        self.assertEqual(out.error_code, "error")
        self.assertEqual(self.j.lookup(key).status, "unknown")
        self.assertIsInstance(out.cause, NameError)
        self.assertEqual(out.message, "NameError: name 'PROVIDER_URL_NOT_DEFINED' is not defined")
        [rec] = logs.records
        self.assertIn(key, rec.getMessage())
        self.assertIn("NameError: name 'PROVIDER_URL_NOT_DEFINED' is not defined", rec.getMessage())
        self.assertIs(rec.exc_info[1], out.cause)
        text = logs.output[0]
        self.assertIn("Traceback (most recent call last)", text)
        self.assertIn("in charge", text)  # the traceback points at the bug
        with self.assertRaises(opjournal.NotSucceeded) as cm:
            out.check()
        self.assertIn("NameError", str(cm.exception))

    def test_a_provider_observation_is_described_but_not_logged_as_a_bug(self):
        key = new_key()
        self.p.mode = "503"
        with self.assertNoLogs("opjournal", "ERROR"):
            out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "http_503"))
        self.assertEqual(out.message, "opjournal.UnknownOutcome: outcome unknown (http_503): provider answered 503 "
                         "Service Unavailable")

    def test_conflict_calls_nothing(self):
        key = new_key()
        self.assertTrue(opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay).ok)
        out = opjournal.execute(self.j, key, "create_payment", dict(PAYLOAD, amount_minor=500000), self.pay)
        self.assertIs(out.kind, OutcomeKind.CONFLICT)
        self.assertIsNone(out.operation)
        self.assertIsInstance(out.cause, opjournal.PayloadMismatch)
        self.assertEqual(self.p.calls, 1)
        self.assertEqual(len(self.fn_calls), 1)

    def test_in_progress_elsewhere(self):
        key = new_key()
        entered, release = threading.Event(), threading.Event()
        result = {}

        def slow(k, a):
            entered.set()
            release.wait(10)
            return Effect("pay_slow", {"payment_id": "pay_slow"})

        def first():
            with server.journal(worker_id="agent-1") as j1:
                result["out"] = opjournal.execute(j1, key, "create_payment", PAYLOAD, slow)

        t = threading.Thread(target=first)
        t.start()
        try:
            self.assertTrue(entered.wait(10))
            out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
            self.assertIs(out.kind, OutcomeKind.IN_PROGRESS_ELSEWHERE)
            self.assertGreaterEqual(out.retry_after, 1)
            self.assertLessEqual(out.retry_after, 30)
            self.assertEqual(out.operation.status, "in_progress")
            self.assertEqual(out.operation.lease_owner, "agent-1")
            self.assertEqual(self.fn_calls, [])
        finally:
            release.set()
            t.join(10)
        self.assertIs(result["out"].kind, OutcomeKind.SUCCEEDED)
        self.assertEqual(result["out"].external_id, "pay_slow")
        again = opjournal.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertTrue(again.replayed)
        self.assertEqual(again.result, {"payment_id": "pay_slow"})
        self.assertEqual(self.fn_calls, [])

    def test_fn_may_return_a_dict_or_none(self):
        key = new_key()
        out = opjournal.execute(self.j, key, "create_payment", PAYLOAD,
                                lambda k, a: {"external_id": "pay_d", "result": {"x": 1}})
        self.assertEqual((out.external_id, out.result), ("pay_d", {"x": 1}))
        key = new_key()
        out = opjournal.execute(self.j, key, "create_payment", PAYLOAD, lambda k, a: None)
        self.assertEqual((out.kind, out.external_id, out.result), (OutcomeKind.SUCCEEDED, "", None))

    def test_fn_returning_something_else_is_recorded_as_unknown(self):
        key = new_key()
        with self.assertRaises(TypeError) as cm:
            opjournal.execute(self.j, key, "create_payment", PAYLOAD, lambda k, a: "pay_1")
        self.assertIn("invalid_effect", str(cm.exception))
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", "invalid_effect"))

    def test_keyboard_interrupt_is_recorded_and_reraised(self):
        key = new_key()

        def fn(k, a):
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            opjournal.execute(self.j, key, "create_payment", PAYLOAD, fn)
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", "interrupted"))

    def test_a_result_the_journal_refuses_does_not_lose_the_effect(self):
        key = new_key()
        with self.assertRaises(opjournal.ResultNotStored) as cm:
            opjournal.execute(self.j, key, "create_payment", PAYLOAD,
                              lambda k, a: Effect("pay_big", {"n": 2 ** 60}))
        e = cm.exception
        self.assertEqual(e.field, "result/n")
        self.assertIs(e.outcome.kind, OutcomeKind.SUCCEEDED)
        self.assertIsNone(e.outcome.result)
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.external_id, op.result), ("succeeded", "pay_big", None))

    def test_invalid_op_is_refused_before_any_call(self):
        for key, action, payload, field in [
            ("", "create_payment", PAYLOAD, "operation_key"),
            ("has space", "create_payment", PAYLOAD, "operation_key"),
            ("k" * 201, "create_payment", PAYLOAD, "operation_key"),
            (new_key(), "", PAYLOAD, "action_type"),
            (new_key(), "create_payment", None, "payload"),
            (new_key(), "create_payment", [1, 2], "payload"),
        ]:
            with self.assertRaises(opjournal.InvalidArgument) as cm:
                opjournal.execute(self.j, key, action, payload, self.pay)
            self.assertEqual(cm.exception.field, field)
        self.assertEqual(self.fn_calls, [])

    def test_journal_errors_are_raised(self):
        with self.assertRaises(opjournal.UnknownAction):
            opjournal.execute(self.j, new_key(), "launch_rockets", {}, self.pay)
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            opjournal.execute(self.j, new_key(), "create_payment", dict(PAYLOAD, amount_minor=1.5), self.pay)
        self.assertEqual(cm.exception.field, "payload/amount_minor")
        self.assertEqual(self.fn_calls, [])

    def test_retry_same_key_action_claims_again_after_unknown(self):
        # create_ticket's policy is retry_same_key: the provider dedups by our
        # key, so the next execute may call fn again, with the next attempt.
        key = new_key("ticket")
        attempts = []

        def fn(k, a):
            attempts.append(a)
            if a == 1:
                raise TimeoutError("read timed out")
            return Effect("tkt_1")

        first = opjournal.execute(self.j, key, "create_ticket", {"title": "x"}, fn)
        self.assertEqual((first.kind, first.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "timeout"))
        second = opjournal.execute(self.j, key, "create_ticket", {"title": "x"}, fn)
        self.assertIs(second.kind, OutcomeKind.SUCCEEDED)
        self.assertEqual(attempts, [1, 2])


class NotRecordedTest(unittest.TestCase):
    def test_a_journal_gone_mid_call_raises_not_recorded(self):
        own = Server()
        self.addCleanup(own.stop)
        key = new_key()
        with own.journal(timeout=2) as j:
            def fn(k, a):
                own.stop(kill=True)  # the journal dies while the provider is called
                return Effect("pay_lost")

            with self.assertRaises(opjournal.NotRecorded) as cm:
                opjournal.execute(j, key, "create_payment", PAYLOAD, fn)
        e = cm.exception
        self.assertIsInstance(e, opjournal.OpjournalError)
        self.assertIs(e.observed, OutcomeKind.SUCCEEDED)
        self.assertEqual((e.key, e.attempt, e.external_id), (key, 1, "pay_lost"))
        self.assertIsInstance(e.error, opjournal.Unavailable)
        self.assertIn("unknown once its lease expires", str(e))


class IdempotentDecoratorTest(unittest.TestCase):
    def setUp(self):
        self.j = server.journal()
        self.addCleanup(self.j.close)
        self.p = Provider()
        self.addCleanup(self.p.stop)

    def test_decorated_tool(self):
        seen = []
        order = new_key("order").split(":")[1]
        provider = self.p

        @opjournal.idempotent(self.j, action="create_payment",
                              key=lambda order_id, **_: f"payment:{order_id}:intent-01")
        def create_payment(order_id, amount_minor, currency="RUB", *, op_key, attempt):
            seen.append((op_key, attempt))
            return provider.pay(op_key, {"order_id": order_id, "amount_minor": amount_minor, "currency": currency})

        key = f"payment:{order}:intent-01"
        out = create_payment(order, 490000)
        self.assertIs(out.kind, OutcomeKind.SUCCEEDED)
        self.assertEqual(out.operation.operation_key, key)
        # The payload is the call's arguments, defaults included (stored:
        # the outcome's record is the lean answer, without it).
        self.assertIsNone(out.operation.payload)
        self.assertEqual(self.j.lookup(key).payload, {"order_id": order, "amount_minor": 490000, "currency": "RUB"})
        self.assertEqual(seen, [(key, 1)])
        self.assertEqual(self.p.keys, [key])

        # Keywords or positions: the same intent, replayed.
        again = create_payment(order_id=order, currency="RUB", amount_minor=490000)
        self.assertTrue(again.replayed)
        self.assertEqual(again.result, out.result)
        # Other parameters under the same key: a conflict, nothing called.
        conflict = create_payment(order, 500000)
        self.assertIs(conflict.kind, OutcomeKind.CONFLICT)
        self.assertEqual(len(seen), 1)
        self.assertEqual(self.p.calls, 1)

        with self.assertRaises(TypeError):
            create_payment(order, 490000, op_key="mine")
        self.assertEqual(create_payment.__name__, "create_payment")

    def test_template_key_payload_subset_and_no_reserved_params(self):
        calls = []

        @opjournal.idempotent(self.j, action="send_email", key="email:{to}:{template}",
                              payload=["to", "template"])
        def send_email(to, template, trace_id=None):
            calls.append((to, template, trace_id))
            return {"external_id": "msg_1"}

        to = new_key("user").split(":")[1] + "@example.com"
        out = send_email(to, "welcome", trace_id="t-1")
        self.assertEqual(out.operation.operation_key, f"email:{to}:welcome")
        self.assertEqual(self.j.lookup(out.operation.operation_key).payload, {"to": to, "template": "welcome"})
        # trace_id is not part of the payload: another one is the same intent.
        self.assertTrue(send_email(to, "welcome", trace_id="t-2").replayed)
        self.assertEqual(calls, [(to, "welcome", "t-1")])

    def test_decorated_tool_that_times_out(self):
        @opjournal.idempotent(self.j, action="create_payment", key="payment:{order_id}:intent-01",
                              payload=lambda order_id, amount_minor: {"order_id": order_id,
                                                                      "amount_minor": amount_minor,
                                                                      "currency": "RUB"})
        def pay(order_id, amount_minor, **kw):
            raise socket.timeout("timed out")

        order = new_key("order").split(":")[1]
        out = pay(order, 100)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "timeout"))
        self.assertEqual(self.j.lookup(out.operation.operation_key).payload["currency"], "RUB")


if __name__ == "__main__":
    unittest.main()
