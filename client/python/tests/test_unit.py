"""Pieces that need no server: error decoding, classification, JSON."""

import pickle
import socket
import subprocess
import unittest
import urllib.error

import grpc
from _harness import PYROOT

import opjournal
from opjournal import OutcomeKind, Rejected, UnknownOutcome, _convert, _status
from opjournal.errors import from_rpc_error
from opjournal.execute import _classify, _sanitize_code


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, trailing=()):
        self._code, self._details, self._trailing = code, details, trailing

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailing


def rpc_error(code, msg, reason=None, field=None, domain="opjournal"):
    trailing = ()
    if reason:
        md = {"field": field} if field else {}
        trailing = ((_status.DETAILS_KEY, _status.encode_status(code.value[0], msg, [(reason, domain, md)])),)
    return FakeRpcError(code, msg, trailing)


#: The ErrorInfo metadata of a budget refusal.
BUDGET = {"budget": "daily-payments", "action": "create_payment", "limit": "5", "used": "5",
          "window_seconds": "86400"}


class ErrorDecodingTest(unittest.TestCase):
    def test_every_code_has_its_class(self):
        cases = {
            "INVALID_ARGUMENT": opjournal.InvalidArgument, "UNKNOWN_ACTION": opjournal.UnknownAction,
            "TOO_LARGE": opjournal.TooLarge, "PAYLOAD_MISMATCH": opjournal.PayloadMismatch,
            "STALE_ATTEMPT": opjournal.StaleAttempt, "INVALID_STATE": opjournal.InvalidState,
            "NOT_FOUND": opjournal.NotFound, "UNAUTHENTICATED": opjournal.Unauthenticated,
            "PERMISSION_DENIED": opjournal.PermissionDenied, "RATE_LIMITED": opjournal.RateLimited,
            "BUDGET_EXCEEDED": opjournal.BudgetExceeded, "UNAVAILABLE": opjournal.Unavailable, "INTERNAL": opjournal.Internal,
        }
        for reason, cls in cases.items():
            e = from_rpc_error(rpc_error(grpc.StatusCode.FAILED_PRECONDITION, "payload: bad", reason, "payload"))
            self.assertIs(type(e), cls, reason)
            self.assertEqual((e.code, e.field, e.message), (reason, "payload", "bad"))
            self.assertEqual(e.grpc_code, grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIsInstance(e, opjournal.OpjournalError)
            self.assertEqual((e.details, e.retry_after), ({}, None))  # the field is not a detail

    def test_a_new_server_code_keeps_its_name(self):
        e = from_rpc_error(rpc_error(grpc.StatusCode.ABORTED, "later", "SOMETHING_NEW"))
        self.assertIs(type(e), opjournal.OpjournalError)
        self.assertEqual(e.code, "SOMETHING_NEW")

    def test_without_error_info_the_grpc_code_decides(self):
        for code, cls in [(grpc.StatusCode.UNAVAILABLE, opjournal.Unavailable),
                          (grpc.StatusCode.DEADLINE_EXCEEDED, opjournal.Unavailable),
                          (grpc.StatusCode.UNAUTHENTICATED, opjournal.Unauthenticated),
                          (grpc.StatusCode.PERMISSION_DENIED, opjournal.PermissionDenied),
                          (grpc.StatusCode.UNIMPLEMENTED, opjournal.Internal)]:
            e = from_rpc_error(FakeRpcError(code, "msg"))
            self.assertIs(type(e), cls, code)
            self.assertIsNone(e.field)
        # Another domain's ErrorInfo is not ours.
        e = from_rpc_error(rpc_error(grpc.StatusCode.UNAVAILABLE, "m", "NOT_FOUND", domain="envoy"))
        self.assertIs(type(e), opjournal.Unavailable)
        # Garbage in the details never hides the status.
        e = from_rpc_error(FakeRpcError(grpc.StatusCode.NOT_FOUND, "m", ((_status.DETAILS_KEY, b"\xff\xff\xff"),)))
        self.assertIs(type(e), opjournal.Internal)
        self.assertIn("NOT_FOUND", e.message)

    def test_the_wire_format_is_google_rpc_status(self):
        # A google.rpc.Status holding a google.protobuf.Any of an ErrorInfo,
        # built by hand from the field numbers of the public protos.
        def ld(num, b):
            return bytes([num << 3 | 2, len(b)]) + b

        info = ld(1, b"STALE_ATTEMPT") + ld(2, b"opjournal") + ld(3, ld(1, b"field") + ld(2, b"attempt"))
        any_ = ld(1, b"type.googleapis.com/google.rpc.ErrorInfo") + ld(2, info)
        status = bytes([0x08, 9]) + ld(2, b"attempt: stale") + ld(3, any_)
        got = _status.error_info(status)
        self.assertEqual(got, ("STALE_ATTEMPT", "opjournal", {"field": "attempt"}))
        self.assertEqual(_status.error_info(_status.encode_status(9, "attempt: stale",
                                                                  [("STALE_ATTEMPT", "opjournal",
                                                                    {"field": "attempt"})])), got)

    def test_errors_pickle(self):
        e = pickle.loads(pickle.dumps(opjournal.StaleAttempt(None, "stale", "attempt")))
        self.assertEqual((type(e), e.code, e.message, e.field), (opjournal.StaleAttempt, "STALE_ATTEMPT", "stale",
                                                                  "attempt"))
        b = pickle.loads(pickle.dumps(opjournal.BudgetExceeded(None, "over", details=BUDGET, retry_after=12.5)))
        self.assertEqual((type(b), b.code, b.details, b.retry_after, b.refusal.name),
                         (opjournal.BudgetExceeded, "BUDGET_EXCEEDED", BUDGET, 12.5, "daily-payments"))

    def test_a_budget_refusal_reads_error_info_and_retry_info(self):
        # google.rpc.RetryInfo{retry_delay: google.protobuf.Duration{seconds:
        # 86399, nanos: 500000000}} beside the ErrorInfo, built by hand from
        # the field numbers of the public protos.
        def varint(n):
            out = b""
            while True:
                byte, n = n & 0x7F, n >> 7
                out += bytes([byte | (0x80 if n else 0)])
                if not n:
                    return out

        def ld(num, b):
            return bytes([num << 3 | 2]) + varint(len(b)) + b

        md = b"".join(ld(3, ld(1, k.encode()) + ld(2, v.encode())) for k, v in BUDGET.items())
        info = ld(1, b"BUDGET_EXCEEDED") + ld(2, b"opjournal") + md
        duration = bytes([0x08]) + varint(86399) + bytes([0x10]) + varint(500000000)
        retry = ld(1, duration)
        status = (bytes([0x08, 8]) + ld(2, b"over") + ld(3, ld(1, b"type.googleapis.com/google.rpc.ErrorInfo") +
                                                           ld(2, info))
                  + ld(3, ld(1, b"type.googleapis.com/google.rpc.RetryInfo") + ld(2, retry)))
        self.assertEqual(_status.retry_delay(status), 86399.5)
        self.assertEqual(_status.retry_delay(_status.encode_status(8, "over", [], retry_delay=86399.5)), 86399.5)
        e = from_rpc_error(FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "over", ((_status.DETAILS_KEY, status),)))
        self.assertIs(type(e), opjournal.BudgetExceeded)
        self.assertEqual((e.retry_after, e.details, e.message), (86399.5, BUDGET, "over"))
        self.assertEqual(e.refusal, opjournal.BudgetRefusal("daily-payments", "create_payment", 5, 5, 86400, "over"))
        # Without a RetryInfo the metadata's whole seconds are the hint;
        # without either, there is none (the request never fits).
        md_only = _status.encode_status(8, "over", [("BUDGET_EXCEEDED", "opjournal",
                                                     {**BUDGET, "retry_after_seconds": "7"})])
        e = from_rpc_error(FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "over", ((_status.DETAILS_KEY, md_only),)))
        self.assertEqual(e.retry_after, 7.0)
        none = _status.encode_status(8, "over", [("BUDGET_EXCEEDED", "opjournal", BUDGET)])
        e = from_rpc_error(FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "over", ((_status.DETAILS_KEY, none),)))
        self.assertIsNone(e.retry_after)
        # Malformed numbers read as 0; the refusal stands.
        self.assertEqual(opjournal.BudgetExceeded(None, "", details={"limit": "x"}).refusal.limit, 0)
        # A budget refusal is an outcome of execute, never a call of fn.
        out = opjournal._outcome._outcome_of(e)
        self.assertEqual((out.kind, out.retry_after, out.budget, out.cause), (OutcomeKind.BUDGET_EXCEEDED, None,
                                                                              e.refusal, e))


