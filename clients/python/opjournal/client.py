"""Journal: a thin, typed client of the JournalService over gRPC."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import grpc

from . import _convert
from .errors import from_rpc_error
from .v1 import journal_pb2 as pb
from .v1 import journal_pb2_grpc as pb_grpc

__all__ = ["Journal", "Operation", "Registration", "ClaimResult", "default_worker_id"]

#: Operation.status values.
STATUSES = ("pending", "in_progress", "unknown", "succeeded", "failed_final")


@dataclass(frozen=True)
class Operation:
    """The journal's record of one business intent.

    ``status`` is one of "pending", "in_progress", "unknown", "succeeded",
    "failed_final" (an in_progress operation whose lease expired reads as
    "unknown"). Strings that are not set are "", timestamps (aware UTC
    datetimes) and ``payload``/``result`` (dicts) are None."""

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

    @classmethod
    def from_pb(cls, op: pb.Operation) -> "Operation":
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
        )


def status_name(value: int) -> str:
    """pb.STATUS_SUCCEEDED -> "succeeded"."""
    try:
        name = pb.Status.Name(value)
    except ValueError:
        return "status_%d" % value
    return name[len("STATUS_"):].lower()


@dataclass(frozen=True)
class Registration:
    """What register() established. ``created``: this call inserted the
    operation. With claim=True: ``claimed`` (this caller holds the lease),
    ``attempt`` (the fencing token for the mark_* calls, 0 if not claimed),
    ``lease_until``, and ``retry_after_seconds`` when another worker's lease
    is live."""

    operation: Operation
    created: bool
    claimed: bool
    attempt: int
    lease_until: Optional[datetime]
    retry_after_seconds: int


@dataclass(frozen=True)
class ClaimResult:
    """What claim() established: ``claimed`` is True when this caller now
    holds the lease (``attempt`` is then the fencing token); otherwise the
    operation's state, and ``retry_after_seconds`` when another worker's
    lease is live. Losing a race is not an error."""

    operation: Operation
    claimed: bool
    attempt: int
    lease_until: Optional[datetime]
    retry_after_seconds: int


def default_worker_id() -> str:
    """"<hostname>-<pid>", reduced to what the journal accepts (visible
    ASCII, at most 200 characters)."""
    host = socket.gethostname() or "worker"
    wid = "".join(c if 0x21 <= ord(c) <= 0x7E else "_" for c in "%s-%d" % (host, os.getpid()))
    return wid[-200:]


PathLike = Union[str, "os.PathLike[str]"]


class Journal:
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
    ):
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
        self._owns_channel = channel is None
        if channel is None:
            if tls_ca is not None or tls:
                roots = None
                if isinstance(tls_ca, bytes):
                    roots = tls_ca
                elif tls_ca is not None:
                    with open(tls_ca, "rb") as f:
                        roots = f.read()
                channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=roots), options=list(options))
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

    def __repr__(self) -> str:
        return "Journal(%r, worker_id=%r)" % (self.target, self.worker_id)  # never the token

    @property
    def stub(self) -> pb_grpc.JournalServiceStub:
        """The generated stub, for RPCs this class does not wrap (ListEvents,
        Resolve, ...); pass ``metadata=journal.metadata``."""
        return self._stub

    @property
    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        """The call metadata (the bearer token, if any)."""
        return self._metadata

    def _call(self, method: str, request):
        try:
            return getattr(self._stub, method)(request, timeout=self.timeout, metadata=self._metadata or None)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    # -- the agent's calls -------------------------------------------------

    def register(self, key: str, action: str, payload: Mapping[str, Any], *, claim: bool = False,
                 worker_id: Optional[str] = None, lease_seconds: Optional[int] = None) -> Registration:
        """Registers an operation before its external call. A new key is
        inserted as pending (created=True); the same key and payload return
        the existing record (with the stored result when terminal); the same
        key with another payload raises PayloadMismatch and changes nothing.
        With claim=True the operation is also claimed in the same call."""
        req = pb.RegisterRequest(operation_key=key, action_type=action, payload=_convert.to_struct("payload", payload))
        if claim:
            req.claim.worker_id = worker_id or self.worker_id
            req.claim.lease_seconds = self.lease_seconds if lease_seconds is None else int(lease_seconds)
        return self._registration(self._call("Register", req))

    def _registration(self, resp: pb.RegisterResponse) -> Registration:
        return Registration(
            operation=Operation.from_pb(resp.operation),
            created=resp.created,
            claimed=resp.claimed,
            attempt=resp.attempt,
            lease_until=_convert.timestamp(resp, "lease_until"),
            retry_after_seconds=resp.retry_after_seconds,
        )

    def claim(self, key: str, *, worker_id: Optional[str] = None, lease_seconds: Optional[int] = None) -> ClaimResult:
        """Asks for a lease so the caller may call the provider."""
        resp = self._call("Claim", pb.ClaimRequest(
            operation_key=key,
            worker_id=worker_id or self.worker_id,
            lease_seconds=self.lease_seconds if lease_seconds is None else int(lease_seconds),
        ))
        return ClaimResult(
            operation=Operation.from_pb(resp.operation),
            claimed=resp.claimed,
            attempt=resp.attempt,
            lease_until=_convert.timestamp(resp, "lease_until"),
            retry_after_seconds=resp.retry_after_seconds,
        )

    def mark_succeeded(self, key: str, attempt: int, external_id: str = "",
                       result: Optional[Mapping[str, Any]] = None, *, actor: str = "") -> Operation:
        """Records a confirmed effect (accepted from a stale attempt too). The
        same external_id again is a no-op; another one keeps the first and
        sets needs_review."""
        req = pb.MarkSucceededRequest(operation_key=key, attempt=attempt, external_id=external_id, actor=actor)
        if result is not None:
            req.result.CopyFrom(_convert.to_struct("result", result))
        return self._mark_succeeded(req)

    def _mark_succeeded(self, req: pb.MarkSucceededRequest) -> Operation:
        return Operation.from_pb(self._call("MarkSucceeded", req).operation)

    def mark_unknown(self, key: str, attempt: int, error_code: str) -> Operation:
        """Records an attempt without a definite answer ("timeout",
        "http_503"); only the current lease holder may (else StaleAttempt)."""
        req = pb.MarkUnknownRequest(operation_key=key, attempt=attempt, error_code=error_code)
        return Operation.from_pb(self._call("MarkUnknown", req).operation)

    def mark_failed_final(self, key: str, attempt: int, error_code: str) -> Operation:
        """Records a confirmed rejection ("card_declined"); only the current
        lease holder may (else StaleAttempt)."""
        req = pb.MarkFailedFinalRequest(operation_key=key, attempt=attempt, error_code=error_code)
        return Operation.from_pb(self._call("MarkFailedFinal", req).operation)

    def lookup(self, key: str) -> Operation:
        """Returns the operation, or raises NotFound."""
        return Operation.from_pb(self._call("Lookup", pb.LookupRequest(operation_key=key)).operation)

