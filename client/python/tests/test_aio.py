"""opjournal.aio, the asyncio client, against the real opjournal binary (and,
for the next-step vectors and journal answers a server will not give on
demand, an AioFakeJournal): the blocking client's names, signatures and
outcomes; fn bounded by the cancellation of its task at the lease; a
cancellation by the caller recorded as unknown and re-raised; heartbeats;
the trace context from contextvars."""

import asyncio
import contextvars
import importlib
import inspect
import json
import threading
import time
import typing
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from _fake import AioFakeJournal, claimed
from _harness import Provider, Server, new_key, policy_file, wait_for
from test_next_steps import answer_of, load_vectors, margin

import opjournal
import opjournal.aio
from opjournal import Effect, OutcomeKind, Rejected
from opjournal.aio import CANCELLED, LEASE_EXPIRED
from opjournal.v1 import journal_pb2 as pb

#: The lease of the test policy's slow actions, in seconds.
LEASE = 2
#: How much later than its deadline execute may return (scheduling, RPCs).
SLACK = 1.0

POLICY = """\
actions:
  create_payment:
    operation_key: required
    lease_seconds: 30
    integer_fields: [amount_minor]
  slow_payment:
    operation_key: required
    lease_seconds: {lease}
    integer_fields: [amount_minor]
  # Heartbeats may not keep an attempt beyond its first lease.
  capped_payment:
    operation_key: required
    lease_seconds: {lease}
    max_attempt_seconds: {lease}
""".format(lease=LEASE)

#: opjournal.execute the module (the package's name execute is the function).
sync_execute_mod = importlib.import_module("opjournal.execute")

PAYLOAD = {"order_id": "817", "amount_minor": 490000, "currency": "RUB"}

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class OTLPReceiver:
    """An OTLP/HTTP trace receiver: keeps the body of every POST to
    /v1/traces (protobuf; the test looks for the trace id's bytes in it)."""

    def __init__(self):
        self.bodies = []
        self.lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with rec.lock:
                    rec.bodies.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def seen(self, needle: bytes) -> bool:
        with self.lock:
            return any(path == "/v1/traces" and needle in body for path, body in self.bodies)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


server = None
otlp = None


