"""The exceptions of the journal's API: one class per opjournal error code.

Every refused call raises an :class:`OpjournalError` subclass chosen by the
``google.rpc.ErrorInfo`` reason the server attaches (domain ``"opjournal"``),
with ``code`` (``"PAYLOAD_MISMATCH"``), ``message`` and ``field``
(``"payload/amount_minor"``, or ``None``), ``details`` (the ErrorInfo's other
metadata: facts for programs, such as a budget's limit) and ``retry_after``
(the ``google.rpc.RetryInfo`` delay in seconds, or ``None``). The original
``grpc.RpcError`` is the exception's ``__cause__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Type

import grpc

from . import _status

__all__ = [
    "OpjournalError",
    "InvalidArgument",
    "UnknownAction",
    "TooLarge",
    "PayloadMismatch",
    "StaleAttempt",
    "InvalidState",
    "NotFound",
    "Unauthenticated",
    "PermissionDenied",
    "RateLimited",
    "BudgetExceeded",
    "BudgetRefusal",
    "Unavailable",
    "Internal",
    "NotRecorded",
    "ResultNotStored",
]


class OpjournalError(Exception):
    """An error of the journal (or of this client, before it called one).

    ``code`` is the opjournal error code, ``message`` the server's message
    (without the field prefix), ``field`` the offending request field or
    None, ``grpc_code`` the call's grpc.StatusCode (None for client-side
    checks). ``details`` is the rest of the server's ErrorInfo metadata (a
    dict of str, empty for most codes; never a payload value), and
    ``retry_after`` the seconds after which the same request may succeed,
    from the status's RetryInfo (None: no hint)."""

    code = "INTERNAL"

    def __init__(self, code: Optional[str] = None, message: str = "", field: Optional[str] = None,
                 grpc_code: Optional[grpc.StatusCode] = None, *, details: Optional[Mapping[str, str]] = None,
                 retry_after: Optional[float] = None):
        if code is not None:
            self.code = code
        self.message = message
        self.field = field or None
        self.grpc_code = grpc_code
        self.details: Dict[str, str] = dict(details or {})
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self) -> str:
        s = self.code + ": "
        if self.field:
            s += self.field + ": "
        return s + self.message

    def __repr__(self) -> str:
        return "%s(code=%r, message=%r, field=%r)" % (type(self).__name__, self.code, self.message, self.field)

    def __reduce__(self):
        return (_rebuild, (type(self), self.code, self.message, self.field, self.details, self.retry_after))


def _rebuild(cls, code, message, field, details=None, retry_after=None):
    e = cls.__new__(cls)
    OpjournalError.__init__(e, code, message, field, details=details, retry_after=retry_after)
    return e


class InvalidArgument(OpjournalError):
    """A missing, malformed or out-of-range field (``field`` names it), e.g.
    a non-integer ``amount_minor``. Also raised by the client's own checks."""

    code = "INVALID_ARGUMENT"


class UnknownAction(OpjournalError):
    """The action type has no policy on the server."""

    code = "UNKNOWN_ACTION"


class TooLarge(OpjournalError):
    """A payload, result or request over its limit."""

    code = "TOO_LARGE"


class PayloadMismatch(OpjournalError):
    """The key is registered with other parameters. Nothing changed; a new
    intent needs a new key."""

    code = "PAYLOAD_MISMATCH"


class StaleAttempt(OpjournalError):
    """The attempt no longer holds the lease; nothing changed."""

    code = "STALE_ATTEMPT"


class InvalidState(OpjournalError):
    """The operation's state or policy forbids the transition."""

    code = "INVALID_STATE"


class NotFound(OpjournalError):
    """No such operation (in the caller's tenant)."""

    code = "NOT_FOUND"


class Unauthenticated(OpjournalError):
    """No valid bearer token."""

    code = "UNAUTHENTICATED"


class PermissionDenied(OpjournalError):
    """The token's roles do not allow the call."""

    code = "PERMISSION_DENIED"


class RateLimited(OpjournalError):
    """The tenant is over the server's rate limit; retry later."""

    code = "RATE_LIMITED"


@dataclass(frozen=True)
class BudgetRefusal:
    """What the journal said of the budget a registration would pass:
    ``name`` (the budget's name in the policy, "daily-payments"),
    ``action`` (the action whose policy defines it), ``limit``, ``used``
    (what counts within the window, this request not included) and
    ``window_seconds`` (the rolling window), and ``message``, the journal's
    words for people. It never holds a payload value."""

    name: str
    action: str
    limit: int
    used: int
    window_seconds: int
    message: str = ""


def _int(details: Mapping[str, str], name: str) -> int:
    # A missing or malformed number reads as 0, as in the Go SDK: the
    # refusal stands whatever its facts say.
    try:
        return int(details.get(name) or 0)
    except ValueError:
        return 0


