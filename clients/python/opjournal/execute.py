"""execute(): run an irreversible action through the journal, safely retryable.

The protocol:

1. Register the operation under its stable key and claim it, in one round
   trip, BEFORE anything is sent to the provider.
2. The journal decides the next step (RegisterResponse.next) and execute
   acts on it and on nothing else: a confirmed success is replayed
   (``replayed=True``, the stored result), a confirmed rejection stays
   final, a live lease elsewhere is IN_PROGRESS_ELSEWHERE, an operation
   whose outcome is unknown (or that a person must decide) is
   VERIFICATION_REQUIRED, and the same key with other parameters is a
   CONFLICT. A step this SDK does not know is an error, never leave to call.
3. Only on NEXT_STEP_CALL_PROVIDER call ``fn(key, attempt)`` (with
   ``deadline=`` too if fn declares it), in a worker thread, under the
   lease the journal granted: fn may run at most lease − margin; long calls
   keep the lease alive by heartbeat; when the lease cannot be kept the SDK
   gives up, the outcome is unknown, and the reconciler settles it.
4. Classify fn's outcome and record it: a returned Effect is MarkSucceeded;
   only a raised :class:`Rejected` (the provider confirmed that nothing
   happened) is MarkFailedFinal; every other exception (a timeout, a dropped
   connection, a 5xx, a bug) is MarkUnknown, because the effect may have
   happened. A KeyboardInterrupt/SystemExit is recorded as unknown
   ("interrupted") and re-raised. An exception that names no provider
   observation (recorded as "error": a NameError, a KeyError, any bug in
   fn) is logged with its traceback on the ``opjournal`` logger (ERROR);
   every failure of fn is also described in ``Outcome.message``.

If the journal cannot record the outcome, execute raises
:class:`~opjournal.errors.NotRecorded` and never reports a success the
journal has not stored; the operation shows as unknown once its lease
expires, so it is verified rather than retried blindly.
"""

from __future__ import annotations

import contextvars
import enum
import functools
import http.client
import inspect
import logging
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

from . import _convert
from ._limits import (HEARTBEAT_DIVISOR, HEARTBEAT_MIN_SECONDS, LEASE_MARGIN_DIVISOR, LEASE_MARGIN_MAX_SECONDS,
                      LEASE_MARGIN_MIN_SECONDS, MAX_ERROR_CODE_LEN)
from .client import Journal, Operation, next_step_name
from .errors import (Internal, InvalidArgument, InvalidState, NotRecorded, OpjournalError, PayloadMismatch,
                     RateLimited, ResultNotStored, StaleAttempt, TooLarge, Unavailable)
from .v1 import journal_pb2 as pb

__all__ = [
    "OutcomeKind",
    "Outcome",
    "Effect",
    "Deadline",
    "Rejected",
    "UnknownOutcome",
    "NotSucceeded",
    "execute",
    "classify_http",
    "urlopen",
    "idempotent",
]

#: Where execute logs what fn did wrong: an exception that names no provider
#: observation (error_code "error", most likely a bug in fn) at ERROR with
#: its traceback. Python's last-resort handler prints it on stderr when the
#: application configured no logging.
log = logging.getLogger("opjournal")

#: The journal's limit on error_code, in bytes of UTF-8.
MAX_ERROR_CODE = MAX_ERROR_CODE_LEN

#: The error_code execute records when it gave up waiting for fn at the end
#: of the lease.
LEASE_EXPIRED = "lease_expired"


class OutcomeKind(str, enum.Enum):
    """What execute established. A str: ``outcome.kind == "succeeded"`` works."""

    #: The effect is confirmed and recorded; ``result`` is the stored result.
    SUCCEEDED = "succeeded"
    #: Another worker holds a live lease; fn was not called. Ask again after
    #: ``retry_after`` seconds.
    IN_PROGRESS_ELSEWHERE = "in_progress_elsewhere"
    #: The outcome is unknown (a timeout, a 5xx, a crash, a vanished worker):
    #: the effect may have happened. fn is not called again until
    #: reconciliation or a person settles it (or, for a retry_same_key
    #: action, until the next execute claims a new attempt).
    VERIFICATION_REQUIRED = "verification_required"
    #: The key is registered with other parameters; fn was not called and
    #: nothing changed. A new intent needs a new key.
    CONFLICT = "conflict"
    #: The provider confirmed a rejection (``error_code``); no retry of this
    #: key will call fn again.
    FAILED_FINAL = "failed_final"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Effect:
    """What fn returns when the provider confirmed the effect.

    ``external_id`` is the provider's id of the effect ("pay_5f2c", at most
    200 characters); it lets the journal detect a duplicate effect.
    ``result`` (a JSON object, or None) is stored and returned on every
    replay: keep only what a retry needs, sanitized (no secrets, no card
    data)."""

    external_id: str = ""
    result: Optional[Mapping[str, Any]] = None


def _lease_margin(lease: float) -> float:
    """How long before the end of a lease of ``lease`` seconds execute stops
    waiting for fn: a LEASE_MARGIN_DIVISOR-th of it, within
    [LEASE_MARGIN_MIN_SECONDS, LEASE_MARGIN_MAX_SECONDS]."""
    return min(max(lease / LEASE_MARGIN_DIVISOR, LEASE_MARGIN_MIN_SECONDS), LEASE_MARGIN_MAX_SECONDS)


