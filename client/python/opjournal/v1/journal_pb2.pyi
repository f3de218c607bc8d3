from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
NEXT_STEP_AWAIT_APPROVAL: NextStep
NEXT_STEP_CALL_PROVIDER: NextStep
NEXT_STEP_CLAIM: NextStep
NEXT_STEP_FAILED_FINAL: NextStep
NEXT_STEP_REPLAY: NextStep
NEXT_STEP_UNSPECIFIED: NextStep
NEXT_STEP_VERIFICATION_REQUIRED: NextStep
NEXT_STEP_WAIT: NextStep
OPERATION_VIEW_BASIC: OperationView
OPERATION_VIEW_FULL: OperationView
OPERATION_VIEW_UNSPECIFIED: OperationView
RESOLUTION_FAILED_FINAL: Resolution
RESOLUTION_SUCCEEDED: Resolution
RESOLUTION_UNSPECIFIED: Resolution
STATUS_AWAITING_APPROVAL: Status
STATUS_FAILED_FINAL: Status
STATUS_IN_PROGRESS: Status
STATUS_PENDING: Status
STATUS_SUCCEEDED: Status
STATUS_UNKNOWN: Status
STATUS_UNSPECIFIED: Status

class AcknowledgeRequest(_message.Message):
    __slots__ = ["actor", "operation_key", "reason"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    actor: str
    operation_key: str
    reason: str
    def __init__(self, operation_key: _Optional[str] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AcknowledgeResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ["approvals", "approvers", "budgets", "deadline", "distinct_from_requester", "on_timeout", "requested_by", "requested_by_label", "required", "rule", "two_person"]
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    APPROVERS_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DISTINCT_FROM_REQUESTER_FIELD_NUMBER: _ClassVar[int]
    ON_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_LABEL_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    TWO_PERSON_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[ApprovalDecision]
    approvers: _containers.RepeatedScalarFieldContainer[str]
    budgets: _containers.RepeatedScalarFieldContainer[str]
    deadline: _timestamp_pb2.Timestamp
    distinct_from_requester: bool
    on_timeout: str
    requested_by: str
    requested_by_label: str
    required: bool
    rule: str
    two_person: bool
    def __init__(self, budgets: _Optional[_Iterable[str]] = ..., required: bool = ..., approvers: _Optional[_Iterable[str]] = ..., distinct_from_requester: bool = ..., two_person: bool = ..., requested_by: _Optional[str] = ..., deadline: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., on_timeout: _Optional[str] = ..., approvals: _Optional[_Iterable[_Union[ApprovalDecision, _Mapping]]] = ..., rule: _Optional[str] = ..., requested_by_label: _Optional[str] = ...) -> None: ...

class ApprovalDecision(_message.Message):
    __slots__ = ["at", "label", "principal", "reason"]
    AT_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    label: str
    principal: str
    reason: str
    def __init__(self, principal: _Optional[str] = ..., at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ["actor", "operation_key", "reason", "request_hash"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    actor: str
    operation_key: str
    reason: str
    request_hash: str
    def __init__(self, operation_key: _Optional[str] = ..., request_hash: _Optional[str] = ..., reason: _Optional[str] = ..., actor: _Optional[str] = ...) -> None: ...

class ApproveResponse(_message.Message):
    __slots__ = ["operation", "released"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    released: bool
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., released: bool = ...) -> None: ...

class BudgetHold(_message.Message):
    __slots__ = ["amount", "budget", "over_limit", "scope", "usage"]
    AMOUNT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    OVER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    amount: int
    budget: str
    over_limit: bool
    scope: str
    usage: BudgetUsage
    def __init__(self, budget: _Optional[str] = ..., scope: _Optional[str] = ..., amount: _Optional[int] = ..., over_limit: bool = ..., usage: _Optional[_Union[BudgetUsage, _Mapping]] = ...) -> None: ...

class BudgetUsage(_message.Message):
    __slots__ = ["action_type", "budget", "limit", "on_exceed", "operations", "reserved_unknown", "scope", "sum", "used", "window_seconds"]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ON_EXCEED_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    RESERVED_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SUM_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    action_type: str
    budget: str
    limit: int
    on_exceed: str
    operations: int
    reserved_unknown: int
    scope: str
    sum: str
    used: int
    window_seconds: int
    def __init__(self, action_type: _Optional[str] = ..., budget: _Optional[str] = ..., scope: _Optional[str] = ..., limit: _Optional[int] = ..., window_seconds: _Optional[int] = ..., used: _Optional[int] = ..., reserved_unknown: _Optional[int] = ..., operations: _Optional[int] = ..., on_exceed: _Optional[str] = ..., sum: _Optional[str] = ...) -> None: ...

class ClaimOptions(_message.Message):
    __slots__ = ["lease_seconds", "worker_id"]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    lease_seconds: int
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ["lease_seconds", "operation_key", "view", "worker_id"]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    lease_seconds: int
    operation_key: str
    view: OperationView
    worker_id: str
    def __init__(self, operation_key: _Optional[str] = ..., worker_id: _Optional[str] = ..., lease_seconds: _Optional[int] = ..., view: _Optional[_Union[OperationView, str]] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ["attempt", "claimed", "lease_seconds", "lease_until", "next", "operation", "retry_after_seconds"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    claimed: bool
    lease_seconds: int
    lease_until: _timestamp_pb2.Timestamp
    next: NextStep
    operation: Operation
    retry_after_seconds: int
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., claimed: bool = ..., attempt: _Optional[int] = ..., lease_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., retry_after_seconds: _Optional[int] = ..., next: _Optional[_Union[NextStep, str]] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class EscalateRequest(_message.Message):
    __slots__ = ["actor", "operation_key", "reason"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    actor: str
    operation_key: str
    reason: str
    def __init__(self, operation_key: _Optional[str] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class EscalateResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["actor", "actor_label", "at", "attempt", "external_id", "from_status", "id", "reason", "stated_actor", "to_status"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTOR_LABEL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_STATUS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATED_ACTOR_FIELD_NUMBER: _ClassVar[int]
    TO_STATUS_FIELD_NUMBER: _ClassVar[int]
    actor: str
    actor_label: str
    at: _timestamp_pb2.Timestamp
    attempt: int
    external_id: str
    from_status: Status
    id: int
    reason: str
    stated_actor: str
    to_status: Status
    def __init__(self, id: _Optional[int] = ..., at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., from_status: _Optional[_Union[Status, str]] = ..., to_status: _Optional[_Union[Status, str]] = ..., attempt: _Optional[int] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ..., external_id: _Optional[str] = ..., stated_actor: _Optional[str] = ..., actor_label: _Optional[str] = ...) -> None: ...

class ExtendLeaseRequest(_message.Message):
    __slots__ = ["attempt", "lease_seconds", "operation_key", "view"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    lease_seconds: int
    operation_key: str
    view: OperationView
    def __init__(self, operation_key: _Optional[str] = ..., attempt: _Optional[int] = ..., lease_seconds: _Optional[int] = ..., view: _Optional[_Union[OperationView, str]] = ...) -> None: ...

class ExtendLeaseResponse(_message.Message):
    __slots__ = ["lease_seconds", "lease_until", "operation"]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    lease_seconds: int
    lease_until: _timestamp_pb2.Timestamp
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., lease_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetPolicyResponse(_message.Message):
    __slots__ = ["fingerprint", "source"]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    fingerprint: str
    source: str
    def __init__(self, fingerprint: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class ListBudgetsRequest(_message.Message):
    __slots__ = ["action_type", "budget"]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    action_type: str
    budget: str
    def __init__(self, action_type: _Optional[str] = ..., budget: _Optional[str] = ...) -> None: ...

class ListBudgetsResponse(_message.Message):
    __slots__ = ["budgets"]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    budgets: _containers.RepeatedCompositeFieldContainer[BudgetUsage]
    def __init__(self, budgets: _Optional[_Iterable[_Union[BudgetUsage, _Mapping]]] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ["operation_key", "page_size", "page_token"]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operation_key: str
    page_size: int
    page_token: str
    def __init__(self, operation_key: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ["events", "next_page_token"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ["action_type", "due_for_check", "needs_review", "page_size", "page_token", "parent_key", "refs", "statuses", "view"]
    class RefsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    DUE_FOR_CHECK_FIELD_NUMBER: _ClassVar[int]
    NEEDS_REVIEW_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PARENT_KEY_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    action_type: str
    due_for_check: bool
    needs_review: bool
    page_size: int
    page_token: str
    parent_key: str
    refs: _containers.ScalarMap[str, str]
    statuses: _containers.RepeatedScalarFieldContainer[Status]
    view: OperationView
    def __init__(self, statuses: _Optional[_Iterable[_Union[Status, str]]] = ..., needs_review: bool = ..., action_type: _Optional[str] = ..., due_for_check: bool = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., view: _Optional[_Union[OperationView, str]] = ..., refs: _Optional[_Mapping[str, str]] = ..., parent_key: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ["next_page_token", "operations"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ["operation_key", "view", "wait_seconds"]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    operation_key: str
    view: OperationView
    wait_seconds: int
    def __init__(self, operation_key: _Optional[str] = ..., view: _Optional[_Union[OperationView, str]] = ..., wait_seconds: _Optional[int] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class MarkFailedFinalRequest(_message.Message):
    __slots__ = ["attempt", "error_code", "operation_key", "result", "view"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    error_code: str
    operation_key: str
    result: _struct_pb2.Struct
    view: OperationView
    def __init__(self, operation_key: _Optional[str] = ..., attempt: _Optional[int] = ..., error_code: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., view: _Optional[_Union[OperationView, str]] = ...) -> None: ...

class MarkFailedFinalResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class MarkSucceededRequest(_message.Message):
    __slots__ = ["actor", "attempt", "external_id", "operation_key", "result", "view"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    actor: str
    attempt: int
    external_id: str
    operation_key: str
    result: _struct_pb2.Struct
    view: OperationView
    def __init__(self, operation_key: _Optional[str] = ..., attempt: _Optional[int] = ..., external_id: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., actor: _Optional[str] = ..., view: _Optional[_Union[OperationView, str]] = ...) -> None: ...

class MarkSucceededResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class MarkUnknownRequest(_message.Message):
    __slots__ = ["attempt", "error_code", "operation_key", "view"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    error_code: str
    operation_key: str
    view: OperationView
    def __init__(self, operation_key: _Optional[str] = ..., attempt: _Optional[int] = ..., error_code: _Optional[str] = ..., view: _Optional[_Union[OperationView, str]] = ...) -> None: ...

class MarkUnknownResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ["action_type", "approval", "attempt_count", "attempt_started_at", "budgets", "check_count", "created_at", "duplicate_external_id", "duplicate_external_ids", "duplicate_reports", "error_code", "external_id", "first_attempt_at", "last_checked_at", "lease_owner", "lease_until", "needs_review", "next_check_at", "note", "operation_key", "parent_key", "payload", "refs", "request_hash", "result", "review_reason", "status", "unknown_since", "updated_at"]
    class RefsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_COUNT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    CHECK_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_EXTERNAL_IDS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_REPORTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKED_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    NEEDS_REVIEW_FIELD_NUMBER: _ClassVar[int]
    NEXT_CHECK_AT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    PARENT_KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REVIEW_REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_SINCE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    action_type: str
    approval: Approval
    attempt_count: int
    attempt_started_at: _timestamp_pb2.Timestamp
    budgets: _containers.RepeatedCompositeFieldContainer[BudgetHold]
    check_count: int
    created_at: _timestamp_pb2.Timestamp
    duplicate_external_id: str
    duplicate_external_ids: _containers.RepeatedScalarFieldContainer[str]
    duplicate_reports: int
    error_code: str
    external_id: str
    first_attempt_at: _timestamp_pb2.Timestamp
    last_checked_at: _timestamp_pb2.Timestamp
    lease_owner: str
    lease_until: _timestamp_pb2.Timestamp
    needs_review: bool
    next_check_at: _timestamp_pb2.Timestamp
    note: str
    operation_key: str
    parent_key: str
    payload: _struct_pb2.Struct
    refs: _containers.ScalarMap[str, str]
    request_hash: str
    result: _struct_pb2.Struct
    review_reason: str
    status: Status
    unknown_since: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, operation_key: _Optional[str] = ..., action_type: _Optional[str] = ..., request_hash: _Optional[str] = ..., status: _Optional[_Union[Status, str]] = ..., attempt_count: _Optional[int] = ..., external_id: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error_code: _Optional[str] = ..., lease_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., needs_review: bool = ..., review_reason: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., lease_owner: _Optional[str] = ..., duplicate_external_id: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., unknown_since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., check_count: _Optional[int] = ..., last_checked_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., next_check_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., duplicate_external_ids: _Optional[_Iterable[str]] = ..., duplicate_reports: _Optional[int] = ..., attempt_started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., refs: _Optional[_Mapping[str, str]] = ..., parent_key: _Optional[str] = ..., first_attempt_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., note: _Optional[str] = ..., approval: _Optional[_Union[Approval, _Mapping]] = ..., budgets: _Optional[_Iterable[_Union[BudgetHold, _Mapping]]] = ...) -> None: ...

class RecordCheckRequest(_message.Message):
    __slots__ = ["actor", "attempt", "next_check_after_seconds", "note", "operation_key"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NEXT_CHECK_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    actor: str
    attempt: int
    next_check_after_seconds: int
    note: str
    operation_key: str
    def __init__(self, operation_key: _Optional[str] = ..., attempt: _Optional[int] = ..., actor: _Optional[str] = ..., note: _Optional[str] = ..., next_check_after_seconds: _Optional[int] = ...) -> None: ...

class RecordCheckResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ["action_type", "claim", "operation_key", "parent_key", "payload", "refs", "view"]
    class RefsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    PARENT_KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    action_type: str
    claim: ClaimOptions
    operation_key: str
    parent_key: str
    payload: _struct_pb2.Struct
    refs: _containers.ScalarMap[str, str]
    view: OperationView
    def __init__(self, operation_key: _Optional[str] = ..., action_type: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., claim: _Optional[_Union[ClaimOptions, _Mapping]] = ..., refs: _Optional[_Mapping[str, str]] = ..., parent_key: _Optional[str] = ..., view: _Optional[_Union[OperationView, str]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ["attempt", "claimed", "created", "lease_seconds", "lease_until", "next", "operation", "retry_after_seconds"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_UNTIL_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    claimed: bool
    created: bool
    lease_seconds: int
    lease_until: _timestamp_pb2.Timestamp
    next: NextStep
    operation: Operation
    retry_after_seconds: int
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., created: bool = ..., claimed: bool = ..., attempt: _Optional[int] = ..., lease_until: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., retry_after_seconds: _Optional[int] = ..., next: _Optional[_Union[NextStep, str]] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class RejectRequest(_message.Message):
    __slots__ = ["actor", "error_code", "operation_key", "reason", "request_hash"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    actor: str
    error_code: str
    operation_key: str
    reason: str
    request_hash: str
    def __init__(self, operation_key: _Optional[str] = ..., request_hash: _Optional[str] = ..., reason: _Optional[str] = ..., error_code: _Optional[str] = ..., actor: _Optional[str] = ...) -> None: ...

class RejectResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class ReleaseForRetryRequest(_message.Message):
    __slots__ = ["actor", "attempt", "operation_key", "reason"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    actor: str
    attempt: int
    operation_key: str
    reason: str
    def __init__(self, operation_key: _Optional[str] = ..., attempt: _Optional[int] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseForRetryResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ["actor", "error_code", "external_id", "operation_key", "reason", "resolution", "result"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    actor: str
    error_code: str
    external_id: str
    operation_key: str
    reason: str
    resolution: Resolution
    result: _struct_pb2.Struct
    def __init__(self, operation_key: _Optional[str] = ..., resolution: _Optional[_Union[Resolution, str]] = ..., external_id: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error_code: _Optional[str] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResolveResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class SetNoteRequest(_message.Message):
    __slots__ = ["actor", "note", "operation_key"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_KEY_FIELD_NUMBER: _ClassVar[int]
    actor: str
    note: str
    operation_key: str
    def __init__(self, operation_key: _Optional[str] = ..., note: _Optional[str] = ..., actor: _Optional[str] = ...) -> None: ...

class SetNoteResponse(_message.Message):
    __slots__ = ["operation"]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ["authenticated", "expires_at", "name", "principal_id", "roles", "tenant"]
    AUTHENTICATED_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    authenticated: bool
    expires_at: _timestamp_pb2.Timestamp
    name: str
    principal_id: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    tenant: str
    def __init__(self, authenticated: bool = ..., principal_id: _Optional[str] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class OperationView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class NextStep(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Resolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
