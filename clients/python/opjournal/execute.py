"""execute(): run an irreversible action through the journal, safely retryable.

The same protocol as the Go SDK's client.Execute:

1. Register the operation under its stable key and claim it, in one round
   trip, BEFORE anything is sent to the provider.
2. If the journal already knows the answer, return it without calling fn: a
   confirmed success is replayed (``replayed=True``, the stored result), a
   confirmed rejection stays final, the same key with other parameters is a
   CONFLICT, a live lease elsewhere is IN_PROGRESS_ELSEWHERE, and an
   operation whose outcome is unknown is VERIFICATION_REQUIRED: the
   reconciler (or a person) must find out what happened first.
3. Otherwise call ``fn(key, attempt)``. fn passes the key on to the provider
   (for example as an ``Idempotency-Key`` header).
4. Classify fn's outcome and record it: a returned Effect is MarkSucceeded;
   only a raised :class:`Rejected` (the provider confirmed that nothing
   happened) is MarkFailedFinal; every other exception (a timeout, a dropped
   connection, a 5xx, a bug) is MarkUnknown, because the effect may have
   happened. A KeyboardInterrupt/SystemExit is recorded as unknown
   ("interrupted") and re-raised.

If the journal cannot record the outcome, execute raises
:class:`~opjournal.errors.NotRecorded` and never reports a success the
journal has not stored; the operation shows as unknown once its lease
expires, so it is verified rather than retried blindly.
"""

from __future__ import annotations

import enum
import functools
import http.client
import inspect
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

from . import _convert
from .client import Journal, Operation
from .errors import (InvalidArgument, NotRecorded, OpjournalError, PayloadMismatch, ResultNotStored,
                     TooLarge)
from .v1 import journal_pb2 as pb

__all__ = [
    "OutcomeKind",
    "Outcome",
    "Effect",
    "Rejected",
    "UnknownOutcome",
    "NotSucceeded",
    "execute",
    "classify_http",
    "urlopen",
    "idempotent",
]

#: The journal's limit on error_code, in bytes of UTF-8.
MAX_ERROR_CODE = 100


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


@dataclass(frozen=True)
class Outcome:
    """The outcome of execute.

    ``replayed``: the answer is the journal's stored terminal state and fn
    was not called by this execute. ``external_id``/``result``: the stored
    effect (SUCCEEDED; after a duplicate effect, the first one's, with
    ``needs_review`` set). ``error_code``: the provider's rejection
    (FAILED_FINAL) or what was last observed ("timeout", "http_503") for
    VERIFICATION_REQUIRED. ``retry_after``: seconds until the other worker's
    lease ends (IN_PROGRESS_ELSEWHERE, at least 1). ``operation``: the
    journal's record (None for CONFLICT). ``cause``: fn's exception when
    this execute called fn and it failed, or the PayloadMismatch of a
    CONFLICT; it is not stored in the journal."""

    kind: OutcomeKind
    replayed: bool = False
    external_id: str = ""
    result: Optional[Dict[str, Any]] = None
    error_code: str = ""
    retry_after: float = 0.0
    needs_review: bool = False
    operation: Optional[Operation] = None
    cause: Optional[BaseException] = field(default=None, compare=False)

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
        if outcome.cause is not None:
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
            *, context: Optional[ssl.SSLContext] = None, max_error_body: int = 65536):
    """urllib.request.urlopen for fn: returns the response of a 2xx answer;
    a non-2xx answer raises what classify_http says (Rejected for a definite
    4xx, UnknownOutcome otherwise) with ``status`` and ``body`` (its first
    ``max_error_body`` bytes), chained from the HTTPError. Timeouts and
    connection errors propagate unchanged: execute records them as unknown.
    ``timeout`` defaults to 10 s (never block a lease forever)."""
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
            fn: Callable[[str, int], Union[Effect, Mapping[str, Any], None]]) -> Outcome:
    """Runs fn at most once per attempt the journal grants, and never again
    once the outcome is recorded.

    ``key`` names the business intent ("payment:order-817:intent-01"): made
    by code, never by the model, the same for every retry. ``action`` is an
    action of the server's policy. ``payload`` is the request parameters (a
    JSON object; money as integers in minor units): the same key with
    another payload is a CONFLICT.

    ``fn(key, attempt)`` calls the provider, passing the key on (e.g. as
    Idempotency-Key); ``attempt`` is the journal's fencing token (1 first).
    It returns an Effect(external_id, result) (or a dict with those keys, or
    None for an effect without id or result) when the provider confirmed the
    effect, raises Rejected(code) when the provider confirmed that nothing
    happened, and lets anything else propagate: execute records it as
    unknown ("timeout", "connection_error", "http_503", "error").

    Returns the Outcome. Raises InvalidArgument for an invalid key, action or
    payload (before any call), an OpjournalError when the journal is
    unreachable or refuses the request (UnknownAction, InvalidArgument,
    Unauthenticated, ...), NotRecorded when fn ran but its outcome could not
    be recorded, ResultNotStored when the effect was recorded as succeeded
    but its result was refused (``.outcome`` holds the outcome), and
    TypeError (after recording the attempt as unknown) when fn returned
    something else than the above. A KeyboardInterrupt or SystemExit in fn
    is recorded as unknown ("interrupted") and re-raised.
    """
    _check_op(key, action, payload)
    if not callable(fn):
        raise TypeError("opjournal: execute %r: fn is not callable" % key)
    try:
        reg = journal.register(key, action, payload, claim=True)
    except PayloadMismatch as e:
        return Outcome(kind=OutcomeKind.CONFLICT, cause=e)
    if not reg.claimed:
        return _journal_answer(reg.operation, reg.retry_after_seconds)
    return _attempt(journal, key, reg.attempt, fn)