def _heartbeat_interval(lease: float) -> float:
    """How often execute extends a lease of ``lease`` seconds while fn runs:
    every HEARTBEAT_DIVISOR-th of it, at least HEARTBEAT_MIN_SECONDS apart."""
    return max(lease / HEARTBEAT_DIVISOR, HEARTBEAT_MIN_SECONDS)


class Deadline:
    """When execute stops waiting for fn, on the monotonic clock.

    execute passes one to fn as ``deadline=`` when fn declares a parameter
    of that name (or ``**kwargs``). It starts at the lease the journal
    granted minus a safety margin, measured from when the claim was sent,
    and moves later only when a heartbeat is granted. ``remaining()`` is the
    seconds left (>= 0; give it to the provider call as its timeout, e.g.
    ``opjournal.urlopen(req, deadline=deadline)``), ``expired()`` whether
    it has passed, and ``event`` a threading.Event that is set when execute
    gives up waiting: fn may wait on it, or poll it, to stop early. Once
    execute has given up, the outcome is recorded as unknown
    ("lease_expired"); an Effect fn still returns is recorded afterwards."""

    def __init__(self, at: float):
        self._at = float(at)
        #: Set when execute gives up waiting for fn.
        self.event = threading.Event()

    @property
    def at(self) -> float:
        """The deadline, in time.monotonic() seconds."""
        return self._at

    def remaining(self) -> float:
        """Seconds left before execute gives up (0 once it has)."""
        if self.event.is_set():
            return 0.0
        return max(self._at - time.monotonic(), 0.0)

    def expired(self) -> bool:
        """True once the deadline has passed or execute has given up."""
        return self.event.is_set() or time.monotonic() >= self._at

    def __repr__(self) -> str:
        return "Deadline(remaining=%.3fs%s)" % (self.remaining(), ", expired" if self.expired() else "")


@dataclass(frozen=True)
class Outcome:
    """The outcome of execute.

    ``replayed``: the answer is the journal's stored terminal state and fn
    was not called by this execute. ``external_id``/``result``: the stored
    effect (SUCCEEDED; after a duplicate effect, the first one's, with
    ``needs_review`` set, read with a lookup). When this execute recorded
    the effect, ``result`` is the one fn returned, as sent: the journal's
    answer (the "basic" view) leaves it out, and what the journal stores
    differs only where the policy says so (redact_fields blanked, null
    members dropped), which a replay returns. ``error_code``: the provider's rejection
    (FAILED_FINAL) or what was last observed ("timeout", "http_503") for
    VERIFICATION_REQUIRED. ``retry_after``: seconds until the other worker's
    lease ends (IN_PROGRESS_ELSEWHERE, at least 1). ``operation``: the
    journal's record (None for CONFLICT). ``cause``: fn's exception when
    this execute called fn and it failed, or the PayloadMismatch of a
    CONFLICT; it is not stored in the journal. ``message``: what happened,
    for people and logs (not stored): for an exception of fn its type and
    text ("NameError: name 'PROVIDER_URL' is not defined"), when execute
    gave up at the deadline why, for a CONFLICT the journal's
    explanation; "" otherwise."""

    kind: OutcomeKind
    replayed: bool = False
    external_id: str = ""
    result: Optional[Dict[str, Any]] = None
    error_code: str = ""
    retry_after: float = 0.0
    needs_review: bool = False
    operation: Optional[Operation] = None
    cause: Optional[BaseException] = field(default=None, compare=False)
    message: str = field(default="", compare=False)

    @property
    def ok(self) -> bool:
        """True for SUCCEEDED."""
        return self.kind is OutcomeKind.SUCCEEDED

    def check(self) -> "Outcome":
        """Returns self when SUCCEEDED, else raises NotSucceeded: for tool
        code that reports anything but a success as an error."""
        if self.ok:
            return self
        raise NotSucceeded(self)


class NotSucceeded(Exception):
    """Raised by Outcome.check() for any outcome but SUCCEEDED; ``outcome``
    holds it."""

    def __init__(self, outcome: Outcome):
        self.outcome = outcome
        k = outcome.kind
        if k is OutcomeKind.IN_PROGRESS_ELSEWHERE:
            msg = "operation is in progress elsewhere; ask again in %gs" % outcome.retry_after
        elif k is OutcomeKind.VERIFICATION_REQUIRED:
            msg = ("operation outcome is unknown; verification required before any retry (last observed: %s)"
                   % (outcome.error_code or "-"))
        elif k is OutcomeKind.CONFLICT:
            msg = ("operation key is registered with other parameters; nothing was called; "
                   "use a new operation key for a new intent")
        elif k is OutcomeKind.FAILED_FINAL:
            msg = "operation failed finally (%s)" % outcome.error_code
        else:
            msg = "no outcome (%s)" % k
        if outcome.operation is not None:
            msg = "operation %r: %s" % (outcome.operation.operation_key, msg)
        if outcome.message:
            msg += ": %s" % (outcome.message,)
        elif outcome.cause is not None:
            msg += ": %s" % (outcome.cause,)
        super().__init__("opjournal: " + msg)


