"""Journal: a thin, typed client of the JournalService over gRPC."""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, Sequence, Tuple, Union

import grpc

from . import _convert
from .errors import InvalidArgument, from_rpc_error
from .v1 import journal_pb2 as pb
from .v1 import journal_pb2_grpc as pb_grpc

__all__ = [
    "Journal", "Operation", "Approval", "ApprovalDecision", "Registration", "ClaimResult", "LeaseExtension", "Event", "EventPage",
    "OperationPage", "Policy", "default_worker_id",
]

#: Operation.status values.
STATUSES = ("pending", "in_progress", "unknown", "succeeded", "failed_final", "awaiting_approval")

#: Registration.next / ClaimResult.next values (the journal's NextStep).
NEXT_STEPS = ("call_provider", "replay", "wait", "verification_required", "failed_final", "claim", "await_approval")

#: The ``view=`` values of lookup(), list_operations() and the agent's calls
#: (register, claim, extend_lease, mark_*): "basic" leaves the payload out
#: (and the result, but for the stored result of register and claim, which a
#: replay returns), "full" is every field, None the method's default.
VIEWS = {None: pb.OPERATION_VIEW_UNSPECIFIED, "": pb.OPERATION_VIEW_UNSPECIFIED,
         "basic": pb.OPERATION_VIEW_BASIC, "full": pb.OPERATION_VIEW_FULL}

_UNSET: Any = object()

#: The longest long poll Lookup takes (wait_seconds <= 60).
MAX_LOOKUP_WAIT_SECONDS = 60


def _lookup_slice(left: float) -> int:
    """The wait_seconds of one long poll with ``left`` seconds to go: whole
    seconds, rounded up (the call's own timeout ends it at the bound), at
    most MAX_LOOKUP_WAIT_SECONDS."""
    return max(1, min(MAX_LOOKUP_WAIT_SECONDS, math.ceil(left)))


@dataclass(frozen=True)
class ApprovalDecision:
    """One person's approval: the authenticated ``principal``, when
    (``at``, database clock) and the ``reason`` they gave."""

    principal: str
    at: Optional[datetime]
    reason: str


@dataclass(frozen=True)
class Approval:
    """What the action's policy asked of an operation at registration: a
    person's approval of this exact request (its ``request_hash``).
    ``approvers`` are the roles that may decide; with
    ``distinct_from_requester`` the principal who registered it
    (``requested_by``) may not; with ``two_person`` two distinct principals
    must. ``deadline`` (None for never) is when the question times out, and
    ``on_timeout`` what happens then ("reject": failed_final
    "approval_timeout"; "escalate": needs_review). ``approvals`` are the
    decisions so far, oldest first; ``rule`` why the policy asked (the
    ``when`` expression that held, or "required")."""

    required: bool
    approvers: Tuple[str, ...]
    distinct_from_requester: bool
    two_person: bool
    requested_by: str
    deadline: Optional[datetime]
    on_timeout: str
    approvals: Tuple[ApprovalDecision, ...]
    rule: str

    @classmethod
    def from_pb(cls, a: pb.Approval) -> "Approval":
        """The Approval of a generated pb.Approval message."""
        return cls(required=a.required, approvers=tuple(a.approvers),
                   distinct_from_requester=a.distinct_from_requester, two_person=a.two_person,
                   requested_by=a.requested_by, deadline=_convert.timestamp(a, "deadline"), on_timeout=a.on_timeout,
                   approvals=tuple(ApprovalDecision(d.principal, _convert.timestamp(d, "at"), d.reason)
                                   for d in a.approvals),
                   rule=a.rule)


