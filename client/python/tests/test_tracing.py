"""The caller's W3C trace context travels as gRPC metadata on every journal
call: through Journal(trace_context=...), or OpenTelemetry's propagator when
the `opentelemetry` package is importable, and nothing by default.

The server here is a real in-process grpc.server (the generated servicer)
that records the invocation metadata of each call: the Go server's
extraction is the root's tests; this checks what the client puts on the wire.
"""

import contextvars
import sys
import threading
import types
import unittest
from concurrent import futures
from unittest import mock

import grpc

from _harness import opjournal  # noqa: F401  (puts the package under test on sys.path)

import opjournal
from opjournal import client as client_mod
from opjournal.v1 import journal_pb2 as pb
from opjournal.v1 import journal_pb2_grpc as pb_grpc

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TS = "congo=t61rcWkgMzE"
BAGGAGE = "userId=alice,serverNode=DF%2028"
TRACE = set(client_mod.TRACE_HEADERS)


class Recorder(pb_grpc.JournalServiceServicer):
    """Answers Lookup, Register (call the provider), ExtendLease and
    MarkSucceeded, and records (method, metadata dict) of every call.
    ``extended`` is set at the first ExtendLease."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()
        self.extended = threading.Event()

    def _record(self, method, context):
        md = {}
        for k, v in context.invocation_metadata():
            md.setdefault(k, v)
        with self.lock:
            self.calls.append((method, md))

    def Lookup(self, request, context):
        self._record("Lookup", context)
        return pb.LookupResponse(operation=pb.Operation(operation_key=request.operation_key,
                                                        status=pb.STATUS_PENDING))

    def Register(self, request, context):
        self._record("Register", context)
        return pb.RegisterResponse(next=pb.NEXT_STEP_CALL_PROVIDER, claimed=True, attempt=1, lease_seconds=3,
                                   created=True,
                                   operation=pb.Operation(operation_key=request.operation_key,
                                                          status=pb.STATUS_IN_PROGRESS, attempt_count=1))

    def ExtendLease(self, request, context):
        self._record("ExtendLease", context)
        self.extended.set()
        return pb.ExtendLeaseResponse(lease_seconds=3, operation=pb.Operation(
            operation_key=request.operation_key, status=pb.STATUS_IN_PROGRESS, attempt_count=request.attempt))

    def MarkSucceeded(self, request, context):
        self._record("MarkSucceeded", context)
        return pb.MarkSucceededResponse(operation=pb.Operation(
            operation_key=request.operation_key, status=pb.STATUS_SUCCEEDED, attempt_count=request.attempt,
            external_id=request.external_id))

    def last(self, method="Lookup"):
        with self.lock:
            return [md for m, md in self.calls if m == method][-1]


def extra_keys(md):
    """The metadata keys the application sent: without gRPC's own."""
    return {k for k in md if k != "user-agent" and not k.startswith("grpc-") and not k.startswith(":")}


# A stand-in for the `opentelemetry` package, which is not installed here and
# cannot be (no PyPI): just `opentelemetry.propagate.inject(carrier)`, writing
# the "current span" of a contextvar the way the real W3C propagator writes
# the current context. It is put in sys.modules for one test at a time only.
current_traceparent = contextvars.ContextVar("current_traceparent", default=None)


def fake_otel(inject=None):
    def default_inject(carrier, context=None, setter=None):
        tp = current_traceparent.get()
        if tp is not None:
            carrier["traceparent"] = tp
            carrier["tracestate"] = TS
            carrier["x-b3-traceid"] = "not-w3c"  # another propagator's header: never sent
    pkg = types.ModuleType("opentelemetry")
    pkg.__path__ = []  # a package, as the real one
    prop = types.ModuleType("opentelemetry.propagate")
    prop.inject = inject or default_inject
    pkg.propagate = prop
    return {"opentelemetry": pkg, "opentelemetry.propagate": prop}


class TracingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rec = Recorder()
        cls.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_JournalServiceServicer_to_server(cls.rec, cls.server)
        port = cls.server.add_insecure_port("127.0.0.1:0")
        cls.server.start()
        cls.addr = "127.0.0.1:%d" % port

    @classmethod
    def tearDownClass(cls):
        cls.server.stop(None).wait()

    def setUp(self):
        # Each test looks for opentelemetry afresh (the client caches the
        # answer for the process), and none leaves the stand-in behind.
        patcher = mock.patch.object(client_mod, "_otel_propagate", client_mod._UNSET)
        patcher.start()
        self.addCleanup(patcher.stop)
        for name in ("opentelemetry", "opentelemetry.propagate"):
            if name in sys.modules:  # pragma: no cover (not installed here)
                saved = sys.modules.pop(name)
                self.addCleanup(sys.modules.__setitem__, name, saved)

    def journal(self, **kw):
        j = opjournal.Journal(self.addr, timeout=5.0, worker_id="py-trace", **kw)
        self.addCleanup(j.close)
        return j

    def test_nothing_extra_by_default(self):
        # opentelemetry is not importable: only the token, no trace header.
        self.journal().lookup("k1")
        md = self.rec.last()
        self.assertEqual(extra_keys(md), set(), md)
        self.journal(token="t0k").lookup("k1")
        md = self.rec.last()
        self.assertEqual(extra_keys(md), {"authorization"}, md)
        self.assertEqual(md["authorization"], "Bearer t0k")
        self.assertIsNone(client_mod._otel_propagate)  # looked once, cached: not importable

    def test_the_explicit_hook_sends_traceparent(self):
        calls = []

        def hook():
            calls.append(1)
            return {"traceparent": TP, "Tracestate": TS, "baggage": BAGGAGE}

        j = self.journal(token="t0k", trace_context=hook)
        j.lookup("k1")
        md = self.rec.last()
        self.assertEqual(md["traceparent"], TP)
        self.assertEqual(md["tracestate"], TS)  # sent lower-case
        self.assertEqual(md["baggage"], BAGGAGE)
        self.assertEqual(md["authorization"], "Bearer t0k")  # along with the token
        self.assertEqual(extra_keys(md), TRACE | {"authorization"})
        j.lookup("k2")
        self.assertEqual(len(calls), 2)  # read on every call
        self.assertIn(("traceparent", TP), j.metadata)  # for the stub's other RPCs too

    def test_bad_names_and_values_are_dropped(self):
        bad = {
            "traceparent": TP + "\r\nx-evil: 1",  # a newline
            "tracestate": "caf\u00e9=1",          # not ASCII
            "baggage": "",                         # empty
            "authorization": "Bearer stolen",      # not a trace header
            "x-custom": "1",
            "grpc-timeout": "1S",
            7: "x",
        }
        j = self.journal(token="t0k", trace_context=lambda: bad)
        j.lookup("k1")
        md = self.rec.last()
        self.assertEqual(extra_keys(md), {"authorization"}, md)
        self.assertEqual(md["authorization"], "Bearer t0k")  # the hook cannot replace the token

        self.journal(trace_context=lambda: {"traceparent": TP, "tracestate": b"bytes=1",
                                            "baggage": "a=" + "b" * client_mod.MAX_TRACE_VALUE_LEN}).lookup("k1")
        md = self.rec.last()
        self.assertEqual(extra_keys(md), {"traceparent"}, md)  # the good one still goes
        self.assertEqual(md["traceparent"], TP)

    def test_a_failing_or_odd_hook_sends_nothing_and_the_call_goes_on(self):
        def boom():
            raise RuntimeError("tracer broken")

        with self.assertLogs("opjournal", "WARNING"):
            self.journal(trace_context=boom).lookup("k1")
        self.assertEqual(extra_keys(self.rec.last()), set())
        for odd in (None, {}, [("traceparent", TP)], "traceparent"):
            self.journal(trace_context=lambda odd=odd: odd).lookup("k1")
            self.assertEqual(extra_keys(self.rec.last()), set(), odd)
        with self.assertRaises(TypeError):
            opjournal.Journal(self.addr, trace_context={"traceparent": TP})

    def test_opentelemetry_when_importable(self):
        with mock.patch.dict(sys.modules, fake_otel()):
            j = self.journal(token="t0k")
            j.lookup("k1")  # no current span: nothing
            self.assertEqual(extra_keys(self.rec.last()), {"authorization"})
            tok = current_traceparent.set(TP)
            try:
                j.lookup("k2")
            finally:
                current_traceparent.reset(tok)
        md = self.rec.last()
        self.assertEqual(md["traceparent"], TP)
        self.assertEqual(md["tracestate"], TS)
        self.assertEqual(extra_keys(md), {"authorization", "traceparent", "tracestate"})  # no x-b3-traceid

    def test_the_hook_wins_over_opentelemetry(self):
        def inject(carrier, **_):
            raise AssertionError("opentelemetry used despite trace_context")

        with mock.patch.dict(sys.modules, fake_otel(inject)):
            self.journal(trace_context=lambda: {"traceparent": TP}).lookup("k1")
        self.assertEqual(self.rec.last()["traceparent"], TP)

    def test_the_import_is_tried_once(self):
        j = self.journal()
        j.lookup("k1")
        # Importable later: the cached answer stands (no per-call import).
        with mock.patch.dict(sys.modules, fake_otel()):
            tok = current_traceparent.set(TP)
            try:
                j.lookup("k2")
            finally:
                current_traceparent.reset(tok)
        self.assertEqual(extra_keys(self.rec.last()), set())

    def test_execute_heartbeats_carry_the_callers_context(self):
        # The heartbeats run in a thread of execute's: they still carry the
        # trace context of the caller of execute.
        rec = self.rec

        def fn(key, attempt):
            if not rec.extended.wait(5):
                raise AssertionError("no heartbeat")
            return opjournal.Effect(external_id="pay_1")

        with mock.patch.dict(sys.modules, fake_otel()):
            j = self.journal()
            tok = current_traceparent.set(TP)
            try:
                out = opjournal.execute(j, "payment:trace-1", "create_payment", {"a": 1}, fn)
            finally:
                current_traceparent.reset(tok)
        self.assertTrue(out.ok, out)
        for method in ("Register", "ExtendLease", "MarkSucceeded"):
            self.assertEqual(rec.last(method).get("traceparent"), TP, method)


if __name__ == "__main__":
    unittest.main()