class Rejected(Exception):
    """A provider's confirmed rejection: proof that no effect happened (a
    validation error, a declined card). Raise it from fn ONLY then; when in
    doubt raise anything else, which execute records as unknown.

    ``code`` is recorded as the operation's error_code ("card_declined",
    "http_400"; no secrets). ``message`` is for logs, not recorded.
    ``status``/``body``: the HTTP status and (start of the) body, when the
    rejection came from urlopen()."""

    def __init__(self, code: str, message: str = "", *, status: Optional[int] = None, body: Optional[bytes] = None):
        self.code = code
        self.message = message
        self.status = status
        self.body = body
        super().__init__(code, message)

    def __str__(self) -> str:
        return "rejected (%s)%s" % (self.code, ": " + self.message if self.message else "")


class UnknownOutcome(Exception):
    """An attempt without a definite answer (a timeout, a dropped
    connection, a 5xx, a 409 or 429): the effect may have happened. execute
    records every exception but Rejected as unknown; this one only names the
    observation (``code``, e.g. "http_503"), and wins over a Rejected it is
    chained with (``raise Rejected(...) from UnknownOutcome(...)``)."""

    def __init__(self, code: str, message: str = "", *, status: Optional[int] = None, body: Optional[bytes] = None):
        self.code = code
        self.message = message
        self.status = status
        self.body = body
        super().__init__(code, message)

    def __str__(self) -> str:
        return "outcome unknown (%s)%s" % (self.code, ": " + self.message if self.message else "")


# -- classification -----------------------------------------------------------


def classify_http(status_code: int, reason: str = "") -> None:
    """Classifies a provider's HTTP status for execute, the rule of the
    journal: returns None for 2xx (a success); raises UnknownOutcome
    ("http_<status>") for 408, 409 (an idempotent provider still processing
    the same key), 425, 429, every 5xx, 1xx and 3xx, since the effect may
    have happened or be under way; raises Rejected("http_<status>") for any
    other 4xx, a confirmed rejection. If a provider documents other statuses
    as definite (or not), classify them yourself first."""
    sc = int(status_code)
    code = "http_%d" % sc
    msg = "provider answered %d%s" % (sc, " " + reason if reason else "")
    if 200 <= sc <= 299:
        return None
    if sc in (408, 409, 425, 429):
        raise UnknownOutcome(code, msg, status=sc)
    if 400 <= sc <= 499:
        raise Rejected(code, msg, status=sc)
    raise UnknownOutcome(code, msg, status=sc)


def urlopen(url: Union[str, urllib.request.Request], data: Optional[bytes] = None, timeout: float = 10.0,
            *, context: Optional[ssl.SSLContext] = None, max_error_body: int = 65536,
            deadline: Optional[Deadline] = None):
    """urllib.request.urlopen for fn: returns the response of a 2xx answer;
    a non-2xx answer raises what classify_http says (Rejected for a definite
    4xx, UnknownOutcome otherwise) with ``status`` and ``body`` (its first
    ``max_error_body`` bytes), chained from the HTTPError. Timeouts and
    connection errors propagate unchanged: execute records them as unknown.
    ``timeout`` defaults to 10 s (never block a lease forever). With the
    ``deadline`` execute gave fn, the timeout is ``min(timeout,
    deadline.remaining())``, and once the deadline has passed nothing is
    sent (TimeoutError)."""
    if deadline is not None:
        left = deadline.remaining()
        if left <= 0:
            raise TimeoutError("opjournal: the lease's deadline has passed; the request was not sent")
        timeout = left if timeout is None else min(timeout, left)
    try:
        return urllib.request.urlopen(url, data=data, timeout=timeout, context=context)
    except urllib.error.HTTPError as e:
        body = None
        try:
            body = e.read(max_error_body)
        except Exception:
            pass
        finally:
            e.close()
        try:
            classify_http(e.code, str(e.reason or ""))
        except (Rejected, UnknownOutcome) as c:
            c.body = body
            raise c from e
        raise UnknownOutcome("http_%d" % e.code, "unexpected HTTPError", status=e.code, body=body) from e


