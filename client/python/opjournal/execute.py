"""execute(): run an irreversible action through the journal, safely retryable.

The protocol:

1. Register the operation under its stable key and claim it, in one round
   trip, BEFORE anything is sent to the provider.
2. The journal decides the next step (RegisterResponse.next) and execute
   acts on it and on nothing else: a confirmed success is replayed
   (``replayed=True``, the stored result), a confirmed rejection stays
   final, a live lease elsewhere is IN_PROGRESS_ELSEWHERE, an operation
   whose outcome is unknown (or that a person must decide) is
   VERIFICATION_REQUIRED, the same key with other parameters is a
   CONFLICT, and a new key that would pass a budget of its action
   (``on_exceed: reject``) is BUDGET_EXCEEDED, with nothing registered. A
   step this SDK does not know is an error, never leave to call.
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
import dataclasses
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Optional, Tuple, Union

# The pure half (outcome types, classification, next step, lease rules,
# recording steps, the decorator's binding) lives in _outcome, shared with
# the asyncio client; its names are re-exported here, where they always were.
from ._outcome import (CANCELLED, GAVE_UP_MESSAGE, INTERRUPTED, INVALID_EFFECT, LEASE_EXPIRED,  # noqa: F401
                       MAX_ERROR_CODE, _RESERVED, Deadline, Effect, NotSucceeded, Outcome, OutcomeKind, Rejected,
                       UnknownOutcome, _accepts_deadline, _as_effect, _Binder, _Call, _chain, _check_op, _classify,
                       _code_of, _deadline_after_grant, _describe, _drive, _heartbeat_interval, _heartbeat_retries,
                       _lease_margin, _outcome_of, _sanitize_code, classify_http, log)
from ._outcome import _note_unknown as _note_unknown_steps
from ._outcome import _record_failure as _record_failure_steps
from ._outcome import _record_gave_up, _record_return
from ._outcome import _record_success as _record_success_steps
from ._outcome import (APPROVAL_WAIT_CANCELLED, MIN_APPROVAL_POLL_SECONDS, _awaits, _check_approval_wait,
                       _still_awaiting)
from .client import Journal
from .errors import BudgetExceeded, OpjournalError, PayloadMismatch, RateLimited, Unavailable
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



# -- execute ------------------------------------------------------------------



def execute(journal: Journal, key: str, action: str, payload: Mapping[str, Any],
            fn: Callable[..., Union[Effect, Mapping[str, Any], None]], *, heartbeat: bool = True,
            refs: Optional[Mapping[str, str]] = None, parent_key: Optional[str] = None,
            approval_wait: float = 0, cancel: Optional[threading.Event] = None) -> Outcome:
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

    A new key that would pass a budget of the action whose ``on_exceed`` is
    ``reject`` is refused by the journal: nothing is registered, fn is not
    called, and the outcome is BUDGET_EXCEEDED, with ``budget`` (the
    budget's name, action, limit, what is used and its window) and
    ``retry_after`` (seconds until the same request may fit, None when it
    never will). Tell the user; never split or rephrase the request to get
    around the limit. (A budget whose ``on_exceed`` is ``approval`` asks a
    person instead: AWAITING_APPROVAL, below.)

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

    When the action's policy says a person must approve this request first
    (NEXT_STEP_AWAIT_APPROVAL), execute calls nothing: it waits up to
    ``approval_wait`` seconds (0, the default: not at all) for the decision
    with Lookup's long poll (``wait_seconds``, at most a minute a call,
    never sooner than a second apart), or until ``cancel`` (a
    threading.Event) is set. Approved in time, it registers again and goes
    on as below (claim, fn once); rejected, the outcome is FAILED_FINAL
    ("approval_rejected" or "approval_timeout", replayed); otherwise it is
    AWAITING_APPROVAL (``retry_after``, and ``operation`` with the key and
    the request hash a person approves), and a later execute with the same
    key and payload asks again.

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
    wait = _check_approval_wait(approval_wait)
    wants_deadline = _accepts_deadline(fn)
    req = journal._register_request(key, action, payload, claim=True, refs=refs, parent_key=parent_key)
    step, t0 = _register(journal, req)
    if _awaits(step) and wait > 0:
        step, t0 = _await_approval(journal, req, step, wait, cancel)
    if isinstance(step, Outcome):
        return step
    return _attempt(journal, key, step, t0, fn, wants_deadline, heartbeat)


def _register(journal: Journal, req: pb.RegisterRequest) -> Tuple[Union[Outcome, _Call], float]:
    """Sends the Register (with claim) and reads the journal's decision;
    returns it and the monotonic time the lease runs from."""
    t0 = time.monotonic()  # the lease runs from (no earlier than) here
    try:
        answer: Union[pb.RegisterResponse, OpjournalError] = journal._call("Register", req)
    except (PayloadMismatch, BudgetExceeded) as e:
        answer = e
    return _outcome_of(answer), t0


def _await_approval(journal: Journal, req: pb.RegisterRequest, out: Outcome, wait: float,
                    cancel: Optional[threading.Event]) -> Tuple[Union[Outcome, _Call], float]:
    """Waits up to ``wait`` seconds (or until ``cancel`` is set) for a
    person's decision, with Lookup's long poll; calls nothing. Once the
    operation no longer awaits approval it sends ``req`` again, and the
    journal's answer decides as usual. Returns the decision (the
    AWAITING_APPROVAL outcome with the latest record when the wait ends
    first) and the time the lease runs from."""
    key = req.operation_key
    end = time.monotonic() + wait
    while True:
        if cancel is not None and cancel.is_set():
            return dataclasses.replace(out, message=APPROVAL_WAIT_CANCELLED), 0.0
        left = end - time.monotonic()
        if left <= 0:
            return out, 0.0
        asked = time.monotonic()
        try:
            op = journal._lookup_wait(key, left, cancel)
        except (Unavailable, RateLimited):
            op = None  # asked again after the pause
        if op is not None and op.status != "awaiting_approval":
            # Decided (or changed otherwise): the journal's answer to the
            # same request says what happens now.
            step, t0 = _register(journal, req)
            if not _awaits(step):
                return step, t0
            out = step
        elif op is not None:
            out = _still_awaiting(out, op)
        pause = min(MIN_APPROVAL_POLL_SECONDS - (time.monotonic() - asked), end - time.monotonic())
        if pause > 0:
            (cancel.wait if cancel is not None else time.sleep)(pause)



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
    return _drive(_record_return(key, attempt, run.ret), journal)


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
        except Exception as e:
            if not _heartbeat_retries(e):
                return  # refused (or a closed Journal): keep the deadline
        else:
            with run.cond:
                if run.state == "running":
                    run.deadline._at = _deadline_after_grant(run.deadline._at, t_send, ext.lease_seconds)
                    run.cond.notify_all()
        due = t_send + interval


def _gave_up(journal: Journal, key: str, attempt: int, run: _Run) -> Outcome:
    """The deadline passed before fn returned: record the attempt as unknown."""
    run.deadline.event.set()
    try:
        return _drive(_record_gave_up(key, attempt), journal)
    finally:
        run.settled.set()


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
    _drive(_note_unknown_steps(key, attempt, exc, INTERRUPTED), journal)


def _record_failure(journal: Journal, key: str, attempt: int, exc: Exception) -> Outcome:
    return _drive(_record_failure_steps(key, attempt, exc), journal)


def _record_success(journal: Journal, key: str, attempt: int, eff: Effect) -> Outcome:
    return _drive(_record_success_steps(key, attempt, eff), journal)


# -- the decorator --------------------------------------------------------------


def idempotent(journal: Journal, *, action: str, key: Union[str, Callable[..., str]],
               payload: Union[None, Callable[..., Mapping[str, Any]], Iterable[str]] = None,
               heartbeat: bool = True,
               refs: Union[None, Callable[..., Mapping[str, str]], Mapping[str, str]] = None,
               parent_key: Union[None, str, Callable[..., Optional[str]]] = None, approval_wait: float = 0):
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
    means none. ``approval_wait`` is execute()'s: how long a call waits for
    a person's approval when its request needs one.

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
    _check_approval_wait(approval_wait)
    binder = _Binder(action, key, payload, refs, parent_key)

    def decorate(fn):
        def wrapper(*args, **kwargs):
            call = bound.bind(args, kwargs)

            def run(k: str, attempt: int, *, deadline: Deadline):
                return fn(*call.args, **call.kwargs, **bound.extra(k, attempt, deadline))

            return execute(journal, call.key, action, call.payload, run, heartbeat=heartbeat, refs=call.refs,
                           parent_key=call.parent_key, approval_wait=approval_wait)

        bound = binder.wrap(fn, wrapper)
        wrapper.journal = journal
        wrapper.action = action
        wrapper.heartbeat = heartbeat
        return wrapper

    return decorate