@dataclass(frozen=True)
class Operation:
    """The journal's record of one business intent.

    ``status`` is one of "pending", "in_progress", "unknown", "succeeded",
    "failed_final", "awaiting_approval" (a person must approve the request,
    its ``request_hash``, before any attempt; an in_progress operation
    whose lease expired reads as "unknown"). Strings that are not set are "", timestamps (aware UTC
    datetimes) and ``payload``/``result`` (dicts) are None (``payload`` and
    ``result`` are also None in the "basic" view, the default of
    list_operations() and of the agent's calls, but for the stored result in
    the answers of register() and claim(), which a replay returns).

    ``duplicate_external_ids`` are the distinct other external_ids later
    MarkSucceeded calls reported (detected duplicate effects, oldest first,
    at most MAX_DUPLICATE_EXTERNAL_IDS); ``duplicate_reports`` counts every
    such report; ``duplicate_external_id`` is the first of them.
    ``attempt_started_at`` is when the current (or last) attempt was claimed:
    the policy's max_attempt_seconds counts from there; ``first_attempt_at``
    when the first one was (the policy's retry.provider_dedup_window counts
    from there).

    ``refs`` are the business references given at registration ({"order_id":
    "817"}; an empty dict for none) and ``parent_key`` the key of the
    operation this one is a side effect of ("" for none); both are fixed at
    registration. ``approval`` is the approval the action's policy asked
    for at registration (an Approval), None when none was needed."""

    operation_key: str
    action_type: str
    request_hash: str
    status: str
    attempt_count: int
    external_id: str
    result: Optional[Dict[str, Any]]
    error_code: str
    lease_until: Optional[datetime]
    needs_review: bool
    review_reason: str
    created_at: Optional[datetime]
    updated_at: Optional[datetime]
    lease_owner: str
    duplicate_external_id: str
    payload: Optional[Dict[str, Any]]
    unknown_since: Optional[datetime]
    check_count: int
    last_checked_at: Optional[datetime]
    next_check_at: Optional[datetime]
    duplicate_external_ids: Tuple[str, ...] = ()
    duplicate_reports: int = 0
    attempt_started_at: Optional[datetime] = None
    refs: Dict[str, str] = field(default_factory=dict)
    parent_key: str = ""
    first_attempt_at: Optional[datetime] = None
    approval: Optional[Approval] = None

    @classmethod
    def from_pb(cls, op: pb.Operation) -> "Operation":
        """The Operation of a generated pb.Operation message."""
        ts, st = _convert.timestamp, _convert.struct_or_none
        return cls(
            operation_key=op.operation_key,
            action_type=op.action_type,
            request_hash=op.request_hash,
            status=status_name(op.status),
            attempt_count=op.attempt_count,
            external_id=op.external_id,
            result=st(op, "result"),
            error_code=op.error_code,
            lease_until=ts(op, "lease_until"),
            needs_review=op.needs_review,
            review_reason=op.review_reason,
            created_at=ts(op, "created_at"),
            updated_at=ts(op, "updated_at"),
            lease_owner=op.lease_owner,
            duplicate_external_id=op.duplicate_external_id,
            payload=st(op, "payload"),
            unknown_since=ts(op, "unknown_since"),
            check_count=op.check_count,
            last_checked_at=ts(op, "last_checked_at"),
            next_check_at=ts(op, "next_check_at"),
            duplicate_external_ids=tuple(op.duplicate_external_ids),
            duplicate_reports=op.duplicate_reports,
            attempt_started_at=ts(op, "attempt_started_at"),
            refs=dict(op.refs),
            parent_key=op.parent_key,
            first_attempt_at=ts(op, "first_attempt_at"),
            approval=Approval.from_pb(op.approval) if op.HasField("approval") else None,
        )


def status_name(value: int) -> str:
    """pb.STATUS_SUCCEEDED -> "succeeded" (a number this client does not
    know -> "status_<n>")."""
    try:
        name = pb.Status.Name(value)
    except ValueError:
        return "status_%d" % value
    return name[len("STATUS_"):].lower()


def next_step_name(value: int) -> str:
    """pb.NEXT_STEP_CALL_PROVIDER -> "call_provider" (NEXT_STEP_UNSPECIFIED
    -> "unspecified", a number this client does not know -> "next_step_<n>")."""
    try:
        name = pb.NextStep.Name(value)
    except ValueError:
        return "next_step_%d" % value
    return name[len("NEXT_STEP_"):].lower()


def _status_value(name: str) -> int:
    if name not in STATUSES:
        raise InvalidArgument(None, "%r is not a status (one of %s)" % (name, ", ".join(STATUSES)), "statuses")
    return pb.Status.Value("STATUS_" + name.upper())


def _view_value(view: Optional[str]) -> int:
    try:
        return VIEWS[view]
    except (KeyError, TypeError):
        raise InvalidArgument(None, "%r is not a view (\"basic\" or \"full\", or None for the "
                              "method's default)" % (view,), "view") from None