def _chain(exc: BaseException):
    """exc and its explicit causes (``raise X from Y``), outermost first."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__


def _code_of(e: BaseException) -> str:
    """The error_code one exception names, or "" if it names none."""
    if isinstance(e, UnknownOutcome):
        return e.code
    if isinstance(e, urllib.error.HTTPError):  # before URLError, its base
        return "http_%d" % e.code
    if isinstance(e, (TimeoutError, socket.timeout)):
        return "timeout"
    if isinstance(e, urllib.error.URLError):
        return "timeout" if isinstance(e.reason, (TimeoutError, socket.timeout)) else "connection_error"
    if isinstance(e, (ConnectionError, socket.gaierror, socket.herror)):
        return "connection_error"
    if isinstance(e, (http.client.HTTPException, ssl.SSLError)):
        return "transport_error"
    # Other HTTP libraries (requests, httpx, aiohttp), by duck typing.
    resp = getattr(e, "response", None)
    sc = getattr(resp, "status_code", None)
    if sc is None:
        sc = getattr(resp, "status", None)
    if isinstance(sc, int) and not isinstance(sc, bool):
        return "http_%d" % sc
    names = [c.__name__ for c in type(e).__mro__]
    if any("Timeout" in n for n in names):
        return "timeout"
    if any(n in ("ConnectionError", "ConnectError", "ClientConnectionError") for n in names):
        return "connection_error"
    return ""


def _classify(exc: BaseException) -> Tuple[bool, str]:
    """How fn's exception is recorded: (final, error_code). A Rejected in the
    chain is final unless an UnknownOutcome is in it too (the safer reading
    wins); anything else is unknown, named by the first exception in the
    chain that names something ("timeout", "http_503"), else "error"."""
    chain = list(_chain(exc))
    if not any(isinstance(e, UnknownOutcome) for e in chain):
        for e in chain:
            if isinstance(e, Rejected):
                return True, _sanitize_code(e.code, "rejected")
    for e in chain:
        code = _code_of(e)
        if code:
            return False, _sanitize_code(code, "error")
    return False, "error"


def _sanitize_code(code: Any, fallback: str) -> str:
    """Makes code acceptable to the journal (<= 100 bytes of UTF-8, no
    control characters), so an outcome is never lost to a malformed code."""
    code = str(code) if code is not None else ""
    if not code:
        return fallback
    code = code.encode("utf-8", "replace").decode("utf-8")
    code = "".join("_" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in code)
    while len(code.encode("utf-8")) > MAX_ERROR_CODE:
        code = code[:-1]
    return code


# -- execute ------------------------------------------------------------------


def _check_op(key: Any, action: Any, payload: Any) -> None:
    if not isinstance(key, str) or key == "":
        raise InvalidArgument(None, "is required (a non-empty str)", "operation_key")
    if len(key) > 200:
        raise InvalidArgument(None, "is %d characters; the limit is 200" % len(key), "operation_key")
    for i, c in enumerate(key):
        if not 0x21 <= ord(c) <= 0x7E:
            raise InvalidArgument(None, "has %r at offset %d; only visible ASCII characters (0x21-0x7e) are allowed"
                                  % (c, i), "operation_key")
    if not isinstance(action, str) or action == "":
        raise InvalidArgument(None, "is required (a non-empty str)", "action_type")
    if payload is None:
        raise InvalidArgument(None, "is required (a JSON object; {} for none)", "payload")


def execute(journal: Journal, key: str, action: str, payload: Mapping[str, Any],
            fn: Callable[..., Union[Effect, Mapping[str, Any], None]], *, heartbeat: bool = True,
            refs: Optional[Mapping[str, str]] = None, parent_key: Optional[str] = None) -> Outcome:
    """Runs fn at most once per attempt the journal grants, and never again
    once the outcome is recorded.

    ``key`` names the business intent: made ONCE per intent by orchestrator
    code (never by the model), stored with the intent, and the same for
    every retry of it. In production make it opaque and random
    (:func:`~opjournal.new_key`) and put the business links in ``refs``; a
    side effect of another operation gets a key derived from its parent's
    (:func:`~opjournal.child_key`), with ``parent_key`` set to the parent's
    key. ``action`` is an action of the server's policy. ``payload`` is the
    request parameters (a JSON object; money as integers in minor units):
    the same key with another payload is a CONFLICT.

    ``refs`` are business references stored beside the key and searchable
    ({"order_id": "817", "customer": "c-93"}; at most MAX_REFS, names of
    [a-z0-9_.-], short values, nothing secret). They are part of neither the
    key nor the request hash, and fixed at registration: a retry must send
    the same ones, like ``parent_key`` (other refs, or another parent, are a
    CONFLICT whose ``cause`` names the field "refs" or "parent_key").

    The journal decides the next step (RegisterResponse.next) and execute
    acts on it alone: fn is called only on NEXT_STEP_CALL_PROVIDER; the
    other steps are answered without calling it (see OutcomeKind), and a
    step this SDK does not know raises Internal without calling fn.

    ``fn(key, attempt)`` calls the provider, passing the key on (e.g. as
    Idempotency-Key); ``attempt`` is the journal's fencing token (1 first).
    If fn declares a parameter ``deadline`` (or ``**kwargs``) it is called
    as ``fn(key, attempt, deadline=...)`` with a :class:`Deadline`: pass
    ``deadline.remaining()`` on as the provider call's timeout (or the
    deadline to :func:`urlopen`), and stop when ``deadline.event`` is set.
    It returns an Effect(external_id, result) (or a dict with those keys, or
    None for an effect without id or result) when the provider confirmed the
    effect, raises Rejected(code) when the provider confirmed that nothing
    happened, and lets anything else propagate: execute records it as
    unknown ("timeout", "connection_error", "http_503", "error").

    The lease rule: fn may run at most lease − margin; long calls keep the
    lease alive by heartbeat; when the lease cannot be kept the SDK gives
    up, the outcome is unknown, and the reconciler settles it. In detail:
    fn runs in a daemon worker thread (in a copy of the caller's
    contextvars). The lease is the one the journal granted
    (RegisterResponse.lease_seconds), measured on the monotonic clock from
    just before the claim was sent; the margin is a tenth of it, within
    LEASE_MARGIN_MIN_SECONDS..LEASE_MARGIN_MAX_SECONDS (opjournal._limits).
    With ``heartbeat=True`` (the default) a heartbeat thread calls
    ExtendLease every third of the lease (at least HEARTBEAT_MIN_SECONDS
    apart) while fn runs; each granted extension of g seconds moves the
    deadline to (when that heartbeat was sent) + g − margin(g) if that is
    later (never earlier: the server never shortens a lease). A refused
    heartbeat (the lease expired, or the policy's max_attempt_seconds is
    reached) stops the heartbeats and keeps the deadline; a transport error
    keeps it and tries again at the next interval. When the deadline passes
    before fn returns, execute sets ``deadline.event``, stops waiting,
    records the attempt as unknown ("lease_expired") and returns
    VERIFICATION_REQUIRED; an Effect fn returns later is still recorded
    (MarkSucceeded, best effort, from the worker thread). Python cannot stop
    a thread: fn must honour the deadline itself to really stop.

    Returns the Outcome. Raises InvalidArgument for an invalid key, action or
    payload (before any call), an OpjournalError when the journal is
    unreachable or refuses the request (UnknownAction, InvalidArgument,
    Unauthenticated, ...) or answers a step this SDK does not know
    (Internal), NotRecorded when fn ran but its outcome could not be
    recorded, ResultNotStored when the effect was recorded as succeeded but
    its result was refused (``.outcome`` holds the outcome), and TypeError
    (after recording the attempt as unknown) when fn returned something else
    than the above. A KeyboardInterrupt or SystemExit in fn (or while
    execute waits for it) is recorded as unknown ("interrupted") and
    re-raised.
    """
    _check_op(key, action, payload)
    if not callable(fn):
        raise TypeError("opjournal: execute %r: fn is not callable" % key)
    wants_deadline = _accepts_deadline(fn)
    req = journal._register_request(key, action, payload, claim=True, refs=refs, parent_key=parent_key)
    t0 = time.monotonic()  # the lease runs from (no earlier than) here
    try:
        answer: Union[pb.RegisterResponse, OpjournalError] = journal._call("Register", req)
    except PayloadMismatch as e:
        answer = e
    step = _outcome_of(answer)
    if isinstance(step, Outcome):
        return step
    return _attempt(journal, key, step, t0, fn, wants_deadline, heartbeat)


@dataclass(frozen=True)
class _Call:
    """_outcome_of's answer when the journal says to call the provider."""

    attempt: int
    lease_seconds: int


