"""Lease-bounded execution: execute waits for fn only until the end of the
lease the journal granted minus the safety margin, keeps the lease alive by
heartbeats, and gives up (unknown, "lease_expired") when it cannot.

Against the real opjournal binary with a test policy of 1-2 second leases,
and against a FakeJournal for the answers a real server will not give on
demand (refused or failing heartbeats, a refused MarkUnknown)."""

import threading
import time
import unittest

from _fake import FakeJournal, claimed
from _harness import Provider, Server, new_key, opjournal_request, policy_file, wait_for

import opjournal
from opjournal import Effect, OutcomeKind
from opjournal._limits import (HEARTBEAT_DIVISOR, HEARTBEAT_MIN_SECONDS, LEASE_MARGIN_DIVISOR,
                               LEASE_MARGIN_MAX_SECONDS, LEASE_MARGIN_MIN_SECONDS)
from opjournal.execute import _heartbeat_interval, _lease_margin
from opjournal.v1 import journal_pb2 as pb

#: The lease of the test policy's actions, in seconds.
LEASE = 2
#: How much later than its deadline execute may return (scheduling, RPCs).
SLACK = 1.0
#: The same against a FakeJournal, which answers at once.
FAKE_SLACK = 0.3

POLICY = """\
actions:
  # A lease of {lease} s; max_attempt_seconds defaults to 10 leases.
  slow_payment:
    operation_key: required
    lease_seconds: {lease}
    integer_fields: [amount_minor]
  # Heartbeats may not keep an attempt beyond its first lease.
  capped_payment:
    operation_key: required
    lease_seconds: {lease}
    max_attempt_seconds: {lease}
  # For waiting out a lease in the thin-call test.
  short_payment:
    operation_key: required
    lease_seconds: 1
""".format(lease=LEASE)

PAYLOAD = {"order_id": "817", "amount_minor": 490000, "currency": "RUB"}


def margin(lease):
    """The safety margin, computed here from the generated limits."""
    return min(max(lease / LEASE_MARGIN_DIVISOR, LEASE_MARGIN_MIN_SECONDS), LEASE_MARGIN_MAX_SECONDS)


server = None


def setUpModule():
    global server
    server = Server("--policy", policy_file(POLICY))


def tearDownModule():
    server.stop()


def reasons(j, key):
    return [(e.reason, e.attempt) for e in j.iter_events(key)]


class RulesTest(unittest.TestCase):
    def test_margin_and_interval_follow_the_generated_limits(self):
        for lease in (0.5, 1, 2, 3, 30, 60, 1000):
            self.assertAlmostEqual(_lease_margin(lease), margin(lease))
            self.assertGreaterEqual(_lease_margin(lease), LEASE_MARGIN_MIN_SECONDS)
            self.assertLessEqual(_lease_margin(lease), LEASE_MARGIN_MAX_SECONDS)
            self.assertAlmostEqual(_heartbeat_interval(lease), max(lease / HEARTBEAT_DIVISOR, HEARTBEAT_MIN_SECONDS))
        mid = LEASE_MARGIN_MIN_SECONDS * LEASE_MARGIN_DIVISOR * 1.5  # neither bound applies
        self.assertAlmostEqual(_lease_margin(mid), mid / LEASE_MARGIN_DIVISOR)

    def test_deadline(self):
        d = opjournal.Deadline(time.monotonic() + 5)
        self.assertGreater(d.remaining(), 4)
        self.assertFalse(d.expired())
        d.event.set()  # execute gave up
        self.assertEqual(d.remaining(), 0)
        self.assertTrue(d.expired())
        past = opjournal.Deadline(time.monotonic() - 1)
        self.assertEqual(past.remaining(), 0)
        self.assertTrue(past.expired())
        with self.assertRaises(TimeoutError):  # nothing is sent after the deadline
            opjournal.urlopen("http://127.0.0.1:1/never", deadline=past)