def setUpModule():
    global server, otlp
    otlp = OTLPReceiver()
    # Tracing on, exported at once to the receiver (for the trace-context test).
    server = Server("--policy", policy_file(POLICY),
                    env={"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                         "OTEL_BSP_SCHEDULE_DELAY": "50"})


def tearDownModule():
    server.stop()
    otlp.stop()


def aio_journal(**kw):
    kw.setdefault("timeout", 5.0)
    kw.setdefault("worker_id", "py-aio-test")
    return opjournal.aio.Journal(server.grpc_addr, **kw)


async def reasons(j, key):
    return [(e.reason, e.attempt) async for e in j.iter_events(key)]


class ShapeTest(unittest.TestCase):
    """The blocking client's names and signatures, awaited."""

    def test_every_call_of_the_blocking_journal_with_its_signature(self):
        public = [n for n, v in vars(opjournal.Journal).items() if callable(v) and not n.startswith("_")
                  and n != "close"]
        self.assertGreaterEqual(len(public), 12, public)
        for name in public:
            with self.subTest(name):
                sync_fn, aio_fn = getattr(opjournal.Journal, name), getattr(opjournal.aio.Journal, name)
                if name == "iter_events":
                    self.assertTrue(inspect.isasyncgenfunction(aio_fn))
                else:
                    self.assertTrue(inspect.iscoroutinefunction(aio_fn), name)
                s, a = inspect.signature(sync_fn), inspect.signature(aio_fn)
                self.assertEqual(list(s.parameters.values()), list(a.parameters.values()), name)
                want = "AsyncIterator[Event]" if name == "iter_events" else s.return_annotation
                self.assertEqual(a.return_annotation, want, name)
                self.assertTrue(aio_fn.__doc__, name)
        self.assertEqual(inspect.signature(opjournal.Journal.__init__).parameters.keys(),
                         inspect.signature(opjournal.aio.Journal.__init__).parameters.keys())
        self.assertEqual(list(inspect.signature(sync_execute_mod.execute).parameters),
                         list(inspect.signature(opjournal.aio.execute).parameters))
        self.assertEqual(list(inspect.signature(opjournal.idempotent).parameters),
                         list(inspect.signature(opjournal.aio.idempotent).parameters))

    def test_the_outcome_code_is_shared_not_copied(self):
        # One implementation of the pure half: the same objects in both.
        for name in ("Outcome", "OutcomeKind", "Effect", "Deadline", "Rejected", "UnknownOutcome", "NotSucceeded",
                     "classify_http"):
            self.assertIs(getattr(opjournal.aio, name), getattr(opjournal, name), name)
        for name in ("_outcome_of", "_record_failure", "_record_success", "_record_gave_up", "_record_return",
                     "_lease_margin", "_heartbeat_interval", "_deadline_after_grant", "_heartbeat_retries"):
            self.assertIs(getattr(opjournal.aio, name), getattr(opjournal._outcome, name), name)
        self.assertIs(sync_execute_mod._outcome_of, opjournal._outcome._outcome_of)
        self.assertIs(sync_execute_mod._record_gave_up, opjournal._outcome._record_gave_up)


class VectorsTest(unittest.IsolatedAsyncioTestCase):
    """protocol/testdata/next_steps.json through opjournal.aio.execute, as
    test_next_steps runs them through execute."""

    async def test_every_vector_through_aio_execute(self):
        vectors = load_vectors()
        self.assertGreaterEqual(len(vectors), 10)
        for i, v in enumerate(vectors):
            name, expect = v["name"], v["expect"]
            with self.subTest(name):
                calls = []

                async def fn(key, attempt, *, deadline):
                    calls.append((key, attempt, deadline.remaining()))
                    return Effect("pay_v%d" % i, {"v": i})

                j = AioFakeJournal(answer_of(v))
                key = "vector:%d" % i
                if expect.get("error"):
                    with self.assertRaises(opjournal.OpjournalError):
                        await opjournal.aio.execute(j, key, "create_payment", {}, fn)
                    self.assertEqual(calls, [])
                    self.assertEqual(j.methods(), ["Register"])
                    continue
                out = await opjournal.aio.execute(j, key, "create_payment", {}, fn)
                # The same Outcome the blocking execute gives for this answer.
                sync_out = opjournal.execute(__import__("_fake").FakeJournal(answer_of(v)), key, "create_payment",
                                             {}, lambda k, a: Effect("pay_v%d" % i, {"v": i}))
                self.assertEqual((out.kind, out.replayed, out.external_id, out.result, out.error_code,
                                  out.retry_after, out.needs_review),
                                 (sync_out.kind, sync_out.replayed, sync_out.external_id, sync_out.result,
                                  sync_out.error_code, sync_out.retry_after, sync_out.needs_review), name)
                if expect.get("call"):
                    self.assertEqual([(k, a) for k, a, _ in calls], [(key, expect["attempt"])])
                    lease = expect["lease_seconds"]
                    self.assertLessEqual(calls[0][2], lease - margin(lease))
                    self.assertGreater(calls[0][2], lease - margin(lease) - 1.0)
                    self.assertEqual((out.kind, out.replayed, out.external_id),
                                     (OutcomeKind.SUCCEEDED, False, "pay_v%d" % i))
                    ms = j.requests("MarkSucceeded")
                    self.assertEqual([(r.operation_key, r.attempt) for r in ms], [(key, expect["attempt"])])
                else:
                    self.assertEqual(calls, [], name)
                    self.assertEqual(out.kind, expect["kind"], name)
                    for k in ("external_id", "result", "error_code", "needs_review"):
                        if k in expect:
                            self.assertEqual(getattr(out, k), expect[k], "%s: %s" % (name, k))
                    self.assertIs(out.replayed, expect.get("replayed", False), name)
                    self.assertEqual(j.methods(), ["Register"])

    async def test_a_step_this_sdk_does_not_act_on_never_calls(self):
        for nxt in (pb.NEXT_STEP_UNSPECIFIED, pb.NEXT_STEP_CLAIM, 99):
            ans = claimed(attempt=1, lease_seconds=30)
            ans.next = nxt
            calls = []

            async def fn(k, a):
                calls.append(a)

            with self.assertRaises(opjournal.Internal):
                await opjournal.aio.execute(AioFakeJournal(ans), "k:1", "create_payment", {}, fn)
            self.assertEqual(calls, [])


class ServerTest(unittest.IsolatedAsyncioTestCase):
    """The real journal and a provider that counts its effects."""

    async def asyncSetUp(self):
        self.j = aio_journal()
        await self.j.__aenter__()
        self.p = Provider()
        self.addCleanup(self.p.stop)
        self.fn_calls = []

    async def asyncTearDown(self):
        await self.j.close()

    async def pay(self, key, attempt):
        self.fn_calls.append((key, attempt))
        # The test provider's client is blocking: off the event loop.
        return await asyncio.to_thread(self.p.pay, key, PAYLOAD)

    async def test_success_then_a_retry_replays_without_calling_fn(self):
        key = new_key()
        out = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertEqual((out.kind, out.replayed, out.external_id), (OutcomeKind.SUCCEEDED, False, "pay_1"))
        self.assertEqual(out.result, {"payment_id": "pay_1", "status": "captured"})
        for _ in range(2):
            again = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
            self.assertEqual((again.kind, again.replayed, again.result), (OutcomeKind.SUCCEEDED, True, out.result))
        self.assertEqual(self.fn_calls, [(key, 1)])
        self.assertEqual((self.p.calls, self.p.keys), (1, [key]))
        self.assertEqual((await self.j.lookup(key)).status, "succeeded")

    async def test_the_same_key_with_other_parameters_is_a_conflict(self):
        key = new_key()
        await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        out = await opjournal.aio.execute(self.j, key, "create_payment", {**PAYLOAD, "amount_minor": 1}, self.pay)
        self.assertIs(out.kind, OutcomeKind.CONFLICT)
        self.assertIsInstance(out.cause, opjournal.PayloadMismatch)
        self.assertIsNone(out.operation)
        self.assertEqual(self.p.calls, 1)
        self.assertEqual((await self.j.lookup(key)).payload, PAYLOAD)  # nothing changed

    async def test_a_live_lease_elsewhere_is_in_progress_elsewhere(self):
        key = new_key()
        other = aio_journal(worker_id="other-worker")
        self.addAsyncCleanup(other.close)
        reg = await other.register(key, "create_payment", PAYLOAD, claim=True)
        self.assertTrue(reg.claimed)
        out = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertIs(out.kind, OutcomeKind.IN_PROGRESS_ELSEWHERE)
        self.assertGreaterEqual(out.retry_after, 1)
        self.assertEqual((self.fn_calls, self.p.calls), ([], 0))

    async def test_a_timeout_is_unknown_and_a_retry_calls_nothing(self):
        key = new_key()

        async def times_out(k, a):
            self.fn_calls.append((k, a))
            raise TimeoutError("the provider did not answer")

        out = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, times_out)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "timeout"))
        self.assertIsInstance(out.cause, TimeoutError)
        again = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertEqual((again.kind, again.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "timeout"))
        self.assertEqual(self.fn_calls, [(key, 1)])
        self.assertEqual(self.p.calls, 0)
        op = await self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", "timeout"))

    async def test_rejected_is_final_and_a_bug_is_logged(self):
        key = new_key()

        async def declined(k, a):
            raise Rejected("card_declined", "the bank said no")

        out = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, declined)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.FAILED_FINAL, "card_declined"))
        again = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, self.pay)
        self.assertEqual((again.kind, again.replayed), (OutcomeKind.FAILED_FINAL, True))
        self.assertEqual(self.p.calls, 0)

        async def buggy(k, a):
            return PROVIDER_ULR  # noqa: F821  (the bug)

        with self.assertLogs("opjournal", "ERROR") as logs:
            out = await opjournal.aio.execute(self.j, new_key(), "create_payment", PAYLOAD, buggy)
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, "error"))
        self.assertIn("NameError", out.message)
        self.assertIn("PROVIDER_ULR", logs.output[0])

    async def test_fn_slower_than_the_lease_is_cancelled_and_unknown(self):
        key = new_key()
        seen = {}

        async def slow(k, attempt, *, deadline):
            self.fn_calls.append((k, attempt))
            try:
                await asyncio.sleep(30)  # a provider that does not answer
            except asyncio.CancelledError:
                seen["cancelled_at"] = time.monotonic()
                seen["event"] = deadline.event.is_set()
                raise
            return Effect("pay_never")

        t = time.monotonic()
        out = await opjournal.aio.execute(self.j, key, "slow_payment", PAYLOAD, slow, heartbeat=False)
        elapsed = time.monotonic() - t
        self.assertEqual((out.kind, out.error_code), (OutcomeKind.VERIFICATION_REQUIRED, LEASE_EXPIRED))
        self.assertGreaterEqual(elapsed, LEASE - margin(LEASE))
        self.assertLessEqual(elapsed, LEASE - margin(LEASE) + SLACK)
        # fn's task was cancelled at the deadline, not left running.
        self.assertIn("cancelled_at", seen)
        self.assertLessEqual(seen["cancelled_at"] - t, LEASE - margin(LEASE) + SLACK)
        self.assertTrue(seen["event"])
        op = await self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", LEASE_EXPIRED))
        self.assertNotIn(("lease extended", 1), await reasons(self.j, key))
        # A retry does not call fn while the outcome is unknown.
        again = await opjournal.aio.execute(self.j, key, "slow_payment", PAYLOAD, slow)
        self.assertEqual((again.kind, again.error_code), (OutcomeKind.VERIFICATION_REQUIRED, LEASE_EXPIRED))
        self.assertEqual(self.fn_calls, [(key, 1)])

    async def test_max_attempt_seconds_ends_the_heartbeats_and_fn_is_cancelled_in_time(self):
        key = new_key()
        cancelled = asyncio.Event()

        async def slow(k, attempt):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        t = time.monotonic()
        out = await opjournal.aio.execute(self.j, key, "capped_payment", PAYLOAD, slow)
        self.assertLessEqual(time.monotonic() - t, LEASE - margin(LEASE) + SLACK)
        self.assertEqual(out.error_code, LEASE_EXPIRED)
        self.assertTrue(cancelled.is_set())
        history = await reasons(self.j, key)
        self.assertIn(("lease extended", 1), history)  # heartbeats were sent, but granted no more
        self.assertEqual(history[-1], ("outcome unknown: lease_expired", 1))

    async def test_heartbeats_keep_a_call_slower_than_the_lease_alive(self):
        key = new_key()
        seen = {}
        observer = aio_journal(worker_id="observer")
        self.addAsyncCleanup(observer.close)

        async def slow(k, attempt):
            start = time.monotonic()
            await asyncio.sleep(LEASE + 1.0)  # a second longer than the whole lease
            seen["elapsed"] = time.monotonic() - start
            seen["status"] = (await observer.lookup(k)).status  # an expired lease would read as unknown
            return Effect("pay_slow", {"payment_id": "pay_slow"})

        out = await opjournal.aio.execute(self.j, key, "slow_payment", PAYLOAD, slow)
        self.assertEqual((out.kind, out.external_id), (OutcomeKind.SUCCEEDED, "pay_slow"), out)
        self.assertGreater(seen["elapsed"], LEASE)
        self.assertEqual(seen["status"], "in_progress")
        history = await reasons(self.j, key)
        self.assertGreaterEqual(history.count(("lease extended", 1)), 2, history)
        self.assertEqual(history[-1], ("effect confirmed", 1))
        # The heartbeat task ended with fn: no ExtendLease after the record.
        await asyncio.sleep(0)
        self.assertEqual((await reasons(self.j, key))[-1], ("effect confirmed", 1))

    async def test_a_task_cancelled_by_its_caller_is_recorded_unknown_and_not_retried(self):
        key = new_key()
        entered, fn_saw = asyncio.Event(), []

        async def charge(k, attempt):
            self.fn_calls.append((k, attempt))
            entered.set()
            try:
                await asyncio.sleep(30)  # the provider call in flight
            except asyncio.CancelledError:
                fn_saw.append("cancelled")
                raise
            return Effect("pay_never")

        task = asyncio.create_task(opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, charge))
        await asyncio.wait_for(entered.wait(), 10)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(fn_saw, ["cancelled"])
        # Recorded before the CancelledError reached the caller.
        op = await self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", CANCELLED))
        self.assertEqual((await reasons(self.j, key))[-1], ("outcome unknown: cancelled", 1))
        # Never a silent retry: the next execute does not call fn.
        again = await opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, charge)
        self.assertEqual((again.kind, again.error_code), (OutcomeKind.VERIFICATION_REQUIRED, CANCELLED))
        self.assertEqual(self.fn_calls, [(key, 1)])

    async def test_an_outer_timeout_is_a_cancellation_too(self):
        key = new_key()

        async def charge(k, attempt):
            await asyncio.sleep(30)

        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(opjournal.aio.execute(self.j, key, "create_payment", PAYLOAD, charge), 0.5)
        op = await self.j.lookup(key)
        self.assertEqual((op.status, op.error_code), ("unknown", CANCELLED))

    async def test_the_trace_context_of_the_calling_task_reaches_the_journal(self):
        # The hook reads a contextvar set in this task: the Register, the
        # heartbeats (their own task) and the MarkSucceeded carry it, and
        # the journal's spans join the caller's trace (seen at the OTLP
        # receiver the server exports to).
        current = contextvars.ContextVar("traceparent", default=None)
        sent = []

        def hook():
            tp = current.get()
            sent.append(tp)
            return {"traceparent": tp} if tp else None

        j = aio_journal(trace_context=hook)
        self.addAsyncCleanup(j.close)
        trace_id = "%032x" % (int(time.time() * 1e6) ^ 0x5eed)
        tp = "00-%s-00f067aa0ba902b7-01" % trace_id
        key = new_key()

        async def slow(k, attempt):
            await asyncio.sleep(LEASE / 3 + 0.3)  # past the first heartbeat
            return Effect("pay_traced")

        async def in_a_request():
            current.set(tp)
            return await opjournal.aio.execute(j, key, "slow_payment", PAYLOAD, slow)

        out = await asyncio.create_task(in_a_request())
        self.assertTrue(out.ok, out)
        self.assertIn(("lease extended", 1), await reasons(self.j, key))
        self.assertGreaterEqual(len(sent), 3)  # Register, ExtendLease, MarkSucceeded
        self.assertEqual(set(sent), {tp})
        await asyncio.to_thread(wait_for, lambda: otlp.seen(bytes.fromhex(trace_id)), 10,
                                what="a span of the caller's trace at the OTLP receiver")
        self.assertIsNone(current.get())  # the test's own context was never touched


