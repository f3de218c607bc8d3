"""opjournal: the Python client of the operation journal that makes an AI
agent's irreversible actions (a payment, an email, a job application) safe
to retry.

    import opjournal

    with opjournal.Journal("127.0.0.1:9090") as journal:
        outcome = opjournal.execute(
            journal, "payment:order-817:intent-01", "create_payment",
            {"order_id": "817", "amount_minor": 490000, "currency": "RUB"},
            lambda key, attempt: charge(key),   # returns opjournal.Effect(...)
        )

In production the key is opaque: new_key() makes one ONCE per intent, and
the orchestrator stores it with the intent (a retry sends the same key);
the business links go in ``refs=`` (fixed at registration), and a side
effect inside the handler (the payment's receipt email) gets
child_key(parent_key, "receipt_email") with ``parent_key=`` set.

opjournal.aio is the asyncio client: the same names, awaited
(``async with opjournal.aio.Journal(addr) as journal``, ``await
opjournal.aio.execute(...)``, ``opjournal.aio.idempotent``).

See execute() for the protocol (the journal decides the next step; fn runs
under the granted lease, kept alive by heartbeats, and gets a Deadline if
it asks for one), idempotent() for the decorator, and Journal for the thin
calls (register, claim, extend_lease, mark_*, lookup, list_operations,
list_events, acknowledge, get_policy). Errors of the journal are
OpjournalError subclasses, one per error code.
"""

from .client import (Approval, ApprovalDecision, ClaimResult, Event, EventPage, Journal, LeaseExtension, Operation,
                     OperationPage, Policy, Registration, default_worker_id)
from .errors import (BudgetExceeded, BudgetRefusal, Internal, InvalidArgument, InvalidState, NotFound, NotRecorded,
                     OpjournalError, PayloadMismatch, PermissionDenied, RateLimited, ResultNotStored, StaleAttempt,
                     TooLarge, Unauthenticated, Unavailable, UnknownAction)
from .execute import (Deadline, Effect, NotSucceeded, Outcome, OutcomeKind, Rejected, UnknownOutcome,
                      classify_http, execute, idempotent, urlopen)
from .keys import KEY_PREFIX, child_key, new_key

__version__ = "0.1.0"


def __getattr__(name):
    # opjournal.aio, the asyncio client, on first use: `import opjournal`
    # alone does not import asyncio and grpc.aio.
    if name == "aio":
        import importlib
        return importlib.import_module(".aio", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

__all__ = [
    "Journal", "Operation", "Approval", "ApprovalDecision", "Registration", "ClaimResult", "LeaseExtension", "Event", "EventPage",
    "OperationPage", "Policy", "default_worker_id",
    "execute", "idempotent", "Outcome", "OutcomeKind", "Effect", "Deadline", "Rejected", "UnknownOutcome",
    "NotSucceeded", "classify_http", "urlopen",
    "new_key", "child_key", "KEY_PREFIX",
    "OpjournalError", "InvalidArgument", "UnknownAction", "TooLarge", "PayloadMismatch", "StaleAttempt",
    "InvalidState", "NotFound", "Unauthenticated", "PermissionDenied", "RateLimited", "BudgetExceeded",
    "BudgetRefusal", "Unavailable", "Internal", "NotRecorded", "ResultNotStored",
]