class ServerLeaseTest(unittest.TestCase):
    """The real journal."""

    def setUp(self):
        self.j = server.journal()
        self.addCleanup(self.j.close)

    def test_heartbeats_keep_a_call_slower_than_the_lease_alive(self):
        key = new_key()
        calls, seen = [], {}
        other = server.journal(worker_id="observer")
        self.addCleanup(other.close)

        def slow(k, attempt, *, deadline):
            calls.append(attempt)
            start = time.monotonic()
            # The provider takes a second longer than the whole lease; stop
            # early only if execute gives up.
            deadline.event.wait(LEASE + 1.0)
            seen["elapsed"] = time.monotonic() - start
            # Past the end of the first lease, the journal still sees a live
            # lease (an expired one reads as unknown).
            seen["status"] = other.lookup(k).status
            return Effect("pay_slow", {"payment_id": "pay_slow"})

        out = opjournal.execute(self.j, key, "slow_payment", PAYLOAD, slow)
        self.assertIs(out.kind, OutcomeKind.SUCCEEDED, out)
        self.assertFalse(out.replayed)
        self.assertEqual(out.external_id, "pay_slow")
        self.assertEqual(calls, [1])
        self.assertGreater(seen["elapsed"], LEASE)
        self.assertEqual(seen["status"], "in_progress")
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.attempt_count, op.external_id), ("succeeded", 1, "pay_slow"))
        history = reasons(self.j, key)
        self.assertGreaterEqual(history.count(("lease extended", 1)), 2, history)
        self.assertFalse([r for r, _ in history if r.startswith("outcome unknown")], history)
        self.assertEqual(history[-1], ("effect confirmed", 1))

    def test_without_heartbeats_execute_gives_up_at_the_deadline(self):
        key = new_key()
        release, calls, got = threading.Event(), [], {}

        def slow(k, attempt, *, deadline):
            calls.append(attempt)
            got["deadline"] = deadline
            release.wait(10)  # the provider answers only when the test says so
            return Effect("pay_late", {"payment_id": "pay_late"})

        self.addCleanup(release.set)
        t = time.monotonic()
        out = opjournal.execute(self.j, key, "slow_payment", PAYLOAD, slow, heartbeat=False)
        elapsed = time.monotonic() - t
        self.assertIs(out.kind, OutcomeKind.VERIFICATION_REQUIRED, out)
        self.assertEqual(out.error_code, "lease_expired")
        self.assertGreaterEqual(elapsed, LEASE - margin(LEASE))
        self.assertLessEqual(elapsed, LEASE - margin(LEASE) + SLACK)
        self.assertTrue(got["deadline"].event.is_set())
        self.assertTrue(got["deadline"].expired())
        self.assertEqual((out.operation.status, out.operation.error_code), ("unknown", "lease_expired"))
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", "lease_expired"))
        self.assertNotIn(("lease extended", 1), reasons(self.j, key))

        # The provider answers after all: the confirmed effect is recorded
        # by the abandoned attempt.
        release.set()
        op = wait_for(lambda: (lambda o: o if o.status == "succeeded" else None)(self.j.lookup(key)),
                      what="the late effect to be recorded")
        self.assertEqual((op.external_id, op.result, op.attempt_count), ("pay_late", {"payment_id": "pay_late"}, 1))
        self.assertEqual(calls, [1])
        history = [r for r, _ in reasons(self.j, key)]
        self.assertEqual(history[-2:], ["outcome unknown: lease_expired", "effect confirmed"])
        # A retry replays the late effect; fn is not called again.
        again = opjournal.execute(self.j, key, "slow_payment", PAYLOAD, slow)
        self.assertEqual((again.kind, again.replayed, again.external_id), (OutcomeKind.SUCCEEDED, True, "pay_late"))
        self.assertEqual(calls, [1])

    def test_max_attempt_seconds_ends_the_heartbeats_and_execute_gives_up_in_time(self):
        key = new_key()
        calls = []

        def slow(k, attempt, *, deadline):
            calls.append(attempt)
            deadline.event.wait(10)
            raise TimeoutError("gave up with execute")  # after execute gave up: changes nothing

        t = time.monotonic()
        out = opjournal.execute(self.j, key, "capped_payment", PAYLOAD, slow)
        elapsed = time.monotonic() - t
        self.assertIs(out.kind, OutcomeKind.VERIFICATION_REQUIRED, out)
        self.assertEqual(out.error_code, "lease_expired")
        # Never later than the first lease allows: heartbeats cannot extend
        # it past max_attempt_seconds.
        self.assertLessEqual(elapsed, LEASE - margin(LEASE) + SLACK)
        self.assertEqual(calls, [1])
        # The MarkUnknown landed while the lease was live: a give-up after
        # the lease's end would have been refused, leaving no error_code.
        op = self.j.lookup(key)
        self.assertEqual((op.status, op.error_code, op.attempt_count), ("unknown", "lease_expired", 1))
        history = reasons(self.j, key)
        self.assertIn(("lease extended", 1), history)  # heartbeats were sent, but granted no more
        self.assertEqual(history[-1], ("outcome unknown: lease_expired", 1))
        self.assertIsNotNone(op.attempt_started_at)

    def test_urlopen_bounds_the_provider_call_by_the_deadline(self):
        p = Provider()
        self.addCleanup(p.stop)
        p.mode = "hang"
        key = new_key()

        def pay(k, attempt, *, deadline):
            req = opjournal_request(p.url, k, PAYLOAD)
            with opjournal.urlopen(req, timeout=30, deadline=deadline) as resp:
                return Effect("pay_never", {"r": resp.status})

        t = time.monotonic()
        out = opjournal.execute(self.j, key, "slow_payment", PAYLOAD, pay)
        elapsed = time.monotonic() - t
        # The socket timed out at the first deadline (not after 30 s); the
        # heartbeats had moved the deadline on, so fn's timeout is recorded.
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "timeout"))
        self.assertLessEqual(elapsed, LEASE - margin(LEASE) + SLACK)
        self.assertEqual(p.calls, 1)
        self.assertEqual(self.j.lookup(key).error_code, "timeout")

    def test_the_decorator_passes_the_deadline_and_heartbeat(self):
        got = []

        @opjournal.idempotent(self.j, action="slow_payment", key="payment:{order_id}:intent-01",
                              heartbeat=False)
        def pay(order_id, amount_minor, *, op_key, deadline):
            got.append((op_key, deadline))
            deadline.event.wait(10)
            return None  # late, an effect without id: recorded succeeded

        order = new_key("order").split(":")[1]
        out = pay(order, 100)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "lease_expired"))
        # no deadline in it
        self.assertEqual(self.j.lookup(out.operation.operation_key).payload, {"order_id": order, "amount_minor": 100})
        (op_key, deadline), = got
        self.assertEqual(op_key, "payment:%s:intent-01" % order)
        self.assertIsInstance(deadline, opjournal.Deadline)
        self.assertTrue(deadline.event.is_set())
        self.assertNotIn(("lease extended", 1), reasons(self.j, op_key))
        with self.assertRaises(TypeError):
            pay(order, 100, deadline=None)  # supplied by the journal, never by the caller

    def test_extend_lease_thin_call(self):
        key = new_key()
        reg = self.j.register(key, "slow_payment", PAYLOAD, claim=True)
        self.assertEqual((reg.next, reg.lease_seconds), ("call_provider", LEASE))
        ext = self.j.extend_lease(key, reg.attempt)
        self.assertIsInstance(ext, opjournal.LeaseExtension)
        self.assertGreaterEqual(ext.lease_seconds, LEASE - 1)
        self.assertLessEqual(ext.lease_seconds, LEASE)
        self.assertEqual(ext.operation.status, "in_progress")
        self.assertGreaterEqual(ext.lease_until, reg.lease_until)
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.extend_lease(key, reg.attempt, lease_seconds=LEASE + 1)  # beyond the policy
        self.assertEqual(cm.exception.field, "lease_seconds")
        with self.assertRaises(opjournal.InvalidArgument) as cm:
            self.j.extend_lease(key, reg.attempt + 1)  # never issued
        self.assertEqual(cm.exception.field, "attempt")

        # An expired lease is never revived.
        short = new_key()
        r = self.j.register(short, "short_payment", {}, claim=True)
        wait_for(lambda: self.j.lookup(short).status == "unknown", timeout=5, what="the 1 s lease to expire")
        with self.assertRaises(opjournal.StaleAttempt):
            self.j.extend_lease(short, r.attempt)