class ThinCallsTest(unittest.IsolatedAsyncioTestCase):
    async def test_every_call_against_the_server(self):
        async with aio_journal() as j:
            key = new_key()
            reg = await j.register(key, "create_payment", PAYLOAD, refs={"order_id": "817"})
            self.assertIsInstance(reg, opjournal.Registration)
            self.assertEqual((reg.created, reg.next, reg.operation.status), (True, "claim", "pending"))
            cl = await j.claim(key)
            self.assertIsInstance(cl, opjournal.ClaimResult)
            self.assertEqual((cl.claimed, cl.attempt, cl.next), (True, 1, "call_provider"))
            ext = await j.extend_lease(key, cl.attempt)
            self.assertIsInstance(ext, opjournal.LeaseExtension)
            self.assertGreater(ext.lease_seconds, 0)
            op = await j.mark_succeeded(key, cl.attempt, "pay_a", {"payment_id": "pay_a"}, view="full")
            self.assertEqual((op.status, op.result), ("succeeded", {"payment_id": "pay_a"}))
            dup = await j.mark_succeeded(key, cl.attempt, "pay_b")  # a duplicate effect
            self.assertTrue(dup.needs_review)
            acked = await j.acknowledge(key, "refunded pay_b", actor="ops-alice")
            self.assertFalse(acked.needs_review)
            full = await j.lookup(key)
            self.assertEqual((full.payload, full.refs, full.duplicate_external_ids), (PAYLOAD, {"order_id": "817"},
                                                                                     ("pay_b",)))
            page = await j.list_operations(refs={"order_id": "817"}, statuses=["succeeded"])
            self.assertIsInstance(page, opjournal.OperationPage)
            self.assertIn(key, [o.operation_key for o in page.operations])
            first = await j.list_events(key, page_size=2)
            self.assertIsInstance(first, opjournal.EventPage)
            self.assertEqual(len(first.events), 2)
            self.assertTrue(first.next_page_token)
            events = [e async for e in j.iter_events(key, page_size=2)]
            self.assertEqual(events[-1].stated_actor, "ops-alice")
            self.assertGreater(len(events), 4)

            for failing, fn, code in (("u", j.mark_unknown, "http_503"), ("f", j.mark_failed_final, "card_declined")):
                k = new_key(failing)
                r = await j.register(k, "create_payment", PAYLOAD, claim=True)
                self.assertEqual((await fn(k, r.attempt, code)).error_code, code)
            policy = await j.get_policy()
            self.assertIsInstance(policy, opjournal.Policy)
            self.assertIn("slow_payment", policy.source)

            with self.assertRaises(opjournal.PayloadMismatch) as cm:
                await j.register(key, "create_payment", {**PAYLOAD, "amount_minor": 1})
            self.assertEqual(cm.exception.field, "payload")
            with self.assertRaises(opjournal.NotFound):
                await j.lookup(new_key("missing"))
            with self.assertRaises(opjournal.StaleAttempt):
                await j.mark_unknown(key, 1, "timeout")  # succeeded: no live lease
        with self.assertRaises(RuntimeError):
            await j.lookup(key)  # closed

    async def test_a_journal_made_outside_the_loop_opens_its_channel_in_it(self):
        j = opjournal.aio.Journal(server.grpc_addr, timeout=5.0)  # as at import time: nothing dialed yet
        self.assertIsNone(j._channel)
        self.addAsyncCleanup(j.close)
        self.assertEqual((await j.get_policy()).fingerprint, (await j.get_policy()).fingerprint)
        self.assertNotIn("t0k", repr(opjournal.aio.Journal(server.grpc_addr, token="t0k")))