def _journal_answer(op: Operation, retry_after_seconds: int) -> Outcome:
    """The outcome of a lost claim: the journal's state decides."""
    base = dict(operation=op, needs_review=op.needs_review)
    if op.status == "succeeded":
        return Outcome(OutcomeKind.SUCCEEDED, replayed=True, external_id=op.external_id, result=op.result, **base)
    if op.status == "failed_final":
        return Outcome(OutcomeKind.FAILED_FINAL, replayed=True, error_code=op.error_code, **base)
    if op.status == "in_progress":
        return Outcome(OutcomeKind.IN_PROGRESS_ELSEWHERE, retry_after=float(max(retry_after_seconds, 1)), **base)
    if op.status == "pending":
        if op.needs_review:  # a person holds it
            return Outcome(OutcomeKind.VERIFICATION_REQUIRED, error_code=op.error_code, **base)
        # It changed hands between our claim and our read: ask again.
        return Outcome(OutcomeKind.IN_PROGRESS_ELSEWHERE, retry_after=1.0, **base)
    # unknown, including an expired lease
    return Outcome(OutcomeKind.VERIFICATION_REQUIRED, error_code=op.error_code, **base)


def _attempt(journal: Journal, key: str, attempt: int, fn) -> Outcome:
    try:
        ret = fn(key, attempt)
    except Exception as exc:
        return _record_failure(journal, key, attempt, exc)
    except BaseException as exc:
        # KeyboardInterrupt, SystemExit, ...: the effect may have happened.
        # Record it and let the interruption go on.
        try:
            journal.mark_unknown(key, attempt, "interrupted")
        except Exception as merr:
            if hasattr(exc, "add_note"):
                exc.add_note("opjournal: could not record operation %r attempt %d as unknown: %s; it will show "
                             "as unknown once its lease expires" % (key, attempt, merr))
        raise
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


def _as_effect(ret: Any) -> Optional[Effect]:
    if isinstance(ret, Effect):
        return ret
    if ret is None:
        return Effect()
    if isinstance(ret, Mapping) and set(ret) <= {"external_id", "result"}:
        return Effect(ret.get("external_id") or "", ret.get("result"))
    return None


def _record_failure(journal: Journal, key: str, attempt: int, exc: Exception) -> Outcome:
    final, code = _classify(exc)
    kind = OutcomeKind.FAILED_FINAL if final else OutcomeKind.VERIFICATION_REQUIRED
    try:
        if final:
            op = journal.mark_failed_final(key, attempt, code)
        else:
            op = journal.mark_unknown(key, attempt, code)
    except OpjournalError as e:
        raise NotRecorded(key, attempt, kind, e) from e
    return Outcome(kind, error_code=code, needs_review=op.needs_review, operation=op, cause=exc)


def _record_success(journal: Journal, key: str, attempt: int, eff: Effect) -> Outcome:
    """Records a confirmed effect. A result the journal cannot store does not
    lose the effect: it is recorded without the result, then
    ResultNotStored says so."""
    external_id = "" if eff.external_id is None else str(eff.external_id)
    req = pb.MarkSucceededRequest(operation_key=key, attempt=attempt, external_id=external_id)
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
    out = Outcome(OutcomeKind.SUCCEEDED, external_id=op.external_id, result=op.result,
                  needs_review=op.needs_review, operation=op)
    if result_err is not None:
        raise ResultNotStored(key, out, result_err) from result_err
    return out


# -- the decorator --------------------------------------------------------------

_RESERVED = ("op_key", "attempt")


def idempotent(journal: Journal, *, action: str, key: Union[str, Callable[..., str]],
               payload: Union[None, Callable[..., Mapping[str, Any]], Iterable[str]] = None):
    """Makes an agent tool function safe to retry: each call runs through
    execute() and returns its Outcome.

    ``key`` builds the operation key from the call's arguments, bound to the
    function's parameters by name (defaults applied): a callable taking them
    as keywords (``lambda order_id, **_: f"payment:{order_id}:intent-01"``)
    or a str.format template (``"payment:{order_id}:intent-01"``).
    ``payload`` is, by default, all those arguments as a dict; or a callable
    taking them as keywords and returning the payload; or a list of the
    parameter names to include.

    The function calls the provider. If it declares a parameter ``op_key``
    and/or ``attempt`` (or ``**kwargs``), it receives the operation key (pass
    it on as Idempotency-Key) and the attempt number; callers never pass
    them, and they are not part of the key or payload. It returns an Effect
    (or a dict with external_id/result, or None) and raises Rejected or
    anything else, as for execute::

        @idempotent(journal, action="create_payment",
                    key=lambda order_id, **_: f"payment:{order_id}:intent-01")
        def create_payment(order_id, amount_minor, currency="RUB", *, op_key, attempt):
            ...
            return Effect(external_id=p["id"], result={"payment_id": p["id"]})

        outcome = create_payment("817", 490000)   # an Outcome; never a second charge
    """
    if not action:
        raise ValueError("idempotent: action is required")
    if not (callable(key) or isinstance(key, str)):
        raise TypeError("idempotent: key must be a callable or a str.format template")
    if payload is not None and not callable(payload):
        payload = tuple(payload)

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
            call_args, call_kwargs = bound.args, bound.kwargs

            def run(k: str, attempt: int):
                extra = {}
                if passes["op_key"]:
                    extra["op_key"] = k
                if passes["attempt"]:
                    extra["attempt"] = attempt
                return fn(*call_args, **call_kwargs, **extra)

            return execute(journal, op_key, action, body, run)

        wrapper.journal = journal
        wrapper.action = action
        return wrapper

    return decorate