def _outcome_of(answer: Union[pb.RegisterResponse, pb.ClaimResponse, BaseException]) -> Union[Outcome, _Call]:
    """What execute does with the journal's answer to Register (or Claim):
    a pure function of ``answer.next``, the journal's decision, and never of
    the operation's status. Returns a _Call(attempt, lease_seconds) for
    NEXT_STEP_CALL_PROVIDER, else the Outcome to return without calling fn.
    ``answer`` may instead be the error the call raised: a PayloadMismatch
    is a CONFLICT, any other is raised. A step this SDK does not know
    (UNSPECIFIED, CLAIM, a newer number) raises Internal: never leave to
    call."""
    if isinstance(answer, BaseException):
        if isinstance(answer, PayloadMismatch):
            return Outcome(kind=OutcomeKind.CONFLICT, cause=answer, message=str(answer))
        raise answer
    nxt = answer.next
    if nxt == pb.NEXT_STEP_CALL_PROVIDER:
        if answer.attempt < 1 or answer.lease_seconds < 1:
            raise Internal(None, "the journal said call_provider with attempt %d and a lease of %d s; "
                           "nothing was called" % (answer.attempt, answer.lease_seconds))
        return _Call(answer.attempt, answer.lease_seconds)
    op = Operation.from_pb(answer.operation)
    base = dict(operation=op, needs_review=op.needs_review)
    if nxt == pb.NEXT_STEP_REPLAY:
        return Outcome(OutcomeKind.SUCCEEDED, replayed=True, external_id=op.external_id, result=op.result, **base)
    if nxt == pb.NEXT_STEP_FAILED_FINAL:
        return Outcome(OutcomeKind.FAILED_FINAL, replayed=True, error_code=op.error_code, **base)
    if nxt == pb.NEXT_STEP_WAIT:
        return Outcome(OutcomeKind.IN_PROGRESS_ELSEWHERE, retry_after=float(max(answer.retry_after_seconds, 1)),
                       **base)
    if nxt == pb.NEXT_STEP_VERIFICATION_REQUIRED:
        return Outcome(OutcomeKind.VERIFICATION_REQUIRED, error_code=op.error_code, **base)
    raise Internal(None, "the journal answered next step %r for operation %r, which this SDK does not act on; "
                   "nothing was called" % (next_step_name(nxt), op.operation_key))