@dataclass(frozen=True)
class Registration:
    """What register() established. ``created``: this call inserted the
    operation. With claim=True: ``claimed`` (this caller holds the lease),
    ``attempt`` (the fencing token for the mark_* calls, 0 if not claimed),
    ``lease_until`` (database clock), ``lease_seconds`` (the lease granted,
    the one to measure on the caller's own clock from when it sent the
    request), and ``retry_after_seconds`` when another worker's lease is
    live. ``next`` is the journal's decision about what the caller does next
    (one of NEXT_STEPS: "call_provider", "replay", "wait",
    "verification_required", "failed_final", "claim"); act on it rather than
    on the operation's status."""

    operation: Operation
    created: bool
    claimed: bool
    attempt: int
    lease_until: Optional[datetime]
    retry_after_seconds: int
    next: str = ""
    lease_seconds: int = 0


@dataclass(frozen=True)
class ClaimResult:
    """What claim() established: ``claimed`` is True when this caller now
    holds the lease (``attempt`` is then the fencing token); otherwise the
    operation's state, and ``retry_after_seconds`` when another worker's
    lease is live. Losing a race is not an error. ``next`` and
    ``lease_seconds`` as for Registration."""

    operation: Operation
    claimed: bool
    attempt: int
    lease_until: Optional[datetime]
    retry_after_seconds: int
    next: str = ""
    lease_seconds: int = 0


@dataclass(frozen=True)
class LeaseExtension:
    """What extend_lease() established: the lease now ends ``lease_seconds``
    (whole seconds, rounded down) from when the journal answered, at
    ``lease_until`` on the database's clock; ``operation`` is the record
    after the call. The grant is shorter than asked when the attempt nears
    the policy's max_attempt_seconds."""

    operation: Operation
    lease_seconds: int
    lease_until: Optional[datetime]


@dataclass(frozen=True)
class Event:
    """One entry of an operation's history. ``from_status`` is "" for the
    registration; ``to_status`` as Operation.status. ``actor`` is who did
    it (under authentication the token's name), ``stated_actor`` what the
    caller SAID it acts as (the actor or worker_id of the request; not
    verified, "" when it said nothing). ``reason`` in words ("claimed",
    "lease extended", "marked unknown: timeout", ...)."""

    id: int
    at: Optional[datetime]
    from_status: str
    to_status: str
    attempt: int
    actor: str
    reason: str
    external_id: str
    stated_actor: str

    @classmethod
    def from_pb(cls, ev: pb.Event) -> "Event":
        """The Event of a generated pb.Event message."""
        return cls(
            id=ev.id,
            at=_convert.timestamp(ev, "at"),
            from_status="" if ev.from_status == pb.STATUS_UNSPECIFIED else status_name(ev.from_status),
            to_status=status_name(ev.to_status),
            attempt=ev.attempt,
            actor=ev.actor,
            reason=ev.reason,
            external_id=ev.external_id,
            stated_actor=ev.stated_actor,
        )


@dataclass(frozen=True)
class EventPage:
    """One page of list_events(), oldest first; ``next_page_token`` is ""
    on the last page."""

    events: Tuple[Event, ...]
    next_page_token: str


@dataclass(frozen=True)
class OperationPage:
    """One page of list_operations(), in key order; ``next_page_token`` is
    "" on the last page."""

    operations: Tuple[Operation, ...]
    next_page_token: str


@dataclass(frozen=True)
class Policy:
    """The policy the server enforces: ``fingerprint`` (hex SHA-256 of its
    canonical form; equal fingerprints mean equal policies) and ``source``
    (the YAML file as the server loaded it)."""

    fingerprint: str
    source: str


def default_worker_id() -> str:
    """"<hostname>-<pid>", reduced to what the journal accepts (visible
    ASCII, at most 200 characters)."""
    host = socket.gethostname() or "worker"
    wid = "".join(c if 0x21 <= ord(c) <= 0x7E else "_" for c in "%s-%d" % (host, os.getpid()))
    return wid[-200:]


# -- trace context --------------------------------------------------------------

#: The W3C trace-context headers the journal reads from the call metadata
#: (the root README's "Tracing"); nothing else is ever sent from a trace
#: context.
TRACE_HEADERS = ("traceparent", "tracestate", "baggage")

