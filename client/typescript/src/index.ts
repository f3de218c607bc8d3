// opjournal's TypeScript client: the Journal RPCs, execute (the whole
// protocol in one call, bounded by the journal's lease and kept alive by
// heartbeats), the idempotent tool wrapper, HTTP outcome classification,
// and the operation keys every SDK makes alike (newKey, childKey).
// See README.md for a quick start.

export {
  Journal,
  defaultWorkerId,
  type AnswerOptions,
  type Approval,
  type CallOptions,
  type ClaimParams,
  type ClaimResult,
  type EventPage,
  type ExtendLeaseResult,
  type JournalEvent,
  type JournalOptions,
  type JournalTlsOptions,
  type ListOperationsParams,
  type LookupOptions,
  type MarkParams,
  type MarkSucceededParams,
  type Operation,
  type OperationPage,
  type OperationView,
  type PageParams,
  type PolicyInfo,
  type RegisterParams,
  type RegisterResult,
  type Status,
} from "./journal.js";
export {
  decideNext,
  execute,
  heartbeatIntervalSeconds,
  idempotent,
  leaseSafetyMarginSeconds,
  LEASE_EXPIRED,
  RECORD_TIMEOUT_MS,
  type AttemptContext,
  type AttemptFn,
  type AwaitingApproval,
  type BudgetExceeded,
  type Conflict,
  type Decision,
  type Effect,
  type ExecuteOptions,
  type FailedFinal,
  type IdempotentSpec,
  type InProgressElsewhere,
  type NextAnswer,
  type Op,
  type Outcome,
  type Succeeded,
  type VerificationRequired,
} from "./execute.js";
export { childKey, KEY_PREFIX, newKey } from "./keys.js";
export { classifyError, classifyHttp, sanitizeCode, unknownCode, type HttpAnswer } from "./classify.js";
export {
  ERROR_DOMAIN,
  HttpStatusError,
  NotRecordedError,
  OpjournalError,
  Rejected,
  UnknownOutcomeError,
  decodeErrorInfo,
  decodeRetryInfo,
  type ErrorCode,
  type ErrorInfo,
  type ObservedKind,
} from "./errors.js";
export { encodeObject, type JsonObject, type JsonValue } from "./json.js";
/** The journal's decision on a register or claim answer (RegisterResult.next, ClaimResult.next). */
export { NextStep } from "./gen/opjournal/v1/journal_pb.js";
/** The protocol's limits and lease rules, shared by every SDK (generated from limits.go). */
export * as limits from "./limits.js";
/** The generated messages and JournalService descriptor (protoc-gen-es). */
export * as pb from "./gen/opjournal/v1/journal_pb.js";
