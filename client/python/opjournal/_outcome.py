"""The pure half of execute(), shared by the blocking client (execute.py)
and the asyncio one (aio.py): the outcome types, the classification of
fn's exceptions, the journal's next step, the lease arithmetic, the
decorator's binding of a call's arguments, and the recording of an outcome
as steps that do no I/O.

The recording steps are generators ("sans-I/O"): each yields the journal
call it needs as ``(method name, args, kwargs)`` of a Journal, and is sent
that call's answer (or thrown its OpjournalError); execute.py drives them
with blocking calls (_drive), aio.py with awaited ones (aio._drive). So the
two clients cannot drift apart in what they record, when they raise
NotRecorded or ResultNotStored, or what Outcome they return.
"""

from __future__ import annotations

import copy
import dataclasses
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Iterable, Optional, Tuple, Union

from . import _convert
from ._limits import (HEARTBEAT_DIVISOR, HEARTBEAT_MIN_SECONDS, LEASE_MARGIN_DIVISOR, LEASE_MARGIN_MAX_SECONDS,
                      LEASE_MARGIN_MIN_SECONDS, MAX_ERROR_CODE_LEN)
from .client import Operation, next_step_name
from .errors import (BudgetExceeded, BudgetRefusal, Internal, InvalidArgument, NotRecorded, OpjournalError,
                     PayloadMismatch, ResultNotStored, TooLarge)
from .v1 import journal_pb2 as pb

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
    #: The provider confirmed a rejection (``error_code``), or a person
    #: rejected the request before it ran ("approval_rejected", or
    #: "approval_timeout" when nobody decided in time); no retry of this key
    #: will call fn again.
    FAILED_FINAL = "failed_final"
    #: The action's policy says a person must approve this exact request
    #: (``operation.request_hash``) first, and no decision came within
    #: ``approval_wait``; fn was not called. Ask again with the same key and
    #: payload after ``retry_after`` seconds (or wait longer): once it is
    #: approved, that execute calls fn.
    AWAITING_APPROVAL = "awaiting_approval"
    #: The operation would pass a budget of its action whose on_exceed is
    #: reject (``budget`` says which, its limit and use); nothing was
    #: registered and fn was not called. The same request may fit after
    #: ``retry_after`` seconds (None: never, it alone is over the limit); it
    #: must not be split or rephrased to get around the limit.
    BUDGET_EXCEEDED = "budget_exceeded"

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


def _heartbeat_retries(exc: BaseException) -> bool:
    """Whether the heartbeats go on after ExtendLease raised ``exc``: only
    after a transport error (Unavailable, RateLimited), tried again at the
    next interval. A refusal (StaleAttempt: the lease is over; InvalidState:
    the policy's max_attempt_seconds is reached) or any other error will not
    pass: the heartbeats stop and the deadline stays where it is."""
    from .errors import RateLimited, Unavailable
    return isinstance(exc, (Unavailable, RateLimited))


