"""opjournal.aio: the asyncio client, in the style of grpc.aio and
redis.asyncio: the names and signatures of the blocking client, awaited.

    import opjournal.aio

    async with opjournal.aio.Journal("127.0.0.1:9090") as journal:
        outcome = await opjournal.aio.execute(
            journal, key, "create_payment", {"order_id": "817", "amount_minor": 490000, "currency": "RUB"},
            charge,   # async def charge(key, attempt) -> opjournal.Effect
        )

The outcome types (Outcome, OutcomeKind, Effect, Deadline, Rejected,
UnknownOutcome, NotSucceeded), the classification of fn's exceptions, the
next step the journal decides and what is recorded are the blocking
client's, from the same code (opjournal._outcome). What differs is how fn
is bounded: fn runs as an asyncio task that is CANCELLED at the end of the
lease less the safety margin (no thread is left behind), the heartbeats are
an asyncio task, and a cancellation of execute by its caller is recorded as
unknown ("cancelled") before the CancelledError goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Optional, Sequence, Set, Tuple, Union

import grpc
import grpc.aio

from ._outcome import (CANCELLED, INTERRUPTED, LEASE_EXPIRED, Deadline, Effect, NotSucceeded, Outcome, OutcomeKind,
                       Rejected, Steps, UnknownOutcome, _accepts_deadline, _as_effect, _Binder, _Call, _check_op,
                       _deadline_after_grant, _heartbeat_interval, _heartbeat_retries, _lease_margin, _note_unknown,
                       _outcome_of, _record_failure, _record_gave_up, _record_return, _record_success, classify_http)
from ._outcome import (APPROVAL_WAIT_CANCELLED, MIN_APPROVAL_POLL_SECONDS, _awaits, _check_approval_wait,
                       _still_awaiting)
from .client import (_UNSET, ClaimResult, Event, EventPage, LeaseExtension, Operation, OperationPage, PathLike,
                     Policy, Registration, _JournalBase, _lookup_slice, _tls_roots, _view_value)
from .errors import BudgetExceeded, OpjournalError, PayloadMismatch, RateLimited, Unavailable, from_rpc_error
from .v1 import journal_pb2 as pb
from .v1 import journal_pb2_grpc as pb_grpc

__all__ = [
    "Journal", "execute", "idempotent",
    # The blocking client's outcome types, the same classes, for one import.
    "Outcome", "OutcomeKind", "Effect", "Deadline", "Rejected", "UnknownOutcome", "NotSucceeded", "classify_http",
    "CANCELLED", "LEASE_EXPIRED",
]


class Journal(_JournalBase):
    """A connection to an opjournal server's gRPC API over grpc.aio: every
    call of :class:`opjournal.Journal` with the same name, arguments and
    return type, as a coroutine. The settings (``token``, ``timeout``,
    ``worker_id``, ``lease_seconds``, ``tls_ca``/``tls``, ``options``,
    ``trace_context``) are the blocking Journal's; ``channel`` is a
    grpc.aio.Channel to use instead of dialing (close() then leaves it
    open).

    The trace context is read on each call in the calling task's context
    (contextvars): OpenTelemetry's current span when ``opentelemetry`` is
    importable, or what ``trace_context`` returns.

    The channel is opened at the first call (or ``async with``), in the
    running event loop: a Journal may be made at import time (a tool
    module's decorator), but serves one event loop. Use it as ``async with
    opjournal.aio.Journal(...) as journal``, or ``await journal.close()``.
    """

    def __init__(
        self,
        target: str = "127.0.0.1:9090",
        *,
        token: Optional[str] = None,
        timeout: Optional[float] = 10.0,
        worker_id: Optional[str] = None,
        lease_seconds: int = 0,
        tls_ca: Union[None, PathLike, bytes] = None,
        tls: bool = False,
        channel: Optional[grpc.aio.Channel] = None,
        options: Sequence[Tuple[str, Any]] = (),
        trace_context: Optional[Callable[[], Optional[Mapping[str, str]]]] = None,
    ):
        self._configure(target, token, timeout, worker_id, lease_seconds, trace_context)
        self._owns_channel = channel is None
        # Read now, so a missing CA file fails here and not at the first call.
        self._roots = _tls_roots(tls_ca) if (tls_ca is not None or tls) else None
        self._tls = tls_ca is not None or tls
        self._options = list(options)
        self._channel: Optional[grpc.aio.Channel] = channel
        self._stub_: Optional[pb_grpc.JournalServiceStub] = None if channel is None else \
            pb_grpc.JournalServiceStub(channel)
        self._closed = False

    def _open(self) -> pb_grpc.JournalServiceStub:
        if self._closed:
            raise RuntimeError("opjournal.aio: the Journal is closed")
        if self._stub_ is None:
            if self._tls:
                creds = grpc.ssl_channel_credentials(root_certificates=self._roots)
                self._channel = grpc.aio.secure_channel(self.target, creds, options=self._options)
            else:
                self._channel = grpc.aio.insecure_channel(self.target, options=self._options)
            self._stub_ = pb_grpc.JournalServiceStub(self._channel)
        return self._stub_

    # -- lifecycle ---------------------------------------------------------

    async def close(self) -> None:
        """Closes the channel this Journal opened (calls in flight are
        cancelled)."""
        self._closed = True
        if self._owns_channel and self._channel is not None:
            await self._channel.close()

    async def __aenter__(self) -> "Journal":
        self._open()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def stub(self) -> pb_grpc.JournalServiceStub:
        """The generated grpc.aio stub, for RPCs this class does not wrap
        (Resolve, Escalate, ...); pass ``metadata=journal.metadata``."""
        return self._open()

    async def _call(self, method: str, request, timeout: Optional[float] = _UNSET):
        """Every RPC goes through here. ``timeout`` overrides self.timeout
        for this call. A cancellation of the calling task cancels the RPC."""
        if timeout is _UNSET:
            timeout = self.timeout
        md = self._metadata + self._trace_metadata()
        stub = self._open()
        try:
            return await getattr(stub, method)(request, timeout=timeout, metadata=md or None)
        except grpc.RpcError as e:  # grpc.aio.AioRpcError
            raise from_rpc_error(e) from e

    # -- the agent's calls -------------------------------------------------

    async def register(self, key: str, action: str, payload: Mapping[str, Any], *, claim: bool = False,
                       worker_id: Optional[str] = None, lease_seconds: Optional[int] = None,
                       refs: Optional[Mapping[str, str]] = None, parent_key: Optional[str] = None,
                       view: Optional[str] = "basic") -> Registration:
        """Registers an operation before its external call (and with
        claim=True claims it); see opjournal.Journal.register."""
        return self._registration(await self._call("Register", self._register_request(
            key, action, payload, claim=claim, worker_id=worker_id, lease_seconds=lease_seconds,
            refs=refs, parent_key=parent_key, view=view)))

    async def claim(self, key: str, *, worker_id: Optional[str] = None, lease_seconds: Optional[int] = None,
                    view: Optional[str] = "basic") -> ClaimResult:
        """Asks for a lease; see opjournal.Journal.claim."""
        return self._claim_result(await self._call("Claim", self._claim_request(key, worker_id, lease_seconds, view)))

    async def extend_lease(self, key: str, attempt: int, lease_seconds: int = 0, *,
                           view: Optional[str] = "basic") -> LeaseExtension:
        """A heartbeat; see opjournal.Journal.extend_lease. execute() sends
        these itself while fn runs."""
        return await self._extend_lease(key, attempt, lease_seconds, view=view)

    async def _extend_lease(self, key: str, attempt: int, lease_seconds: int = 0,
                            timeout: Optional[float] = _UNSET, view: Optional[str] = "basic") -> LeaseExtension:
        return self._lease_extension(await self._call(
            "ExtendLease", self._extend_request(key, attempt, lease_seconds, view), timeout=timeout))

    async def mark_succeeded(self, key: str, attempt: int, external_id: str = "",
                             result: Optional[Mapping[str, Any]] = None, *, actor: str = "",
                             view: Optional[str] = "basic") -> Operation:
        """Records a confirmed effect; see opjournal.Journal.mark_succeeded."""
        return await self._mark_succeeded(self._mark_succeeded_request(key, attempt, external_id, result, actor,
                                                                       view))

    async def _mark_succeeded(self, req: pb.MarkSucceededRequest) -> Operation:
        return Operation.from_pb((await self._call("MarkSucceeded", req)).operation)

    async def mark_unknown(self, key: str, attempt: int, error_code: str, *,
                           view: Optional[str] = "basic") -> Operation:
        """Records an attempt without a definite answer; see
        opjournal.Journal.mark_unknown."""
        req = pb.MarkUnknownRequest(operation_key=key, attempt=attempt, error_code=error_code, view=_view_value(view))
        return Operation.from_pb((await self._call("MarkUnknown", req)).operation)

    async def mark_failed_final(self, key: str, attempt: int, error_code: str, *,
                                view: Optional[str] = "basic") -> Operation:
        """Records a confirmed rejection; see opjournal.Journal.mark_failed_final."""
        req = pb.MarkFailedFinalRequest(operation_key=key, attempt=attempt, error_code=error_code,
                                        view=_view_value(view))
        return Operation.from_pb((await self._call("MarkFailedFinal", req)).operation)

    async def lookup(self, key: str, *, view: Optional[str] = None, wait_seconds: int = 0) -> Operation:
        """Returns the operation, or raises NotFound; with ``wait_seconds`` a
        long poll while it awaits approval; see opjournal.Journal.lookup."""
        req = self._lookup_request(key, view, wait_seconds)
        timeout = self.timeout if self.timeout is None else self.timeout + req.wait_seconds
        return Operation.from_pb((await self._call("Lookup", req, timeout=timeout)).operation)

    async def _lookup_wait(self, key: str, left: float) -> Optional[Operation]:
        """One long poll of execute's wait for an approval, at most ``left``
        seconds: the record, or None when ``left`` passed first. A
        cancellation of the calling task cancels the call."""
        req = self._lookup_request(key, "basic", _lookup_slice(left))
        md = self._metadata + self._trace_metadata()
        try:
            resp = await self._open().Lookup(req, timeout=left, metadata=md or None)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return None  # the bound passed while the journal held the answer
            raise from_rpc_error(e) from e
        return Operation.from_pb(resp.operation)

    async def list_operations(self, *, statuses: Iterable[str] = (), needs_review: Optional[bool] = None,
                              action_type: str = "", due_for_check: bool = False, page_size: int = 0,
                              page_token: str = "", view: Optional[str] = None,
                              refs: Optional[Mapping[str, str]] = None,
                              parent_key: Optional[str] = None) -> OperationPage:
        """One page of operations in key order; see opjournal.Journal.list_operations."""
        req = self._list_operations_request(statuses, needs_review, action_type, due_for_check, page_size,
                                            page_token, view, refs, parent_key)
        return self._operation_page(await self._call("ListOperations", req))

    async def list_events(self, key: str, page_size: int = 0, page_token: str = "") -> EventPage:
        """One page of the operation's history, oldest first; see
        opjournal.Journal.list_events."""
        resp = await self._call("ListEvents", pb.ListEventsRequest(operation_key=key, page_size=int(page_size),
                                                                   page_token=page_token))
        return self._event_page(resp)

    async def iter_events(self, key: str, page_size: int = 0) -> AsyncIterator[Event]:
        """The operation's whole history, oldest first, fetched page by page:
        ``async for event in journal.iter_events(key)``."""
        token = ""
        while True:
            page = await self.list_events(key, page_size, token)
            for event in page.events:
                yield event
            token = page.next_page_token
            if not token:
                return

    # -- the operator's calls ----------------------------------------------

    async def acknowledge(self, key: str, reason: str, actor: str = "") -> Operation:
        """An operator's decision on a terminal operation under review; see
        opjournal.Journal.acknowledge."""
        req = pb.AcknowledgeRequest(operation_key=key, reason=reason, actor=actor)
        return Operation.from_pb((await self._call("Acknowledge", req)).operation)

    async def get_policy(self) -> Policy:
        """The policy the server enforces; see opjournal.Journal.get_policy."""
        resp = await self._call("GetPolicy", pb.GetPolicyRequest())
        return Policy(fingerprint=resp.fingerprint, source=resp.source)


# -- execute ------------------------------------------------------------------

#: Tasks that record an effect fn returned after execute stopped waiting
#: for it (it ignored the cancellation); kept here so they are not
#: collected before they end.
_late_tasks: Set["asyncio.Task[Any]"] = set()

#: Outcome.message... and the note on the CancelledError, when the caller
#: cancelled execute while fn ran.
CANCELLED_MESSAGE = ("execute was cancelled by its caller while fn ran; the attempt is recorded as unknown "
                     "(cancelled), since fn may have reached the provider")


async def _drive(steps: Steps, journal: Journal) -> Any:
    """Runs shared recording steps (opjournal._outcome) with awaited calls
    of ``journal``: _outcome._drive's loop, awaiting each call."""
    try:
        call = next(steps)
        while True:
            method, args, kwargs = call
            try:
                answer = await getattr(journal, method)(*args, **kwargs)
            except Exception as e:  # an OpjournalError; never a CancelledError
                call = steps.throw(e)
            else:
                call = steps.send(answer)
    except StopIteration as stop:
        return stop.value


async def _to_the_end(aw: Awaitable[Any]) -> Any:
    """Awaits ``aw`` (a record the journal must get) shielded from the
    caller's cancellation: a cancel() while it runs waits for the record to
    be written (bounded by the Journal's timeout), then the CancelledError
    goes on. Only a cancellation of the record's own task (the event loop
    shutting down) ends it sooner."""
    task = asyncio.ensure_future(aw)
    cancelled: Optional[BaseException] = None
    while not task.done():
        try:
            # Unlike wait_for, wait never cancels the task it waits for.
            await asyncio.wait((task,))
        except asyncio.CancelledError as e:
            cancelled = e
    if cancelled is not None:
        err = None if task.cancelled() else task.exception()
        if err is not None and hasattr(cancelled, "add_note"):
            cancelled.add_note("opjournal: %s" % (err,))
        raise cancelled
    return task.result()


async def execute(journal: Journal, key: str, action: str, payload: Mapping[str, Any],
                  fn: Callable[..., Awaitable[Union[Effect, Mapping[str, Any], None]]], *, heartbeat: bool = True,
                  refs: Optional[Mapping[str, str]] = None, parent_key: Optional[str] = None,
                  approval_wait: float = 0, cancel: Optional[asyncio.Event] = None) -> Outcome:
    """opjournal.execute for asyncio: runs ``await fn(key, attempt)`` at most
    once per attempt the journal grants, and never again once the outcome
    is recorded. The arguments, the Outcome, the exceptions and the next-step
    rule are those of :func:`opjournal.execute` (from the same code):
    register and claim in one round trip, fn only on
    NEXT_STEP_CALL_PROVIDER, a returned Effect is MarkSucceeded, a raised
    Rejected MarkFailedFinal, anything else MarkUnknown.

    ``fn`` is an async function ``fn(key, attempt)`` (with ``deadline=`` if
    it declares it, as for execute). A plain function is accepted too, but
    it runs on the event loop's thread and cannot be cancelled.

    The lease rule, by cancellation: fn runs as its own asyncio task (in a
    copy of the caller's contextvars) and may run at most lease − margin
    (the blocking client's margin: a tenth of the lease the journal granted,
    within LEASE_MARGIN_MIN_SECONDS..LEASE_MARGIN_MAX_SECONDS, measured from
    just before the claim was sent). With ``heartbeat=True`` a heartbeat
    task calls ExtendLease every third of the lease and moves the deadline
    on by each grant; it is cancelled when fn ends. When the deadline
    passes first, fn's task is cancelled (a CancelledError at its current
    await), the attempt is recorded as unknown ("lease_expired") and the
    Outcome is VERIFICATION_REQUIRED: a retry does not call fn until the
    reconciler or a person settles it. An Effect fn still returns (having
    caught the CancelledError) is recorded afterwards, as by execute.

    Cancelled by its caller while fn runs (``task.cancel()``, an outer
    ``asyncio.timeout``), execute cancels fn's task, records the attempt as
    unknown ("cancelled"), shielded from the cancellation so the record is
    written, and re-raises the CancelledError: never a silent retry. (If fn
    had already returned an Effect, that is recorded instead.) Cancelled
    during the Register call, nothing has run: an attempt claimed then reads
    as unknown once its lease expires.

    ``approval_wait`` is that of :func:`opjournal.execute`: how many seconds
    to wait, with Lookup's long poll, for a person's decision when the
    request needs an approval (0: do not wait; AWAITING_APPROVAL at once).
    A cancellation during that wait ends it at once (the long poll in
    flight too) with the CancelledError; nothing was called. ``cancel`` (an
    asyncio.Event) set during the wait ends it at once too, with the
    AWAITING_APPROVAL outcome, as in the blocking client.
    """
    _check_op(key, action, payload)
    if not callable(fn):
        raise TypeError("opjournal: execute %r: fn is not callable" % key)
    wait = _check_approval_wait(approval_wait)
    wants_deadline = _accepts_deadline(fn)
    req = journal._register_request(key, action, payload, claim=True, refs=refs, parent_key=parent_key)
    step, t0 = await _register(journal, req)
    if _awaits(step) and wait > 0:
        step, t0 = await _await_approval(journal, req, step, wait, cancel)
    if isinstance(step, Outcome):
        return step
    return await _attempt(journal, key, step, t0, fn, wants_deadline, heartbeat)


async def _register(journal: Journal, req: pb.RegisterRequest) -> Tuple[Union[Outcome, _Call], float]:
    """The blocking client's _register, awaited."""
    t0 = time.monotonic()  # the lease runs from (no earlier than) here
    try:
        answer: Union[pb.RegisterResponse, OpjournalError] = await journal._call("Register", req)
    except (PayloadMismatch, BudgetExceeded) as e:
        answer = e
    return _outcome_of(answer), t0


async def _await_approval(journal: Journal, req: pb.RegisterRequest, out: Outcome, wait: float,
                          cancel: Optional[asyncio.Event]) -> Tuple[Union[Outcome, _Call], float]:
    """The blocking client's _await_approval, awaited (a task.cancel() of
    the caller ends it with the CancelledError, ``cancel`` with the
    outcome)."""
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
            op = await _until_cancel(journal._lookup_wait(key, left), cancel)
        except (Unavailable, RateLimited):
            op = None  # asked again after the pause
        if op is not None and op.status != "awaiting_approval":
            step, t0 = await _register(journal, req)
            if not _awaits(step):
                return step, t0
            out = step
        elif op is not None:
            out = _still_awaiting(out, op)
        pause = min(MIN_APPROVAL_POLL_SECONDS - (time.monotonic() - asked), end - time.monotonic())
        if pause > 0:
            await _until_cancel(asyncio.sleep(pause), cancel)


async def _until_cancel(aw: Awaitable[Any], cancel: Optional[asyncio.Event]) -> Any:
    """Awaits ``aw``, or stops it when ``cancel`` is set first (then None)."""
    if cancel is None:
        return await aw
    work = asyncio.ensure_future(aw)
    stop = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait((work, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not work.done():
            work.cancel()  # it ends at its next step; nobody waits for it
    return work.result() if work.done() and not work.cancelled() else None


async def _call_fn(fn: Callable[..., Any], key: str, attempt: int, kwargs: Mapping[str, Any]) -> Any:
    ret = fn(key, attempt, **kwargs)
    if inspect.isawaitable(ret):
        ret = await ret
    return ret


async def _attempt(journal: Journal, key: str, call: _Call, t0: float, fn, wants_deadline: bool,
                   heartbeat: bool) -> Outcome:
    attempt, lease = call.attempt, call.lease_seconds
    dl = Deadline(t0 + lease - _lease_margin(lease))
    kwargs = {"deadline": dl} if wants_deadline else {}
    # Tasks copy the current context: fn and the heartbeats see the caller's
    # contextvars, so every journal call carries its trace context.
    work = asyncio.ensure_future(_call_fn(fn, key, attempt, kwargs))
    beat = asyncio.ensure_future(_heartbeat(journal, key, attempt, lease, t0, dl)) if heartbeat else None
    try:
        while not work.done():
            left = dl.at - time.monotonic()
            if left <= 0:
                break
            # Wakes when fn ends, or at the deadline as it stands (a
            # heartbeat may have moved it on: then the loop waits again).
            await asyncio.wait((work,), timeout=left)
    except asyncio.CancelledError as e:  # the caller cancelled execute
        if beat is not None:
            beat.cancel()
        await _cancelled(journal, key, attempt, dl, work, e)
        raise
    finally:
        if beat is not None:
            beat.cancel()
    if not work.done():
        # The deadline passed: cancel fn at its current await, then record.
        dl.event.set()
        work.cancel()
        try:
            return await _to_the_end(_drive(_record_gave_up(key, attempt), journal))
        finally:
            _record_late(journal, key, attempt, work)
    return await _to_the_end(_settle(journal, key, attempt, work))


async def _settle(journal: Journal, key: str, attempt: int, work: "asyncio.Future[Any]") -> Outcome:
    """Records how fn's task ended (before the deadline)."""
    if work.cancelled():
        # fn ended in a CancelledError of its own (something cancelled it, or
        # it raised one): the effect may have happened. As for a
        # KeyboardInterrupt in the blocking client: recorded, then re-raised.
        err = asyncio.CancelledError()
        await _drive(_note_unknown(key, attempt, err, CANCELLED), journal)
        raise err
    exc = work.exception()
    if isinstance(exc, Exception):
        return await _drive(_record_failure(key, attempt, exc), journal)
    if exc is not None:  # KeyboardInterrupt, SystemExit
        await _drive(_note_unknown(key, attempt, exc, INTERRUPTED), journal)
        raise exc
    return await _drive(_record_return(key, attempt, work.result()), journal)


async def _cancelled(journal: Journal, key: str, attempt: int, dl: Deadline, work: "asyncio.Future[Any]",
                     err: BaseException) -> None:
    """The caller cancelled execute while fn ran: record what is known,
    shielded from the cancellation; the caller re-raises ``err``."""
    dl.event.set()
    if work.done() and not work.cancelled() and work.exception() is None and _as_effect(work.result()) is not None:
        # fn returned an effect as the cancellation came: it is a fact.
        try:
            await _to_the_end(_drive(_record_success(key, attempt, _as_effect(work.result())), journal))
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            pass  # fall through: at least unknown
    work.cancel()
    if hasattr(err, "add_note"):
        err.add_note("opjournal: operation %r attempt %d: %s" % (key, attempt, CANCELLED_MESSAGE))
    await _to_the_end(_drive(_note_unknown(key, attempt, err, CANCELLED), journal))
    _record_late(journal, key, attempt, work)


def _record_late(journal: Journal, key: str, attempt: int, work: "asyncio.Future[Any]") -> None:
    """After execute recorded an abandoned attempt as unknown: if fn's task
    still ends with an Effect (it caught the CancelledError), record it (the
    journal accepts a confirmed effect from a stale attempt). Best effort."""
    async def late() -> None:
        try:
            ret = await work
        except BaseException:  # cancelled as asked, or failed: nothing to add
            return
        eff = _as_effect(ret)
        if eff is not None:
            try:
                await _drive(_record_success(key, attempt, eff), journal)
            except Exception:
                pass

    if work.done() and (work.cancelled() or work.exception() is not None):
        return
    task = asyncio.ensure_future(late())
    _late_tasks.add(task)
    task.add_done_callback(_late_tasks.discard)


async def _heartbeat(journal: Journal, key: str, attempt: int, lease: int, t0: float, dl: Deadline) -> None:
    """Extends the lease every _heartbeat_interval(lease) until cancelled,
    moving ``dl`` on by each grant (the blocking client's rules)."""
    interval = _heartbeat_interval(lease)
    due = t0 + interval
    while True:
        await asyncio.sleep(max(due - time.monotonic(), 0.0))
        t_send = time.monotonic()
        left = dl.at - t_send
        if left <= 0 or dl.event.is_set():
            return
        timeout = left if journal.timeout is None else min(journal.timeout, left)
        try:
            ext = await journal._extend_lease(key, attempt, 0, timeout=timeout)
        except Exception as e:
            if not _heartbeat_retries(e):
                return  # refused (or a closed Journal): keep the deadline
        else:
            dl._at = _deadline_after_grant(dl._at, t_send, ext.lease_seconds)
        due = t_send + interval


# -- the decorator --------------------------------------------------------------


def idempotent(journal: Journal, *, action: str, key: Union[str, Callable[..., str]],
               payload: Union[None, Callable[..., Mapping[str, Any]], Iterable[str]] = None,
               heartbeat: bool = True,
               refs: Union[None, Callable[..., Mapping[str, str]], Mapping[str, str]] = None,
               parent_key: Union[None, str, Callable[..., Optional[str]]] = None, approval_wait: float = 0):
    """opjournal.idempotent for asyncio: makes an async agent tool function
    safe to retry; each ``await`` of it runs through :func:`execute` and
    returns its Outcome. ``key``, ``payload``, ``refs``, ``parent_key`` and
    ``heartbeat`` (and ``approval_wait``) are those of :func:`opjournal.idempotent`, and so is the
    function: it calls the provider, receives ``op_key``, ``attempt`` and
    ``deadline`` if it declares them, returns an Effect (or a dict, or
    None) and raises Rejected or anything else.

    The wrapper is an ``async def`` with the function's name, docstring and
    signature less op_key, attempt and deadline (functools.wraps, and a
    ``__signature__`` without them): agent frameworks that take plain async
    functions as tools (OpenAI Agents' function_tool, LangChain's @tool,
    PydanticAI) build the tool's schema from what the model may pass::

        @opjournal.aio.idempotent(journal, action="create_payment",
                                  key=lambda order_id, **_: f"payment:{order_id}:intent-01")
        async def create_payment(order_id: str, amount_minor: int, currency: str = "RUB", *, op_key: str):
            ...  # await the provider, with op_key as Idempotency-Key
            return Effect(external_id=p["id"], result={"payment_id": p["id"]})

        outcome = await create_payment("817", 490000)   # an Outcome; never a second charge
    """
    _check_approval_wait(approval_wait)
    binder = _Binder(action, key, payload, refs, parent_key)

    def decorate(fn):
        async def wrapper(*args, **kwargs):
            call = bound.bind(args, kwargs)

            async def run(k: str, attempt: int, *, deadline: Deadline):
                ret = fn(*call.args, **call.kwargs, **bound.extra(k, attempt, deadline))
                if inspect.isawaitable(ret):
                    ret = await ret
                return ret

            return await execute(journal, call.key, action, call.payload, run, heartbeat=heartbeat,
                                 refs=call.refs, parent_key=call.parent_key, approval_wait=approval_wait)

        bound = binder.wrap(fn, wrapper)
        wrapper.journal = journal
        wrapper.action = action
        wrapper.heartbeat = heartbeat
        return wrapper

    return decorate