class FakeLeaseTest(unittest.TestCase):
    """Heartbeat and give-up rules against answers made to order."""

    def slow_fn(self, calls):
        def fn(key, attempt, *, deadline):
            calls.append(deadline)
            deadline.event.wait(10)
            return Effect("pay_late")
        return fn

    def test_a_refused_heartbeat_stops_the_heartbeats_and_keeps_the_deadline(self):
        for refusal in (opjournal.InvalidState(None, "max_attempt_seconds reached"),
                        opjournal.StaleAttempt(None, "the lease expired", "attempt")):
            with self.subTest(refusal=refusal.code):
                calls = []
                j = FakeJournal(claimed(attempt=1, lease_seconds=LEASE), ExtendLease=refusal)
                t = time.monotonic()
                out = opjournal.execute(j, "k:refused", "create_payment", {}, self.slow_fn(calls))
                elapsed = time.monotonic() - t
                self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "lease_expired"))
                self.assertGreaterEqual(elapsed, LEASE - margin(LEASE))
                self.assertLessEqual(elapsed, LEASE - margin(LEASE) + FAKE_SLACK)
                # One heartbeat (at a third of the lease), then no more: the
                # next was due before the deadline.
                self.assertEqual(len(j.requests("ExtendLease")), 1)
                self.assertLess(2 * _heartbeat_interval(LEASE), LEASE - margin(LEASE))
                r = j.requests("ExtendLease")[0]
                self.assertEqual((r.operation_key, r.attempt, r.lease_seconds), ("k:refused", 1, 0))
                wait_for(lambda: "MarkSucceeded" in j.methods(), what="the late effect")
                self.assertEqual(j.methods(), ["Register", "ExtendLease", "MarkUnknown", "MarkSucceeded"])

    def test_a_failing_heartbeat_is_tried_again_and_keeps_the_deadline(self):
        calls = []
        j = FakeJournal(claimed(attempt=1, lease_seconds=LEASE),
                        ExtendLease=opjournal.Unavailable(None, "journal unreachable"))
        t = time.monotonic()
        out = opjournal.execute(j, "k:unavailable", "create_payment", {}, self.slow_fn(calls))
        elapsed = time.monotonic() - t
        self.assertEqual(out.error_code, "lease_expired")
        self.assertGreaterEqual(elapsed, LEASE - margin(LEASE))
        self.assertLessEqual(elapsed, LEASE - margin(LEASE) + FAKE_SLACK)
        self.assertEqual(len(j.requests("ExtendLease")), 2)  # at 1/3 and 2/3 of the lease

    def test_a_granted_heartbeat_moves_the_deadline_by_the_grant(self):
        # A grant of 3 s per heartbeat moves the deadline later each time,
        # to (last heartbeat sent) + 3 − margin(3); when the journal stops
        # granting (a refusal), the deadline stays where the last grant put it.
        calls = []
        sent = []

        def extend(req):
            if len(sent) == 2:
                raise opjournal.InvalidState(None, "max_attempt_seconds reached")
            sent.append(time.monotonic())
            return pb.ExtendLeaseResponse(operation=pb.Operation(status=pb.STATUS_IN_PROGRESS), lease_seconds=3)

        j = FakeJournal(claimed(attempt=1, lease_seconds=LEASE), ExtendLease=extend)
        t = time.monotonic()
        out = opjournal.execute(j, "k:granted", "create_payment", {}, self.slow_fn(calls))
        done = time.monotonic()
        self.assertEqual(out.error_code, "lease_expired")
        self.assertEqual(len(sent), 2)
        self.assertGreaterEqual(done, sent[1] + 3 - margin(3))
        self.assertLessEqual(done, sent[1] + 3 - margin(3) + FAKE_SLACK)
        self.assertGreater(done - t, LEASE - margin(LEASE))

    def test_a_smaller_grant_never_pulls_the_deadline_in(self):
        # Near max_attempt_seconds the journal grants whole seconds rounded
        # down; the server never shortens a lease, so neither does the SDK.
        calls = []

        def extend(req):
            return pb.ExtendLeaseResponse(operation=pb.Operation(status=pb.STATUS_IN_PROGRESS), lease_seconds=0)

        j = FakeJournal(claimed(attempt=1, lease_seconds=LEASE), ExtendLease=extend)
        t = time.monotonic()
        out = opjournal.execute(j, "k:smaller", "create_payment", {}, self.slow_fn(calls))
        elapsed = time.monotonic() - t
        self.assertEqual(out.error_code, "lease_expired")
        self.assertGreaterEqual(elapsed, LEASE - margin(LEASE))
        self.assertLessEqual(elapsed, LEASE - margin(LEASE) + FAKE_SLACK)

    def test_a_fast_fn_sends_no_heartbeat(self):
        j = FakeJournal(claimed(attempt=1, lease_seconds=LEASE), ExtendLease=AssertionError("heartbeat"))
        out = opjournal.execute(j, "k:fast", "create_payment", {}, lambda k, a: Effect("pay_1"))
        self.assertTrue(out.ok)
        self.assertEqual(j.methods(), ["Register", "MarkSucceeded"])

    def test_a_refused_mark_unknown_after_the_lease_ran_out_is_still_verification_required(self):
        calls = []
        j = FakeJournal(claimed(attempt=1, lease_seconds=1),
                        MarkUnknown=opjournal.StaleAttempt(None, "the lease expired", "attempt"),
                        Lookup=pb.LookupResponse(operation=pb.Operation(status=pb.STATUS_UNKNOWN)))
        out = opjournal.execute(j, "k:stale", "create_payment", {}, self.slow_fn(calls), heartbeat=False)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "lease_expired"))
        self.assertEqual(out.operation.status, "unknown")
        self.assertTrue(calls[0].event.is_set())

    def test_another_journal_error_at_the_give_up_is_not_recorded(self):
        calls = []
        j = FakeJournal(claimed(attempt=1, lease_seconds=1),
                        MarkUnknown=opjournal.Unavailable(None, "journal unreachable"))
        with self.assertRaises(opjournal.NotRecorded) as cm:
            opjournal.execute(j, "k:gone", "create_payment", {}, self.slow_fn(calls), heartbeat=False)
        e = cm.exception
        self.assertEqual((e.key, e.attempt, e.observed), ("k:gone", 1, OutcomeKind.VERIFICATION_REQUIRED))
        self.assertIsInstance(e.error, opjournal.Unavailable)

    def test_the_late_effect_waits_for_the_give_up_to_be_recorded(self):
        # fn returns the moment execute gives up; execute's MarkUnknown is
        # slow. The late MarkSucceeded must come after it, or the journal
        # would refuse the MarkUnknown of a succeeded operation.
        calls = []
        order = []

        def mark_unknown(req):
            order.append("unknown-start")
            wait_for(lambda: calls and calls[0].event.is_set(), what="the deadline event")
            time.sleep(0.2)  # a slow journal answer, so that fn has returned by now
            order.append("unknown-end")
            return pb.MarkUnknownResponse(operation=pb.Operation(status=pb.STATUS_UNKNOWN,
                                                                 error_code=req.error_code))

        def mark_succeeded(req):
            order.append("succeeded")
            return pb.MarkSucceededResponse(operation=pb.Operation(status=pb.STATUS_SUCCEEDED))

        j = FakeJournal(claimed(attempt=1, lease_seconds=1), MarkUnknown=mark_unknown, MarkSucceeded=mark_succeeded)
        out = opjournal.execute(j, "k:order", "create_payment", {}, self.slow_fn(calls), heartbeat=False)
        self.assertEqual(out.error_code, "lease_expired")
        wait_for(lambda: "succeeded" in order, what="the late MarkSucceeded")
        self.assertEqual(order, ["unknown-start", "unknown-end", "succeeded"])

    def test_the_old_calling_convention_still_works(self):
        seen = []

        def two(key, attempt):
            seen.append(("two", key, attempt))

        def var_kw(key, attempt, **kw):
            seen.append(("kw", sorted(kw), isinstance(kw.get("deadline"), opjournal.Deadline)))

        def positional(key, attempt, deadline):
            seen.append(("pos", isinstance(deadline, opjournal.Deadline)))

        def positional_only(key, attempt, deadline=None, /):
            seen.append(("posonly", deadline))

        for fn in (two, var_kw, positional, positional_only, lambda k, a: seen.append(("lambda", a))):
            self.assertTrue(opjournal.execute(FakeJournal(claimed()), "k:conv", "create_payment", {}, fn).ok)
        self.assertEqual(seen, [("two", "k:conv", 1), ("kw", ["deadline"], True), ("pos", True),
                                ("posonly", None), ("lambda", 1)])

    def test_fn_runs_in_a_copy_of_the_callers_context(self):
        import contextvars
        var = contextvars.ContextVar("request_id", default="-")
        var.set("req-42")
        got = []
        opjournal.execute(FakeJournal(claimed()), "k:ctx", "create_payment", {},
                          lambda k, a: got.append((var.get(), threading.current_thread() is threading.main_thread())))
        self.assertEqual(got, [("req-42", False)])


if __name__ == "__main__":
    unittest.main()