def _deadline_after_grant(at: float, sent: float, granted: int) -> float:
    """The deadline after a heartbeat sent at ``sent`` was granted
    ``granted`` seconds: the later of the current one and sent + granted −
    margin(granted). Never earlier: the server never shortens a lease, and
    near max_attempt_seconds it grants whole seconds rounded down, which
    must not pull the deadline in."""
    return max(at, sent + granted - _lease_margin(granted))


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
    lease ends (IN_PROGRESS_ELSEWHERE), or until it is worth asking again
    about an approval (AWAITING_APPROVAL), at least 1; for BUDGET_EXCEEDED
    the seconds until the same request may fit (unless earlier operations
    fail first), or None when it never will; 0 otherwise. ``operation``: the
    journal's record (None for CONFLICT and BUDGET_EXCEEDED); for AWAITING_APPROVAL its
    ``operation_key`` and ``request_hash`` name what a person must approve. ``cause``: fn's exception when
    this execute called fn and it failed, or the PayloadMismatch of a
    CONFLICT, or the BudgetExceeded of a BUDGET_EXCEEDED; it is not stored
    in the journal. ``message``: what happened,
    for people and logs (not stored): for an exception of fn its type and
    text ("NameError: name 'PROVIDER_URL' is not defined"), when execute
    gave up at the deadline why, for a CONFLICT or a BUDGET_EXCEEDED the
    journal's explanation; "" otherwise. ``budget``: the budget that refused
    the operation (BUDGET_EXCEEDED; None otherwise): a BudgetRefusal with
    its ``name``, ``action``, ``limit``, ``used`` and ``window_seconds``."""

    kind: OutcomeKind
    replayed: bool = False
    external_id: str = ""
    result: Optional[Dict[str, Any]] = None
    error_code: str = ""
    retry_after: Optional[float] = 0.0
    needs_review: bool = False
    operation: Optional[Operation] = None
    cause: Optional[BaseException] = field(default=None, compare=False)
    message: str = field(default="", compare=False)
    budget: Optional[BudgetRefusal] = None

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
        elif k is OutcomeKind.AWAITING_APPROVAL:
            msg = ("operation awaits a person's approval; nothing was called; ask again with the same key and "
                   "payload in %gs" % outcome.retry_after)
        elif k is OutcomeKind.BUDGET_EXCEEDED:
            b = outcome.budget
            which = ("budget %r of %s: %d of %d used" % (b.name, b.action, b.used, b.limit)) if b else "a budget"
            msg = "operation exceeds %s; nothing was registered or called" % which
            msg += ("; the same request may fit in %gs" % outcome.retry_after if outcome.retry_after
                    else "; it never fits this budget")
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


# -- the provider's HTTP answers ----------------------------------------------


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


# -- classification of fn's exceptions --------------------------------------


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


# -- the journal's next step ------------------------------------------------


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
    is a CONFLICT, a BudgetExceeded a BUDGET_EXCEEDED, any other is raised. A step this SDK does not know
    (UNSPECIFIED, CLAIM, a newer number) raises Internal: never leave to
    call."""
    if isinstance(answer, BaseException):
        if isinstance(answer, PayloadMismatch):
            return Outcome(kind=OutcomeKind.CONFLICT, cause=answer, message=str(answer))
        if isinstance(answer, BudgetExceeded):
            return Outcome(kind=OutcomeKind.BUDGET_EXCEEDED, retry_after=answer.retry_after, budget=answer.refusal,
                           cause=answer, message=str(answer))
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
    if nxt == pb.NEXT_STEP_AWAIT_APPROVAL:
        return Outcome(OutcomeKind.AWAITING_APPROVAL, retry_after=float(max(answer.retry_after_seconds, 1)), **base)
    raise Internal(None, "the journal answered next step %r for operation %r, which this SDK does not act on; "
                   "nothing was called" % (next_step_name(nxt), op.operation_key))


# -- waiting for an approval ------------------------------------------------------

#: The least time, in seconds, between two Lookups of one wait for an
#: approval: a journal that answers at once (one without the long poll, or a
#: first approval of two under two_person) is not asked in a tight loop.
MIN_APPROVAL_POLL_SECONDS = 1.0
#: Outcome.message when the caller cancelled the wait for an approval.
APPROVAL_WAIT_CANCELLED = "execute stopped waiting for the approval: the caller cancelled it; nothing was called"


def _still_awaiting(out: Outcome, op: Operation) -> Outcome:
    """The AWAITING_APPROVAL outcome with the latest record."""
    return dataclasses.replace(out, operation=op, needs_review=op.needs_review)


def _awaits(step: Union[Outcome, _Call]) -> bool:
    return isinstance(step, Outcome) and step.kind is OutcomeKind.AWAITING_APPROVAL


def _check_approval_wait(approval_wait: Any) -> float:
    if isinstance(approval_wait, bool) or not isinstance(approval_wait, (int, float)) or not approval_wait >= 0:
        raise InvalidArgument(None, "must be a number of seconds >= 0 (0: do not wait)", "approval_wait")
    return float(approval_wait)


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




# -- recording an outcome, without I/O ------------------------------------------

#: A journal call a recording step needs: (Journal method name, args, kwargs).
Rpc = Tuple[str, Tuple[Any, ...], Dict[str, Any]]
#: A recording step: yields Rpcs, is sent their answers, returns its value.
Steps = Generator[Rpc, Any, Any]

