"""A Journal without a server: every RPC goes through Journal._call, which
FakeJournal answers from handlers, recording (method, request, monotonic
time) for the test to inspect. For what needs exact journal answers (the
next-step vectors) or failures a real server will not produce on demand."""

from __future__ import annotations

import threading
import time

from _harness import opjournal  # noqa: F401  (puts the package under test on sys.path)

import opjournal
from opjournal.v1 import journal_pb2 as pb


def _op(req, status, **kw) -> pb.Operation:
    return pb.Operation(operation_key=req.operation_key, status=status, attempt_count=max(req.attempt, 1), **kw)


def _mark_succeeded(req):
    op = _op(req, pb.STATUS_SUCCEEDED, external_id=req.external_id)
    if req.HasField("result"):
        op.result.CopyFrom(req.result)
    return pb.MarkSucceededResponse(operation=op)


def _mark_unknown(req):
    return pb.MarkUnknownResponse(operation=_op(req, pb.STATUS_UNKNOWN, error_code=req.error_code))


def _mark_failed_final(req):
    return pb.MarkFailedFinalResponse(operation=_op(req, pb.STATUS_FAILED_FINAL, error_code=req.error_code))


def claimed(attempt=1, lease_seconds=1) -> pb.RegisterResponse:
    """A Register answer that says: call the provider."""
    return pb.RegisterResponse(next=pb.NEXT_STEP_CALL_PROVIDER, claimed=True, attempt=attempt,
                               lease_seconds=lease_seconds,
                               operation=pb.Operation(status=pb.STATUS_IN_PROGRESS, attempt_count=attempt))


class FakeJournal(opjournal.Journal):
    """``register``: the Register answer (a pb.RegisterResponse, an
    exception to raise, or a callable of the request returning either).
    Other handlers by RPC name in ``handlers`` (same rules); MarkSucceeded,
    MarkUnknown and MarkFailedFinal answer like a journal by default."""

    def __init__(self, register, **handlers):
        self.target = "fake"
        self.timeout = 5.0
        self.worker_id = "fake-worker"
        self.lease_seconds = 0
        self._metadata = ()
        self._owns_channel = False
        self._lock = threading.Lock()
        self.calls = []
        self.handlers = {"MarkSucceeded": _mark_succeeded, "MarkUnknown": _mark_unknown,
                         "MarkFailedFinal": _mark_failed_final, "Register": register}
        self.handlers.update(handlers)

    def close(self):
        pass

    def _call(self, method, request, timeout=None):
        with self._lock:
            self.calls.append((method, request, time.monotonic()))
        h = self.handlers.get(method)
        if h is None:
            raise AssertionError("FakeJournal: unexpected %s" % method)
        r = h(request) if callable(h) else h
        if isinstance(r, BaseException):
            raise r
        return r

    def methods(self):
        """The RPC names called, in order."""
        with self._lock:
            return [m for m, _, _ in self.calls]

    def requests(self, method):
        with self._lock:
            return [r for m, r, _ in self.calls if m == method]


class AioFakeJournal(opjournal.aio.Journal):
    """FakeJournal's answers for the asyncio client: the same handlers,
    behind an awaited _call. A handler may also be a coroutine function
    (a slow journal answer)."""

    def __init__(self, register, **handlers):
        self._configure("fake", None, 5.0, "fake-worker", 0, None)
        self._owns_channel = False
        self._channel = None
        self._closed = False
        self.calls = []
        self.handlers = {"MarkSucceeded": _mark_succeeded, "MarkUnknown": _mark_unknown,
                         "MarkFailedFinal": _mark_failed_final, "Register": register}
        self.handlers.update(handlers)

    async def close(self):
        pass

    async def _call(self, method, request, timeout=None):
        self.calls.append((method, request, time.monotonic()))
        h = self.handlers.get(method)
        if h is None:
            raise AssertionError("AioFakeJournal: unexpected %s" % method)
        r = h(request) if callable(h) else h
        if hasattr(r, "__await__"):
            r = await r
        if isinstance(r, BaseException):
            raise r
        return r

    def methods(self):
        """The RPC names called, in order."""
        return [m for m, _, _ in self.calls]

    def requests(self, method):
        return [r for m, r, _ in self.calls if m == method]