class ClassifyTest(unittest.TestCase):
    def test_classify_http(self):
        for sc in (200, 201, 204, 299):
            self.assertIsNone(opjournal.classify_http(sc))
        for sc in (408, 409, 425, 429, 500, 502, 503, 504, 599, 100, 301, 304, 0, 999):
            with self.assertRaises(UnknownOutcome) as cm:
                opjournal.classify_http(sc)
            self.assertEqual((cm.exception.code, cm.exception.status), ("http_%d" % sc, sc))
        for sc in (400, 401, 402, 403, 404, 410, 422, 499):
            with self.assertRaises(Rejected) as cm:
                opjournal.classify_http(sc, "Bad Request")
            self.assertEqual(cm.exception.code, "http_%d" % sc)

    def test_exceptions_map_to_error_codes(self):
        class RequestsTimeout(IOError):  # the shapes of requests/httpx exceptions
            pass

        class ReadTimeout(RequestsTimeout):
            pass

        class ConnectionErrorLike(IOError):
            pass

        ConnectionErrorLike.__name__ = "ConnectionError"

        class Resp:
            status_code = 502

        class HTTPStatusError(Exception):
            response = Resp()

        cases = [
            (socket.timeout("timed out"), False, "timeout"),
            (TimeoutError(), False, "timeout"),
            (urllib.error.URLError(socket.timeout("timed out")), False, "timeout"),
            (urllib.error.URLError(ConnectionRefusedError()), False, "connection_error"),
            (urllib.error.HTTPError("http://x", 503, "Unavailable", {}, None), False, "http_503"),
            (urllib.error.HTTPError("http://x", 400, "Bad", {}, None), False, "http_400"),  # raw: not proof
            (ConnectionResetError(), False, "connection_error"),
            (BrokenPipeError(), False, "connection_error"),
            (socket.gaierror(), False, "connection_error"),
            (ReadTimeout(), False, "timeout"),
            (ConnectionErrorLike(), False, "connection_error"),
            (HTTPStatusError(), False, "http_502"),
            (ValueError("bug"), False, "error"),
            (UnknownOutcome("http_409"), False, "http_409"),
            (Rejected("card_declined"), True, "card_declined"),
            (Rejected(""), True, "rejected"),
        ]
        for exc, final, code in cases:
            self.assertEqual(_classify(exc), (final, code), repr(exc))

    def test_causes_are_followed(self):
        def raised(outer, cause):
            try:
                raise outer from cause
            except Exception as e:
                return e

        # A wrapped rejection is still a rejection...
        self.assertEqual(_classify(raised(RuntimeError("tool failed"), Rejected("card_declined"))),
                         (True, "card_declined"))
        # ...but an unknown outcome anywhere in the chain wins (the safer reading).
        self.assertEqual(_classify(raised(Rejected("x"), UnknownOutcome("http_503"))), (False, "http_503"))
        # A wrapped timeout names the observation.
        self.assertEqual(_classify(raised(RuntimeError("tool failed"), socket.timeout())), (False, "timeout"))

    def test_sanitize_code(self):
        self.assertEqual(_sanitize_code("", "error"), "error")
        self.assertEqual(_sanitize_code("a\nb\x7f", "e"), "a_b_")
        long = _sanitize_code("é" * 80, "e")
        self.assertLessEqual(len(long.encode()), 100)
        self.assertEqual(long, "é" * 50)