#: The error_code execute records when its caller cancelled it (an asyncio
#: task's cancel(), aio.execute) while fn ran: fn may have reached the
#: provider.
CANCELLED = "cancelled"
#: The error_code of a KeyboardInterrupt or SystemExit while fn ran.
INTERRUPTED = "interrupted"
#: The error_code of an fn that returned something else than an Effect.
INVALID_EFFECT = "invalid_effect"


def _rpc(method: str, *args: Any, **kwargs: Any) -> Rpc:
    return method, args, kwargs


def _drive(steps: Steps, journal: Any) -> Any:
    """Runs recording steps with blocking calls of ``journal`` (the sync
    Journal); aio._drive is the same loop with awaited calls. An
    OpjournalError (any Exception) of a call is thrown into the steps, which
    decide what it means; a BaseException (KeyboardInterrupt) ends them."""
    try:
        call = next(steps)
        while True:
            method, args, kwargs = call
            try:
                answer = getattr(journal, method)(*args, **kwargs)
            except Exception as e:
                call = steps.throw(e)
            else:
                call = steps.send(answer)
    except StopIteration as stop:
        return stop.value


def _record_failure(key: str, attempt: int, exc: Exception) -> Steps:
    """fn raised ``exc``: MarkFailedFinal for a confirmed rejection, else
    MarkUnknown with the code the exception names; returns the Outcome
    (NotRecorded when the journal refused)."""
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
            op = yield _rpc("mark_failed_final", key, attempt, code)
        else:
            op = yield _rpc("mark_unknown", key, attempt, code)
    except OpjournalError as e:
        raise NotRecorded(key, attempt, kind, e) from e
    return Outcome(kind, error_code=code, needs_review=op.needs_review, operation=op, cause=exc, message=message)


def _record_success(key: str, attempt: int, eff: Effect) -> Steps:
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
            op = yield _rpc("_mark_succeeded", req)
        except (InvalidArgument, TooLarge) as e:
            if not req.HasField("result") or not (e.field == "result" or (e.field or "").startswith("result/")):
                raise
            result_err = e
            req.ClearField("result")
            op = yield _rpc("_mark_succeeded", req)
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
            result = (yield _rpc("lookup", key, view="full")).result
        except OpjournalError:
            result = None
    out = Outcome(OutcomeKind.SUCCEEDED, external_id=op.external_id, result=result,
                  needs_review=op.needs_review, operation=op)
    if result_err is not None:
        raise ResultNotStored(key, out, result_err) from result_err
    return out


def _record_return(key: str, attempt: int, ret: Any) -> Steps:
    """fn returned ``ret``: an Effect (or its dict, or None) is recorded as
    succeeded; anything else is recorded as unknown (invalid_effect) and
    raises TypeError, since the effect may have happened."""
    eff = _as_effect(ret)
    if eff is not None:
        return (yield from _record_success(key, attempt, eff))
    try:
        yield _rpc("mark_unknown", key, attempt, INVALID_EFFECT)
    except OpjournalError as e:
        raise NotRecorded(key, attempt, OutcomeKind.VERIFICATION_REQUIRED, e) from e
    raise TypeError("opjournal: fn of operation %r returned a %s; return an Effect(external_id, result), a dict "
                    "with the keys external_id and result, or None. The attempt was recorded as unknown "
                    "(invalid_effect), since the effect may have happened" % (key, type(ret).__name__))


#: Outcome.message when execute gave up at the deadline.
GAVE_UP_MESSAGE = ("fn was still running at the end of the lease less the safety margin; execute gave up "
                   "waiting and recorded the attempt as unknown (lease_expired)")