#: The longest trace-context value sent (W3C baggage's own limit, in bytes);
#: a longer one is dropped.
MAX_TRACE_VALUE_LEN = 8192

_log = logging.getLogger("opjournal")

#: opentelemetry.propagate once imported, None when it is not importable,
#: _UNSET before the first call looked.
_otel_propagate: Any = _UNSET


def _otel() -> Any:
    """opentelemetry.propagate, or None; the import is tried once."""
    global _otel_propagate
    mod = _otel_propagate
    if mod is _UNSET:
        try:
            from opentelemetry import propagate as mod  # type: ignore[import-not-found,no-redef]
            if not callable(getattr(mod, "inject", None)):
                mod = None
        except Exception:  # not installed (ImportError), or a broken install
            mod = None
        _otel_propagate = mod
    return mod


def _trace_value_ok(value: Any) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= MAX_TRACE_VALUE_LEN
            and all(0x20 <= ord(c) <= 0x7E for c in value))


def trace_metadata(headers: Optional[Mapping[str, Any]]) -> Tuple[Tuple[str, str], ...]:
    """The gRPC metadata of a trace-context carrier: its traceparent,
    tracestate and baggage entries (names matched case-insensitively, sent
    lower-case, the first of a name kept), each value a non-empty str of
    printable ASCII (no newline, no control character) of at most
    MAX_TRACE_VALUE_LEN characters. Everything else is dropped."""
    if not headers:
        return ()
    out = []
    seen = set()
    for name, value in headers.items():
        if not isinstance(name, str):
            continue
        name = name.strip().lower()
        if name in TRACE_HEADERS and name not in seen and _trace_value_ok(value):
            seen.add(name)
            out.append((name, value))
    return tuple(out)


PathLike = Union[str, "os.PathLike[str]"]