class ConvertTest(unittest.TestCase):
    def test_round_trip(self):
        obj = {"s": "x", "i": 490000, "neg": -(2 ** 53 - 1), "f": 1.5, "b": True, "n": None,
               "l": [1, "two", {"three": 3.0}], "o": {"deep": {"er": []}}, "t": (1, 2)}
        back = _convert.from_struct(_convert.to_struct("payload", obj))
        want = dict(obj, t=[1, 2])
        del want["n"]  # a null member means "not set", as the journal stores it
        self.assertEqual(back, want)
        self.assertEqual(list(back), sorted(want))  # in the order replays give
        self.assertIsInstance(back["i"], int)
        self.assertIsInstance(back["l"][2]["three"], int)  # JSON has one number type
        self.assertIs(back["b"], True)

    def test_what_json_cannot_carry_is_refused_with_its_path(self):
        for obj, path in [({"a": {"b": [0, 2 ** 53]}}, "payload/a/b/1"),
                          ({"a": float("nan")}, "payload/a"),
                          ({"a": float("inf")}, "payload/a"),
                          ({"a": 1e300}, "payload/a"),
                          ({"a": b"bytes"}, "payload/a"),
                          ({"a": {1, 2}}, "payload/a"),
                          ({1: "x"}, "payload"),
                          ([1], "payload"),
                          ("{}", "payload")]:
            with self.assertRaises(opjournal.InvalidArgument) as cm:
                _convert.to_struct("payload", obj)
            self.assertEqual(cm.exception.field, path, obj)

    def test_dataclasses_are_objects(self):
        import dataclasses

        @dataclasses.dataclass
        class Pay:
            order_id: str
            amount_minor: int

        self.assertEqual(_convert.from_struct(_convert.to_struct("payload", Pay("817", 1))),
                         {"order_id": "817", "amount_minor": 1})