def _record_gave_up(key: str, attempt: int, code: str = LEASE_EXPIRED, message: str = GAVE_UP_MESSAGE) -> Steps:
    """The deadline passed before fn returned (or the caller cancelled):
    MarkUnknown(code); a StaleAttempt means the lease ran out first and the
    journal already reads the attempt as unknown. Returns the
    VERIFICATION_REQUIRED Outcome."""
    from .errors import StaleAttempt  # the one refusal that is an answer here
    try:
        op: Optional[Operation] = yield _rpc("mark_unknown", key, attempt, code)
    except StaleAttempt:
        try:
            op = yield _rpc("lookup", key)
        except OpjournalError:
            op = None
    except OpjournalError as e:
        raise NotRecorded(key, attempt, OutcomeKind.VERIFICATION_REQUIRED, e) from e
    return Outcome(OutcomeKind.VERIFICATION_REQUIRED, error_code=code,
                   needs_review=op.needs_review if op is not None else False, operation=op, message=message)


def _note_unknown(key: str, attempt: int, exc: BaseException, code: str = INTERRUPTED) -> Steps:
    """fn (or the wait for it) was interrupted by ``exc``, which the caller
    re-raises: record the attempt as unknown, best effort (a failure is
    noted on ``exc``: the attempt reads as unknown once its lease
    expires anyway)."""
    try:
        yield _rpc("mark_unknown", key, attempt, code)
    except Exception as merr:
        if hasattr(exc, "add_note"):
            exc.add_note("opjournal: could not record operation %r attempt %d as unknown: %s; it will show "
                         "as unknown once its lease expires" % (key, attempt, merr))


# -- the decorator's binding of a call ------------------------------------------

#: The parameters the journal supplies to a decorated function.
_RESERVED = ("op_key", "attempt", "deadline")


@dataclass(frozen=True)
class _Bound:
    """One call of a decorated function, bound: the operation it is, and
    the arguments to call the function with."""

    key: str
    payload: Mapping[str, Any]
    refs: Optional[Mapping[str, str]]
    parent_key: Optional[str]
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]


class _Binder:
    """The argument handling of idempotent() (sync and asyncio alike):
    checks the decorator's options once, binds each call's arguments to the
    function's parameters by name (defaults applied), and builds the key,
    payload, refs and parent key from them."""

    def __init__(self, action: str, key: Any, payload: Any, refs: Any, parent_key: Any):
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
        self.key, self.payload, self.refs, self.parent_key = key, payload, refs, parent_key

    def wrap(self, fn: Callable[..., Any], wrapper: Callable[..., Any]) -> "_Binder":
        """Returns the binder of ``fn`` (one decorator may decorate several
        functions: each gets its own), and makes ``wrapper`` look like ``fn`` to introspection (functools.wraps:
        name, docstring, module, __wrapped__), but with the signature and
        annotations callers see: without the parameters the journal supplies,
        so an agent framework that builds a tool's schema from the signature
        (OpenAI Agents' function_tool, LangChain's @tool, PydanticAI) never
        offers op_key, attempt or deadline to the model."""
        self = copy.copy(self)
        self.fn = fn
        self.sig = inspect.signature(fn)
        params = self.sig.parameters
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.passes = {r: (r in params or var_kw) for r in _RESERVED}
        functools.wraps(fn)(wrapper)
        wrapper.__signature__ = self.sig.replace(  # type: ignore[attr-defined]
            parameters=[p for p in params.values() if p.name not in _RESERVED],
            return_annotation=Outcome)
        ann = {k: v for k, v in getattr(fn, "__annotations__", {}).items() if k not in _RESERVED}
        ann["return"] = Outcome
        wrapper.__annotations__ = ann
        return self

    def bind(self, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> _Bound:
        """The operation of one call (TypeError for arguments the function
        does not take, or for one the journal supplies)."""
        fn, sig, params = self.fn, self.sig, self.sig.parameters
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
        key, payload, refs, parent_key = self.key, self.payload, self.refs, self.parent_key
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
        return _Bound(op_key, body, op_refs, op_parent, bound.args, bound.kwargs)

    def extra(self, key: str, attempt: int, deadline: Deadline) -> Dict[str, Any]:
        """The journal-supplied arguments the function declares."""
        extra: Dict[str, Any] = {}
        if self.passes["op_key"]:
            extra["op_key"] = key
        if self.passes["attempt"]:
            extra["attempt"] = attempt
        if self.passes["deadline"]:
            extra["deadline"] = deadline
        return extra