class _JournalBase:
    """What the blocking Journal and the asyncio one (opjournal.aio.Journal)
    share: the settings, the call metadata (token and trace context), and
    the making of each RPC's request and reading of its answer. Only the
    channel and the calls themselves differ."""

    def _configure(self, target: str, token: Optional[str], timeout: Optional[float], worker_id: Optional[str],
                   lease_seconds: int, trace_context: Optional[Callable[[], Optional[Mapping[str, str]]]]) -> None:
        if trace_context is not None and not callable(trace_context):
            raise TypeError("opjournal: trace_context must be a callable returning a mapping of header "
                            "name to value, or None")
        self._trace_context = trace_context
        self.target = target
        self.timeout = timeout
        self.worker_id = worker_id or default_worker_id()
        self.lease_seconds = int(lease_seconds)
        md: Tuple[Tuple[str, str], ...] = ()
        if token is not None:
            token = token.strip()
            if not token:
                raise ValueError("opjournal: token is empty")
            md = (("authorization", "Bearer " + token),)
        self._metadata = md

    def __repr__(self) -> str:
        return "%s(%r, worker_id=%r)" % (type(self).__name__, self.target, self.worker_id)  # never the token

    @property
    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        """The call metadata: the bearer token, if any, and the caller's
        current trace context (read on each access)."""
        return self._metadata + self._trace_metadata()

    #: Class defaults, for subclasses that do not run __init__.
    _trace_context: Optional[Callable[[], Optional[Mapping[str, str]]]] = None
    _trace_warned = False
    _metadata: Tuple[Tuple[str, str], ...] = ()

    def _trace_metadata(self) -> Tuple[Tuple[str, str], ...]:
        """The trace-context metadata of this call: the trace_context hook's,
        else OpenTelemetry's (when importable), else none. Never raises."""
        hook = self._trace_context
        try:
            if hook is not None:
                headers = hook()
            else:
                otel = _otel()
                if otel is None:
                    return ()
                headers = {}
                otel.inject(headers)
            return trace_metadata(headers if isinstance(headers, Mapping) else None)
        except Exception:
            if not self._trace_warned:
                self._trace_warned = True
                _log.warning("opjournal: reading the trace context failed; calls go on without it",
                             exc_info=True)
            return ()

    # -- requests and answers, shared ---------------------------------------

    def _register_request(self, key: str, action: str, payload: Mapping[str, Any], *, claim: bool = False,
                          worker_id: Optional[str] = None, lease_seconds: Optional[int] = None,
                          refs: Optional[Mapping[str, str]] = None,
                          parent_key: Optional[str] = None, view: Optional[str] = "basic") -> pb.RegisterRequest:
        req = pb.RegisterRequest(operation_key=key, action_type=action, payload=_convert.to_struct("payload", payload),
                                 refs=_convert.to_refs(refs), parent_key=_convert.to_key("parent_key", parent_key),
                                 view=_view_value(view))
        if claim:
            req.claim.worker_id = worker_id or self.worker_id
            req.claim.lease_seconds = self.lease_seconds if lease_seconds is None else int(lease_seconds)
        return req

    def _registration(self, resp: pb.RegisterResponse) -> Registration:
        return Registration(
            operation=Operation.from_pb(resp.operation),
            created=resp.created,
            claimed=resp.claimed,
            attempt=resp.attempt,
            lease_until=_convert.timestamp(resp, "lease_until"),
            retry_after_seconds=resp.retry_after_seconds,
            next=next_step_name(resp.next),
            lease_seconds=resp.lease_seconds,
        )

    def _claim_request(self, key: str, worker_id: Optional[str], lease_seconds: Optional[int],
                       view: Optional[str]) -> pb.ClaimRequest:
        return pb.ClaimRequest(
            operation_key=key,
            worker_id=worker_id or self.worker_id,
            lease_seconds=self.lease_seconds if lease_seconds is None else int(lease_seconds),
            view=_view_value(view),
        )

    @staticmethod
    def _claim_result(resp: pb.ClaimResponse) -> ClaimResult:
        return ClaimResult(
            operation=Operation.from_pb(resp.operation),
            claimed=resp.claimed,
            attempt=resp.attempt,
            lease_until=_convert.timestamp(resp, "lease_until"),
            retry_after_seconds=resp.retry_after_seconds,
            next=next_step_name(resp.next),
            lease_seconds=resp.lease_seconds,
        )

    @staticmethod
    def _extend_request(key: str, attempt: int, lease_seconds: int, view: Optional[str]) -> pb.ExtendLeaseRequest:
        return pb.ExtendLeaseRequest(operation_key=key, attempt=attempt, lease_seconds=int(lease_seconds),
                                     view=_view_value(view))

    @staticmethod
    def _lease_extension(resp: pb.ExtendLeaseResponse) -> LeaseExtension:
        return LeaseExtension(
            operation=Operation.from_pb(resp.operation),
            lease_seconds=resp.lease_seconds,
            lease_until=_convert.timestamp(resp, "lease_until"),
        )

    @staticmethod
    def _mark_succeeded_request(key: str, attempt: int, external_id: str, result: Optional[Mapping[str, Any]],
                                actor: str, view: Optional[str]) -> pb.MarkSucceededRequest:
        req = pb.MarkSucceededRequest(operation_key=key, attempt=attempt, external_id=external_id, actor=actor,
                                      view=_view_value(view))
        if result is not None:
            req.result.CopyFrom(_convert.to_struct("result", result))
        return req

    @staticmethod
    def _lookup_request(key: str, view: Optional[str], wait_seconds: int) -> pb.LookupRequest:
        if isinstance(wait_seconds, bool) or not isinstance(wait_seconds, int) or not 0 <= wait_seconds <= 60:
            raise InvalidArgument(None, "must be an int of 0..60 seconds", "wait_seconds")
        return pb.LookupRequest(operation_key=key, view=_view_value(view), wait_seconds=wait_seconds)

    @staticmethod
    def _list_operations_request(statuses: Iterable[str], needs_review: Optional[bool], action_type: str,
                                 due_for_check: bool, page_size: int, page_token: str, view: Optional[str],
                                 refs: Optional[Mapping[str, str]],
                                 parent_key: Optional[str]) -> pb.ListOperationsRequest:
        req = pb.ListOperationsRequest(statuses=[_status_value(s) for s in statuses], action_type=action_type,
                                       due_for_check=due_for_check, page_size=int(page_size),
                                       page_token=page_token, view=_view_value(view),
                                       refs=_convert.to_refs(refs),
                                       parent_key=_convert.to_key("parent_key", parent_key))
        if needs_review is not None:
            req.needs_review = bool(needs_review)
        return req

    @staticmethod
    def _operation_page(resp: pb.ListOperationsResponse) -> OperationPage:
        return OperationPage(tuple(Operation.from_pb(op) for op in resp.operations), resp.next_page_token)

    @staticmethod
    def _event_page(resp: pb.ListEventsResponse) -> EventPage:
        return EventPage(tuple(Event.from_pb(e) for e in resp.events), resp.next_page_token)