class BudgetExceeded(OpjournalError):
    """The registration would pass a budget of the action whose
    ``on_exceed`` is ``reject``: nothing was registered and nothing called.
    ``refusal`` (a :class:`BudgetRefusal`) names the budget, its limit and
    what is used; ``retry_after`` is the seconds after which the same
    request may fit, or None when it never will (the request alone is over
    the limit). Do not split or rephrase the request to get around the
    limit. ``execute`` returns it as a ``"budget_exceeded"`` outcome."""

    code = "BUDGET_EXCEEDED"

    def __init__(self, code: Optional[str] = None, message: str = "", field: Optional[str] = None,
                 grpc_code: Optional[grpc.StatusCode] = None, *, details: Optional[Mapping[str, str]] = None,
                 retry_after: Optional[float] = None):
        if retry_after is None and details:
            # The RetryInfo is the hint; the metadata says the same in
            # whole seconds, for a peer that dropped the RetryInfo.
            secs = _int(details, "retry_after_seconds")
            retry_after = float(secs) if secs > 0 else None
        super().__init__(code, message, field, grpc_code, details=details, retry_after=retry_after)

    @property
    def refusal(self) -> BudgetRefusal:
        """The budget that refused the registration, from ``details``."""
        d = self.details
        return BudgetRefusal(name=d.get("budget", ""), action=d.get("action", ""), limit=_int(d, "limit"),
                             used=_int(d, "used"), window_seconds=_int(d, "window_seconds"), message=self.message)


class Unavailable(OpjournalError):
    """The journal (or its database) did not answer; retrying the call is
    safe. A call that ran out of time is Unavailable too (``grpc_code`` is
    DEADLINE_EXCEEDED): it may or may not have been applied."""

    code = "UNAVAILABLE"


class Internal(OpjournalError):
    """A bug on the server, or an answer the client cannot classify."""

    code = "INTERNAL"


class NotRecorded(OpjournalError):
    """``execute`` called fn, but the journal could not record its outcome.

    The operation keeps its lease until it expires, then shows as unknown and
    goes to reconciliation: it is verified, never retried blindly. A success
    the journal has not recorded is never reported as an Outcome.
    ``observed`` is what would have been recorded (an OutcomeKind),
    ``external_id`` the provider's id when that was a success, ``error`` the
    journal's error (also ``__cause__``); ``code`` is the journal error's code.
    """

    def __init__(self, key: str, attempt: int, observed, error: OpjournalError, external_id: str = ""):
        self.key = key
        self.attempt = attempt
        self.observed = observed
        self.error = error
        self.external_id = external_id
        what = getattr(observed, "value", str(observed))
        if external_id:
            what += ", external_id %r" % external_id
        msg = ("the outcome of operation %r attempt %d (%s) could not be recorded in the journal: %s; "
               "the journal will show the operation as unknown once its lease expires, "
               "so that it is verified rather than retried blindly" % (key, attempt, what, error))
        super().__init__(error.code, msg, None, error.grpc_code)

    def __reduce__(self):
        return (NotRecorded, (self.key, self.attempt, self.observed, self.error, self.external_id))


class ResultNotStored(OpjournalError):
    """The effect was recorded as succeeded, but Effect.result could not be
    stored (not a JSON object, a number beyond +-(2^53-1), over the size
    limit). ``outcome`` is the Succeeded outcome (its result is None);
    ``error`` says why the result was refused."""

    def __init__(self, key: str, outcome, error: OpjournalError):
        self.key = key
        self.outcome = outcome
        self.error = error
        super().__init__(error.code, "operation %r succeeded and is recorded, but its result was not stored: %s"
                         % (key, error), error.field, error.grpc_code)

    def __reduce__(self):
        return (ResultNotStored, (self.key, self.outcome, self.error))


_BY_CODE: Dict[str, Type[OpjournalError]] = {
    c.code: c
    for c in (InvalidArgument, UnknownAction, TooLarge, PayloadMismatch, StaleAttempt, InvalidState,
              NotFound, Unauthenticated, PermissionDenied, RateLimited, BudgetExceeded, Unavailable, Internal)
}

# A status without an opjournal ErrorInfo (a proxy, a dead server, our own
# deadline): the gRPC code decides.
_BY_GRPC = {
    grpc.StatusCode.UNAVAILABLE: (Unavailable, "journal unreachable: "),
    grpc.StatusCode.DEADLINE_EXCEEDED: (Unavailable, "journal did not answer in time: "),
    grpc.StatusCode.UNAUTHENTICATED: (Unauthenticated, ""),
    grpc.StatusCode.PERMISSION_DENIED: (PermissionDenied, ""),
}


def error_for_code(code: str, message: str = "", field: Optional[str] = None,
                   grpc_code: Optional[grpc.StatusCode] = None, *, details: Optional[Mapping[str, str]] = None,
                   retry_after: Optional[float] = None) -> OpjournalError:
    """The exception for an opjournal error code; an unknown code gets the
    base class with that code."""
    cls = _BY_CODE.get(code, OpjournalError)
    return cls(code, message, field, grpc_code, details=details, retry_after=retry_after)


def from_rpc_error(err: grpc.RpcError) -> OpjournalError:
    """Converts a failed call's grpc.RpcError into the matching
    OpjournalError, reading the ErrorInfo (and a RetryInfo) from the
    trailing metadata."""
    code = err.code() if hasattr(err, "code") else None
    message = (err.details() if hasattr(err, "details") else None) or ""
    trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    status = _status.details_from_metadata(trailing)
    info = _status.error_info(status)
    if info is not None:
        details = dict(info.metadata)
        field = details.pop("field", None) or None
        if field and message.startswith(field + ": "):
            message = message[len(field) + 2:]
        return error_for_code(info.reason, message, field, code, details=details,
                              retry_after=_status.retry_delay(status))
    cls, prefix = _BY_GRPC.get(code, (None, ""))
    if cls is not None:
        return cls(None, prefix + message, None, code)
    name = code.name if isinstance(code, grpc.StatusCode) else str(code)
    return Internal(None, "%s: %s" % (name, message), None, code)