class RecordShieldTest(unittest.IsolatedAsyncioTestCase):
    """Journal answers made to order: a cancellation while the outcome is
    being recorded waits for the record."""

    async def test_a_cancellation_during_the_record_of_an_effect_still_records_it(self):
        recording, release, written = asyncio.Event(), asyncio.Event(), []

        async def slow_mark(req):
            recording.set()
            await release.wait()
            written.append(req.external_id)
            return pb.MarkSucceededResponse(operation=pb.Operation(status=pb.STATUS_SUCCEEDED,
                                                                   external_id=req.external_id))

        j = AioFakeJournal(claimed(attempt=1, lease_seconds=30), MarkSucceeded=slow_mark)

        async def charge(k, a):
            return Effect("pay_1")

        task = asyncio.create_task(opjournal.aio.execute(j, "k:shield", "create_payment", {}, charge))
        await asyncio.wait_for(recording.wait(), 5)
        task.cancel()
        await asyncio.sleep(0.05)
        self.assertFalse(task.done())  # waiting for the record, not gone
        release.set()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(written, ["pay_1"])
        self.assertEqual(j.methods(), ["Register", "MarkSucceeded"])

    async def test_an_effect_returned_after_the_cancellation_at_the_deadline_is_recorded_late(self):
        async def stubborn(k, a):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                pass  # ignores the cancellation, and the provider answers after all
            await asyncio.sleep(0.05)
            return Effect("pay_late")

        j = AioFakeJournal(claimed(attempt=1, lease_seconds=1))
        out = await opjournal.aio.execute(j, "k:late", "create_payment", {}, stubborn, heartbeat=False)
        self.assertEqual(out.error_code, LEASE_EXPIRED)
        await asyncio.to_thread(wait_for, lambda: "MarkSucceeded" in j.methods(), 5, what="the late effect")
        self.assertEqual(j.methods(), ["Register", "MarkUnknown", "MarkSucceeded"])
        self.assertEqual(j.requests("MarkSucceeded")[0].external_id, "pay_late")

    async def test_a_refused_heartbeat_keeps_the_deadline(self):
        j = AioFakeJournal(claimed(attempt=1, lease_seconds=LEASE),
                           ExtendLease=opjournal.InvalidState(None, "max_attempt_seconds reached"))

        async def slow(k, a):
            await asyncio.sleep(30)

        t = time.monotonic()
        out = await opjournal.aio.execute(j, "k:refused", "create_payment", {}, slow)
        self.assertLessEqual(time.monotonic() - t, LEASE - margin(LEASE) + 0.3)
        self.assertEqual(out.error_code, LEASE_EXPIRED)
        self.assertEqual(j.methods(), ["Register", "ExtendLease", "MarkUnknown"])


class DecoratorTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.j = aio_journal()
        self.addAsyncCleanup(self.j.close)
        self.p = Provider()
        self.addCleanup(self.p.stop)

    def tool(self):
        p = self.p

        @opjournal.aio.idempotent(self.j, action="create_payment",
                                  key=lambda order_id, **_: "payment:%s:intent-01" % order_id)
        async def create_payment(order_id: str, amount_minor: int, currency: str = "RUB", *, op_key: str,
                                 attempt: int, deadline: opjournal.Deadline) -> opjournal.Effect:
            """Charges the customer for an order (amounts in minor units)."""
            assert deadline.remaining() > 0
            return await asyncio.to_thread(p.pay, op_key, {"order_id": order_id, "amount_minor": amount_minor,
                                                           "currency": currency})

        return create_payment

    async def test_a_decorated_async_tool_runs_once_and_replays(self):
        create_payment = self.tool()
        order = new_key("order").split(":")[1]
        out = await create_payment(order, 490000)
        again = await create_payment(order_id=order, amount_minor=490000, currency="RUB")  # the same request
        self.assertEqual((out.kind, out.replayed), (OutcomeKind.SUCCEEDED, False))
        self.assertEqual((again.kind, again.replayed, again.result), (OutcomeKind.SUCCEEDED, True, out.result))
        self.assertEqual((self.p.calls, self.p.keys), (1, ["payment:%s:intent-01" % order]))
        op = await self.j.lookup("payment:%s:intent-01" % order)
        self.assertEqual(op.payload, {"order_id": order, "amount_minor": 490000, "currency": "RUB"})
        with self.assertRaises(TypeError):
            await create_payment(order, 490000, op_key="x")  # supplied by the journal, never by the caller
        self.assertEqual(self.p.calls, 1)

    def test_frameworks_see_a_plain_async_function_of_the_models_arguments(self):
        # What OpenAI Agents' function_tool, LangChain's @tool and PydanticAI
        # read to build a tool: a coroutine function, its name and docstring,
        # inspect.signature and typing.get_type_hints. None of the
        # journal-supplied parameters may show.
        create_payment = self.tool()
        self.assertTrue(inspect.iscoroutinefunction(create_payment))
        self.assertEqual(create_payment.__name__, "create_payment")
        self.assertEqual(create_payment.__doc__, "Charges the customer for an order (amounts in minor units).")
        sig = inspect.signature(create_payment)
        self.assertEqual(list(sig.parameters), ["order_id", "amount_minor", "currency"])
        self.assertEqual(sig.parameters["currency"].default, "RUB")
        hints = typing.get_type_hints(create_payment)
        self.assertEqual(hints, {"order_id": str, "amount_minor": int, "currency": str, "return": opjournal.Outcome})
        self.assertTrue(inspect.unwrap(create_payment).__name__ == "create_payment")
        # A schema built the way those frameworks build one (parameters of
        # the signature, types from the hints) has only the model's fields.
        schema = {n: hints[n].__name__ for n in sig.parameters}
        self.assertEqual(json.dumps(schema), '{"order_id": "str", "amount_minor": "int", "currency": "str"}')
        # The blocking decorator too.
        sync_tool = opjournal.idempotent(self.j, action="create_payment", key="k:{order_id}")(
            lambda order_id, *, op_key: None)
        self.assertEqual(list(inspect.signature(sync_tool).parameters), ["order_id"])

    def test_one_decorator_for_two_functions(self):
        dec = opjournal.aio.idempotent(self.j, action="create_payment", key="k:{a}")

        async def one(a, *, op_key):
            pass

        async def two(a, b):
            pass

        f1, f2 = dec(one), dec(two)
        self.assertEqual(list(inspect.signature(f1).parameters), ["a"])
        self.assertEqual(list(inspect.signature(f2).parameters), ["a", "b"])


if __name__ == "__main__":
    unittest.main()