def _accepts_deadline(fn) -> bool:
    """fn declares a keyword parameter ``deadline``, or **kwargs."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    for p in params:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return True
        if p.name == "deadline" and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                               inspect.Parameter.KEYWORD_ONLY):
            return True
    return False


class _Run:
    """One attempt in flight: fn's worker thread, the heartbeat thread and
    execute share it. ``state`` goes from "running" to "returned" (fn ended
    first; ``ret``/``exc`` hold how) or "abandoned" (execute gave up first),
    exactly once, under ``cond``."""

    def __init__(self, deadline: Deadline):
        self.cond = threading.Condition()
        self.state = "running"
        self.ret: Any = None
        self.exc: Optional[BaseException] = None
        self.deadline = deadline
        #: Set to stop the heartbeats.
        self.stop = threading.Event()
        #: Set once execute's own record of an abandoned attempt is done, so
        #: a late MarkSucceeded lands after it.
        self.settled = threading.Event()


def _attempt(journal: Journal, key: str, call: _Call, t0: float, fn, wants_deadline: bool,
             heartbeat: bool) -> Outcome:
    attempt, lease = call.attempt, call.lease_seconds
    dl = Deadline(t0 + lease - _lease_margin(lease))
    run = _Run(dl)
    kwargs = {"deadline": dl} if wants_deadline else {}
    ctx = contextvars.copy_context()
    # The journal calls made off the caller's thread (the heartbeats, a late
    # MarkSucceeded) run in copies of its context too, so they carry its
    # trace context (Journal's trace_context / OpenTelemetry). A context is
    # entered by one thread at a time: each gets its own copy.
    late_ctx, beat_ctx = contextvars.copy_context(), contextvars.copy_context()

    def work():
        try:
            ret, exc = ctx.run(fn, key, attempt, **kwargs), None
        except BaseException as e:  # handed to execute, which records and re-raises it
            ret, exc = None, e
        with run.cond:
            if run.state == "running":
                run.state, run.ret, run.exc = "returned", ret, exc
                run.cond.notify_all()
                return
        # execute gave up: a confirmed effect is still a fact (the journal
        # accepts it from a stale attempt). Anything else changes nothing.
        eff = _as_effect(ret) if exc is None else None
        if eff is not None:
            run.settled.wait()
            try:
                late_ctx.run(_record_success, journal, key, attempt, eff)
            except Exception:
                pass

    threading.Thread(target=work, name="opjournal-fn-%s-%d" % (key, attempt), daemon=True).start()
    if heartbeat:
        threading.Thread(target=beat_ctx.run, args=(_heartbeat, journal, key, attempt, lease, t0, run),
                         name="opjournal-heartbeat-%s-%d" % (key, attempt), daemon=True).start()
    try:
        with run.cond:
            while run.state == "running":
                left = dl._at - time.monotonic()
                if left <= 0:
                    run.state = "abandoned"
                    dl.event.set()  # tell fn at once
                    break
                run.cond.wait(left)
    except BaseException as intr:  # KeyboardInterrupt while waiting for fn
        run.stop.set()
        _interrupted(journal, key, attempt, run, intr)
        raise
    finally:
        run.stop.set()
    if run.state == "abandoned":
        return _gave_up(journal, key, attempt, run)

    exc = run.exc
    if isinstance(exc, Exception):
        return _record_failure(journal, key, attempt, exc)
    if exc is not None:
        # KeyboardInterrupt, SystemExit, ... in fn: the effect may have
        # happened. Record it and let the interruption go on.
        _note_unknown(journal, key, attempt, exc)
        raise exc
    ret = run.ret
    eff = _as_effect(ret)
    if eff is None:
        try:
            journal.mark_unknown(key, attempt, "invalid_effect")
        except OpjournalError as e:
            raise NotRecorded(key, attempt, OutcomeKind.VERIFICATION_REQUIRED, e) from e
        raise TypeError("opjournal: fn of operation %r returned a %s; return an Effect(external_id, result), a dict "
                        "with the keys external_id and result, or None. The attempt was recorded as unknown "
                        "(invalid_effect), since the effect may have happened" % (key, type(ret).__name__))
    return _record_success(journal, key, attempt, eff)


def _heartbeat(journal: Journal, key: str, attempt: int, lease: int, t0: float, run: _Run) -> None:
    """Extends the lease every _heartbeat_interval(lease) until run.stop."""
    interval = _heartbeat_interval(lease)
    due = t0 + interval
    while not run.stop.wait(max(due - time.monotonic(), 0.0)):
        t_send = time.monotonic()
        left = run.deadline._at - t_send
        if left <= 0:
            return
        timeout = left if journal.timeout is None else min(journal.timeout, left)
        try:
            ext = journal._extend_lease(key, attempt, 0, timeout=timeout)
        except (StaleAttempt, InvalidState):
            return  # refused: the lease is over, or at the policy's max_attempt_seconds; keep the deadline
        except (Unavailable, RateLimited):
            pass  # a transport error: keep the deadline, try again at the next interval
        except Exception:
            return  # any other refusal (or a closed Journal) will not pass: keep the deadline
        else:
            g = ext.lease_seconds
            with run.cond:
                if run.state == "running":
                    # The later of the two: the server never shortens a
                    # lease, and near max_attempt_seconds it grants whole
                    # seconds rounded down, which must not pull us in.
                    run.deadline._at = max(run.deadline._at, t_send + g - _lease_margin(g))
                    run.cond.notify_all()
        due = t_send + interval


def _gave_up(journal: Journal, key: str, attempt: int, run: _Run) -> Outcome:
    """The deadline passed before fn returned: record the attempt as unknown."""
    run.deadline.event.set()
    try:
        try:
            op: Optional[Operation] = journal.mark_unknown(key, attempt, LEASE_EXPIRED)
        except StaleAttempt:
            # The lease ran out first: the journal already reads it as unknown.
            try:
                op = journal.lookup(key)
            except OpjournalError:
                op = None
        except OpjournalError as e:
            raise NotRecorded(key, attempt, OutcomeKind.VERIFICATION_REQUIRED, e) from e
    finally:
        run.settled.set()
    return Outcome(OutcomeKind.VERIFICATION_REQUIRED, error_code=LEASE_EXPIRED,
                   needs_review=op.needs_review if op is not None else False, operation=op,
                   message="fn was still running at the end of the lease less the safety margin; execute gave up "
                           "waiting and recorded the attempt as unknown (lease_expired)")


def _interrupted(journal: Journal, key: str, attempt: int, run: _Run, intr: BaseException) -> None:
    """execute was interrupted while fn ran: record what is known."""
    with run.cond:
        if run.state == "running":
            run.state = "abandoned"
    run.deadline.event.set()
    try:
        if run.state == "returned" and run.exc is None and _as_effect(run.ret) is not None:
            try:
                _record_success(journal, key, attempt, _as_effect(run.ret))
                return
            except OpjournalError:
                pass
        _note_unknown(journal, key, attempt, intr)
    finally:
        run.settled.set()


def _note_unknown(journal: Journal, key: str, attempt: int, exc: BaseException) -> None:
    try:
        journal.mark_unknown(key, attempt, "interrupted")
    except Exception as merr:
        if hasattr(exc, "add_note"):
            exc.add_note("opjournal: could not record operation %r attempt %d as unknown: %s; it will show "
                         "as unknown once its lease expires" % (key, attempt, merr))


def _as_effect(ret: Any) -> Optional[Effect]:
    if isinstance(ret, Effect):
        return ret
    if ret is None:
        return Effect()
    if isinstance(ret, Mapping) and set(ret) <= {"external_id", "result"}:
        return Effect(ret.get("external_id") or "", ret.get("result"))
    return None


def _describe(exc: BaseException) -> str:
    """An exception as "Type: text" (its qualified name outside builtins)."""
    t = type(exc)
    mod = "opjournal" if t.__module__.startswith("opjournal.") else t.__module__  # the name it is exported as
    name = t.__qualname__ if mod == "builtins" else "%s.%s" % (mod, t.__qualname__)
    text = str(exc)
    return "%s: %s" % (name, text) if text else name


def _record_failure(journal: Journal, key: str, attempt: int, exc: Exception) -> Outcome:
    final, code = _classify(exc)
    kind = OutcomeKind.FAILED_FINAL if final else OutcomeKind.VERIFICATION_REQUIRED
    message = _describe(exc)
    if not final and code == "error":
        # Nothing in the exception says what the provider did: most likely
        # a bug in fn (a NameError, a KeyError). It is still recorded as
        # unknown, since fn may have called the provider before it failed,
        # but it must not pass unseen.
        log.error("opjournal: fn of operation %r (attempt %d) raised %s; recorded as unknown (error_code \"error\"), "
                  "since the provider may have been called: the reconciler or an operator settles it before the key "
                  "is called again", key, attempt, message, exc_info=(type(exc), exc, exc.__traceback__))
    try:
        if final:
            op = journal.mark_failed_final(key, attempt, code)
        else:
            op = journal.mark_unknown(key, attempt, code)
    except OpjournalError as e:
        raise NotRecorded(key, attempt, kind, e) from e
    return Outcome(kind, error_code=code, needs_review=op.needs_review, operation=op, cause=exc, message=message)


def _record_success(journal: Journal, key: str, attempt: int, eff: Effect) -> Outcome:
    """Records a confirmed effect. A result the journal cannot store does not
    lose the effect: it is recorded without the result, then
    ResultNotStored says so."""
    external_id = "" if eff.external_id is None else str(eff.external_id)
    req = pb.MarkSucceededRequest(operation_key=key, attempt=attempt, external_id=external_id,
                                  view=pb.OPERATION_VIEW_BASIC)
    result_err: Optional[OpjournalError] = None
    if eff.result is not None:
        try:
            req.result.CopyFrom(_convert.to_struct("result", eff.result))
        except InvalidArgument as e:
            result_err = e
    try:
        try:
            op = journal._mark_succeeded(req)
        except (InvalidArgument, TooLarge) as e:
            if not req.HasField("result") or not (e.field == "result" or (e.field or "").startswith("result/")):
                raise
            result_err = e
            req.ClearField("result")
            op = journal._mark_succeeded(req)
    except OpjournalError as e:
        raise NotRecorded(key, attempt, OutcomeKind.SUCCEEDED, e, external_id) from e
    if op.external_id == external_id:
        # The answer ("basic") leaves the result out: it is the one sent.
        result = _convert.struct_or_none(req, "result")
    else:
        # The journal holds another effect (a duplicate, now under review):
        # the stored result is that one's. Best effort: the effect is
        # recorded whether or not it can be read.
        try:
            result = journal.lookup(key, view="full").result
        except OpjournalError:
            result = None
    out = Outcome(OutcomeKind.SUCCEEDED, external_id=op.external_id, result=result,
                  needs_review=op.needs_review, operation=op)
    if result_err is not None:
        raise ResultNotStored(key, out, result_err) from result_err
    return out


# -- the decorator --------------------------------------------------------------

_RESERVED = ("op_key", "attempt", "deadline")


def idempotent(journal: Journal, *, action: str, key: Union[str, Callable[..., str]],
               payload: Union[None, Callable[..., Mapping[str, Any]], Iterable[str]] = None,
               heartbeat: bool = True,
               refs: Union[None, Callable[..., Mapping[str, str]], Mapping[str, str]] = None,
               parent_key: Union[None, str, Callable[..., Optional[str]]] = None):
    """Makes an agent tool function safe to retry: each call runs through
    execute() and returns its Outcome.

    ``key`` builds the operation key from the call's arguments, bound to the
    function's parameters by name (defaults applied): a callable taking them
    as keywords (``lambda order_id, **_: f"payment:{order_id}:intent-01"``)
    or a str.format template (``"payment:{order_id}:intent-01"``). The key is
    made once per intent by orchestrator code and the same for every retry:
    when the orchestrator stored one made with new_key(), pass it in as an
    argument (``key="{op_id}"``, ``payload=[...]`` without it).
    ``payload`` is, by default, all those arguments as a dict; or a callable
    taking them as keywords and returning the payload; or a list of the
    parameter names to include.

    ``refs`` (business references, see execute()) are a callable taking the
    arguments as keywords and returning a dict of str, or a dict whose
    values are str.format templates (``{"order_id": "{order_id}"}``).
    ``parent_key`` (the key of the operation this tool's effect belongs to)
    is a callable or a str.format template as for ``key``; an empty result
    means none.

    The function calls the provider. If it declares a parameter ``op_key``,
    ``attempt`` and/or ``deadline`` (or ``**kwargs``), it receives the
    operation key (pass it on as Idempotency-Key), the attempt number and
    the :class:`Deadline` of the lease (pass it to urlopen, or
    ``deadline.remaining()`` on as a timeout); callers never pass them, and
    they are not part of the key or payload. It returns an Effect (or a dict
    with external_id/result, or None) and raises Rejected or anything else,
    as for execute, under the same lease rule: it may run at most lease −
    margin, heartbeats keep the lease alive (``heartbeat=False`` turns them
    off), and when the lease cannot be kept the outcome is unknown::

        @idempotent(journal, action="create_payment",
                    key=lambda order_id, **_: f"payment:{order_id}:intent-01")
        def create_payment(order_id, amount_minor, currency="RUB", *, op_key, attempt, deadline):
            ...  # opjournal.urlopen(req, deadline=deadline)
            return Effect(external_id=p["id"], result={"payment_id": p["id"]})

        outcome = create_payment("817", 490000)   # an Outcome; never a second charge
    """
    if not action:
        raise ValueError("idempotent: action is required")
    if not (callable(key) or isinstance(key, str)):
        raise TypeError("idempotent: key must be a callable or a str.format template")
    if payload is not None and not callable(payload):
        payload = tuple(payload)
    if refs is not None and not (callable(refs) or isinstance(refs, Mapping)):
        raise TypeError("idempotent: refs must be a callable or a dict of str.format templates")
    if parent_key is not None and not (callable(parent_key) or isinstance(parent_key, str)):
        raise TypeError("idempotent: parent_key must be a callable or a str.format template")

    def decorate(fn):
        sig = inspect.signature(fn)
        params = sig.parameters
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        passes = {r: (r in params or var_kw) for r in _RESERVED}

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for r in _RESERVED:
                if r in kwargs:
                    raise TypeError("%s() got %r: it is supplied by the journal" % (fn.__name__, r))
            bound = sig.bind_partial(*args, **kwargs)
            for r in _RESERVED:
                if r in bound.arguments:
                    raise TypeError("%s() got %r positionally: it is supplied by the journal" % (fn.__name__, r))
            bound.apply_defaults()
            for r in _RESERVED:
                bound.arguments.pop(r, None)
            fields: Dict[str, Any] = {}
            for name, value in bound.arguments.items():
                kind = params[name].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    fields.update(value)
                elif kind is inspect.Parameter.VAR_POSITIONAL:
                    fields[name] = list(value)
                else:
                    fields[name] = value
            op_key = key.format(**fields) if isinstance(key, str) else key(**fields)
            if payload is None:
                body = fields
            elif callable(payload):
                body = payload(**fields)
            else:
                body = {n: fields[n] for n in payload if n in fields}
            if refs is None:
                op_refs: Optional[Mapping[str, str]] = None
            elif callable(refs):
                op_refs = refs(**fields)
            else:
                op_refs = {n: t.format(**fields) if isinstance(t, str) else t for n, t in refs.items()}
            if parent_key is None:
                op_parent: Optional[str] = None
            elif isinstance(parent_key, str):
                op_parent = parent_key.format(**fields)
            else:
                op_parent = parent_key(**fields)
            call_args, call_kwargs = bound.args, bound.kwargs

            def run(k: str, attempt: int, *, deadline: Deadline):
                extra: Dict[str, Any] = {}
                if passes["op_key"]:
                    extra["op_key"] = k
                if passes["attempt"]:
                    extra["attempt"] = attempt
                if passes["deadline"]:
                    extra["deadline"] = deadline
                return fn(*call_args, **call_kwargs, **extra)

            return execute(journal, op_key, action, body, run, heartbeat=heartbeat, refs=op_refs,
                           parent_key=op_parent)

        wrapper.journal = journal
        wrapper.action = action
        wrapper.heartbeat = heartbeat
        return wrapper

    return decorate