def _tls_roots(tls_ca: Union[None, PathLike, bytes]) -> Optional[bytes]:
    """The PEM roots of ``tls_ca`` (a file, or its bytes); None for the
    system's."""
    if isinstance(tls_ca, bytes):
        return tls_ca
    if tls_ca is not None:
        with open(tls_ca, "rb") as f:
            return f.read()
    return None


class Journal(_JournalBase):
    """A connection to an opjournal server's gRPC API.

    ``target`` is host:port. The channel is plaintext unless ``tls_ca`` (a
    PEM file of the CA to trust, or its bytes) or ``tls=True`` (the system's
    roots) is given; keep tokens off plaintext channels that leave the
    machine. ``token`` is sent as ``authorization: Bearer <token>`` metadata
    on every call (for a server run with --auth-file); it decides the tenant
    and the roles. ``timeout`` bounds each call, in seconds. ``worker_id``
    (default "<hostname>-<pid>") is stored as the lease owner;
    ``lease_seconds`` is the lease asked for on each claim (0: the action
    policy's). ``channel`` uses an existing grpc.Channel instead of dialing
    (close() then leaves it open).

    Every call also carries the caller's current W3C trace context as
    ``traceparent``/``tracestate``/``baggage`` metadata: by default what
    ``opentelemetry.propagate.inject`` writes, when the ``opentelemetry``
    package is importable (nothing otherwise); with ``trace_context`` (a
    callable returning a mapping of header name to value, called on each
    call) what it returns instead. Only those three names, with printable
    ASCII values, are sent (see trace_metadata()); a failing trace_context
    or propagator sends none and the call goes on.

    A Journal is safe to share between threads. Use it as a context manager,
    or call close().

    Refused calls raise the OpjournalError subclass of the server's error
    code (PayloadMismatch, StaleAttempt, NotFound, Unavailable, ...).
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
        channel: Optional[grpc.Channel] = None,
        options: Sequence[Tuple[str, Any]] = (),
        trace_context: Optional[Callable[[], Optional[Mapping[str, str]]]] = None,
    ):
        self._configure(target, token, timeout, worker_id, lease_seconds, trace_context)
        self._owns_channel = channel is None
        if channel is None:
            if tls_ca is not None or tls:
                creds = grpc.ssl_channel_credentials(root_certificates=_tls_roots(tls_ca))
                channel = grpc.secure_channel(target, creds, options=list(options))
            else:
                channel = grpc.insecure_channel(target, options=list(options))
        self._channel = channel
        self._stub = pb_grpc.JournalServiceStub(channel)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Closes the channel this Journal opened."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stub(self) -> pb_grpc.JournalServiceStub:
        """The generated stub, for RPCs this class does not wrap (Resolve,
        Escalate, ...); pass ``metadata=journal.metadata``."""
        return self._stub

    def _call(self, method: str, request, timeout: Optional[float] = _UNSET):
        """Every RPC goes through here. ``timeout`` overrides self.timeout
        for this call."""
        if timeout is _UNSET:
            timeout = self.timeout
        md = self._metadata + self._trace_metadata()
        try:
            return getattr(self._stub, method)(request, timeout=timeout, metadata=md or None)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    # -- the agent's calls -------------------------------------------------

    def register(self, key: str, action: str, payload: Mapping[str, Any], *, claim: bool = False,
                 worker_id: Optional[str] = None, lease_seconds: Optional[int] = None,
                 refs: Optional[Mapping[str, str]] = None, parent_key: Optional[str] = None,
                 view: Optional[str] = "basic") -> Registration:
        """Registers an operation before its external call. A new key is
        inserted as pending (created=True); the same key and payload return
        the existing record (with the stored result when terminal); the same
        key with another payload raises PayloadMismatch and changes nothing.
        A new key that would pass a budget of the action whose on_exceed is
        reject raises BudgetExceeded (its ``refusal`` names the budget,
        ``retry_after`` says when the request may fit) and writes nothing.
        With claim=True the operation is also claimed in the same call.
        ``next`` in the answer says what to do next.

        ``refs`` are business references stored with the operation and
        searchable (list_operations(refs=...)): {"order_id": "817",
        "customer": "c-93"}, at most MAX_REFS, names of [a-z0-9_.-], short
        values, nothing secret. ``parent_key`` is the key of the operation
        this one is a side effect of (see child_key()). Neither is part of
        the request hash, and both are fixed at registration: the same key
        and payload with other refs (or another parent) raise
        PayloadMismatch (field "refs" or "parent_key").

        ``view`` is how much of the operation the answer carries: "basic"
        (the default) leaves the payload out (the caller has it) but keeps
        the stored result, which a replay returns; "full" adds the payload."""
        return self._registration(self._call("Register", self._register_request(
            key, action, payload, claim=claim, worker_id=worker_id, lease_seconds=lease_seconds,
            refs=refs, parent_key=parent_key, view=view)))

    def claim(self, key: str, *, worker_id: Optional[str] = None, lease_seconds: Optional[int] = None,
              view: Optional[str] = "basic") -> ClaimResult:
        """Asks for a lease so the caller may call the provider. ``view`` as
        for register() ("basic": no payload, the stored result if any)."""
        return self._claim_result(self._call("Claim", self._claim_request(key, worker_id, lease_seconds, view)))

    def extend_lease(self, key: str, attempt: int, lease_seconds: int = 0, *,
                     view: Optional[str] = "basic") -> LeaseExtension:
        """A heartbeat: extends the live lease of ``attempt`` to
        ``lease_seconds`` from now (0: the policy's lease_seconds), never
        beyond the policy's max_attempt_seconds after the claim. Raises
        StaleAttempt when the attempt no longer holds a live lease (an
        expired lease is never revived: its outcome is already unknown) and
        InvalidState once max_attempt_seconds is reached. execute() sends
        these itself while fn runs. ``view``: "basic" (the default: without
        payload and result) or "full"."""
        return self._extend_lease(key, attempt, lease_seconds, view=view)

    def _extend_lease(self, key: str, attempt: int, lease_seconds: int = 0,
                      timeout: Optional[float] = _UNSET, view: Optional[str] = "basic") -> LeaseExtension:
        return self._lease_extension(self._call("ExtendLease", self._extend_request(key, attempt, lease_seconds, view),
                                                timeout=timeout))

    def mark_succeeded(self, key: str, attempt: int, external_id: str = "",
                       result: Optional[Mapping[str, Any]] = None, *, actor: str = "",
                       view: Optional[str] = "basic") -> Operation:
        """Records a confirmed effect (accepted from a stale attempt too). The
        same external_id again is a no-op; another one keeps the first and
        sets needs_review. ``view``: "basic" (the default) answers without
        payload and result (the caller sent the result); "full" returns the
        stored result (redacted by the policy; after a duplicate effect, the
        first one's) and the payload."""
        return self._mark_succeeded(self._mark_succeeded_request(key, attempt, external_id, result, actor, view))

    def _mark_succeeded(self, req: pb.MarkSucceededRequest) -> Operation:
        return Operation.from_pb(self._call("MarkSucceeded", req).operation)

    def mark_unknown(self, key: str, attempt: int, error_code: str, *, view: Optional[str] = "basic") -> Operation:
        """Records an attempt without a definite answer ("timeout",
        "http_503"); only the current lease holder may (else StaleAttempt).
        ``view``: "basic" (the default: without payload and result) or "full"."""
        req = pb.MarkUnknownRequest(operation_key=key, attempt=attempt, error_code=error_code, view=_view_value(view))
        return Operation.from_pb(self._call("MarkUnknown", req).operation)

    def mark_failed_final(self, key: str, attempt: int, error_code: str, *, view: Optional[str] = "basic") -> Operation:
        """Records a confirmed rejection ("card_declined"); only the current
        lease holder may (else StaleAttempt). ``view``: "basic" (the
        default: without payload and result) or "full"."""
        req = pb.MarkFailedFinalRequest(operation_key=key, attempt=attempt, error_code=error_code,
                                        view=_view_value(view))
        return Operation.from_pb(self._call("MarkFailedFinal", req).operation)

    def lookup(self, key: str, *, view: Optional[str] = None, wait_seconds: int = 0) -> Operation:
        """Returns the operation, or raises NotFound. ``view``: "full" (the
        default: every field) or "basic" (without payload and result).
        ``wait_seconds`` (0..60) is a long poll: while the operation awaits
        approval the journal holds the answer until it is decided or that
        many seconds pass; the call's timeout grows by as much."""
        req = self._lookup_request(key, view, wait_seconds)
        timeout = self.timeout if self.timeout is None else self.timeout + req.wait_seconds
        return Operation.from_pb(self._call("Lookup", req, timeout=timeout).operation)

    def _lookup_wait(self, key: str, left: float, cancel: Optional[threading.Event]) -> Optional[Operation]:
        """One long poll of execute's wait for an approval, at most ``left``
        seconds: the record, or None when ``left`` passed or ``cancel`` was
        set first (the call is then cancelled)."""
        req = self._lookup_request(key, "basic", _lookup_slice(left))
        md = self._metadata + self._trace_metadata()
        fut = self._stub.Lookup.future(req, timeout=left, metadata=md or None)
        if cancel is not None:
            done = threading.Event()
            fut.add_done_callback(lambda _: done.set())
            # The caller's Event cannot wake this thread: it is looked at
            # 20 times a second (no journal call; the long poll goes on).
            while not done.wait(0.05):
                if cancel.is_set():
                    fut.cancel()
                    return None
        try:
            return Operation.from_pb(fut.result().operation)
        except grpc.FutureCancelledError:
            return None
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
                return None  # the bound passed while the journal held the answer
            raise from_rpc_error(e) from e

    def list_operations(self, *, statuses: Iterable[str] = (), needs_review: Optional[bool] = None,
                        action_type: str = "", due_for_check: bool = False, page_size: int = 0,
                        page_token: str = "", view: Optional[str] = None,
                        refs: Optional[Mapping[str, str]] = None, parent_key: Optional[str] = None) -> OperationPage:
        """One page of operations in key order, filtered by ``statuses``
        (Operation.status values; an expired lease counts as "unknown"),
        ``needs_review``, ``action_type``, ``due_for_check``, ``refs`` (only
        operations with ALL of these business references) and
        ``parent_key`` (only the children of that operation).
        ``page_size`` 0 is the server's default (DEFAULT_PAGE_SIZE, at most
        MAX_PAGE_SIZE); pass the answer's ``next_page_token`` as
        ``page_token`` for the next page. ``view``: "basic" (the default:
        without payload and result) or "full"."""
        req = self._list_operations_request(statuses, needs_review, action_type, due_for_check, page_size,
                                            page_token, view, refs, parent_key)
        return self._operation_page(self._call("ListOperations", req))

    def list_events(self, key: str, page_size: int = 0, page_token: str = "") -> EventPage:
        """One page of the operation's history, oldest first. ``page_size``
        0 is the server's default (DEFAULT_PAGE_SIZE, at most
        MAX_PAGE_SIZE); pass the answer's ``next_page_token`` as
        ``page_token`` for the next page (it is "" on the last)."""
        resp = self._call("ListEvents", pb.ListEventsRequest(operation_key=key, page_size=int(page_size),
                                                             page_token=page_token))
        return self._event_page(resp)

    def iter_events(self, key: str, page_size: int = 0) -> Iterator[Event]:
        """The operation's whole history, oldest first, fetched page by page
        with list_events()."""
        token = ""
        while True:
            page = self.list_events(key, page_size, token)
            yield from page.events
            token = page.next_page_token
            if not token:
                return

    # -- the operator's calls ----------------------------------------------

    def acknowledge(self, key: str, reason: str, actor: str = "") -> Operation:
        """An operator's decision on a TERMINAL operation under review (a
        detected duplicate effect, say): clears needs_review and records
        ``reason`` in the history; the status never changes. ``actor`` is who
        decided (required without authentication; under it the token's name
        is the actor and this is recorded as stated_actor)."""
        req = pb.AcknowledgeRequest(operation_key=key, reason=reason, actor=actor)
        return Operation.from_pb(self._call("Acknowledge", req).operation)

    def get_policy(self) -> Policy:
        """The policy the server enforces (its fingerprint and YAML source),
        so a reconciler or an operator can check it works from the same."""
        resp = self._call("GetPolicy", pb.GetPolicyRequest())
        return Policy(fingerprint=resp.fingerprint, source=resp.source)