class OutcomeTest(unittest.TestCase):
    def test_kind_is_a_str(self):
        self.assertEqual(OutcomeKind.SUCCEEDED, "succeeded")
        self.assertEqual(str(OutcomeKind.IN_PROGRESS_ELSEWHERE), "in_progress_elsewhere")
        self.assertEqual([k.value for k in OutcomeKind],
                         ["succeeded", "in_progress_elsewhere", "verification_required", "conflict", "failed_final",
                          "awaiting_approval", "budget_exceeded"])

    def test_check(self):
        ok = opjournal.Outcome(OutcomeKind.SUCCEEDED)
        self.assertIs(ok.check(), ok)
        for kind, text in [(OutcomeKind.CONFLICT, "other parameters"),
                           (OutcomeKind.IN_PROGRESS_ELSEWHERE, "ask again in 3s"),
                           (OutcomeKind.FAILED_FINAL, "failed finally (card_declined)")]:
            out = opjournal.Outcome(kind, retry_after=3.0, error_code="card_declined")
            with self.assertRaises(opjournal.NotSucceeded) as cm:
                out.check()
            self.assertIn(text, str(cm.exception))
            self.assertIs(cm.exception.outcome, out)
        refusal = opjournal.BudgetRefusal("daily-payments", "create_payment", 5, 5, 86400)
        for retry_after, text in [(60.0, "may fit in 60s"), (None, "never fits")]:
            out = opjournal.Outcome(OutcomeKind.BUDGET_EXCEEDED, retry_after=retry_after, budget=refusal)
            with self.assertRaises(opjournal.NotSucceeded) as cm:
                out.check()
            self.assertIn('budget \'daily-payments\' of create_payment: 5 of 5 used; nothing was registered or '
                          'called; ', str(cm.exception))
            self.assertIn(text, str(cm.exception))


class DecoratorArgsTest(unittest.TestCase):
    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            opjournal.idempotent(None, action="", key="k")
        with self.assertRaises(TypeError):
            opjournal.idempotent(None, action="a", key=42)


class PublicApiTest(unittest.TestCase):
    def test_all_is_in_sync_and_documented(self):
        import inspect
        import sys
        names = set(opjournal.__all__)
        self.assertEqual(len(names), len(opjournal.__all__))  # no duplicates
        for mod in ("client", "execute", "errors"):
            m = sys.modules["opjournal." + mod]
            for n in m.__all__:
                self.assertIn(n, names, "opjournal.%s.%s is not exported" % (mod, n))
        for n in opjournal.__all__:
            obj = getattr(opjournal, n)
            self.assertTrue(inspect.getdoc(obj), "%s has no docstring" % n)
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                        continue
                    self.assertTrue(inspect.getdoc(member), "%s.%s has no docstring" % (n, attr))
        for n in ("extend_lease", "acknowledge", "get_policy", "list_events", "iter_events", "list_operations"):
            self.assertTrue(callable(getattr(opjournal.Journal, n)), n)
        self.assertEqual([f for f in ("duplicate_external_ids", "duplicate_reports", "attempt_started_at")
                          if f not in opjournal.Operation.__dataclass_fields__], [])
        self.assertIn("stated_actor", opjournal.Event.__dataclass_fields__)


class GeneratedCodeTest(unittest.TestCase):
    def test_generated_code_imports_and_matches_the_proto(self):
        from opjournal.v1 import journal_pb2, journal_pb2_grpc
        self.assertEqual(journal_pb2.DESCRIPTOR.name, "opjournal/v1/journal.proto")
        svc = journal_pb2.DESCRIPTOR.services_by_name["JournalService"]
        self.assertIn("Register", svc.methods_by_name)
        self.assertTrue(hasattr(journal_pb2_grpc, "JournalServiceStub"))

    def test_generate_sh_is_a_valid_script(self):
        r = subprocess.run(["bash", "-n", str(PYROOT / "generate.sh")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
