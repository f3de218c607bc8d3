// opjournal's TypeScript client: the Journal RPCs, execute (the whole
// protocol in one call), the idempotent tool wrapper and HTTP outcome
// classification. See README.md for a quick start.

export {
  Journal,
  defaultWorkerId,
  type CallOptions,
  type ClaimParams,
  type ClaimResult,
  type JournalOptions,
  type JournalTlsOptions,
  type MarkParams,
  type MarkSucceededParams,
  type Operation,
  type RegisterParams,
  type RegisterResult,
  type Status,
} from "./journal.js";
export {
  execute,
  idempotent,
  RECORD_TIMEOUT_MS,
  type AttemptContext,
  type AttemptFn,
  type Conflict,
  type Effect,
  type ExecuteOptions,
  type FailedFinal,
  type IdempotentSpec,
  type InProgressElsewhere,
  type Op,
  type Outcome,
  type Succeeded,
  type VerificationRequired,
} from "./execute.js";
export { classifyError, classifyHttp, sanitizeCode, unknownCode, type HttpAnswer } from "./classify.js";
export {
  ERROR_DOMAIN,
  HttpStatusError,
  NotRecordedError,
  OpjournalError,
  Rejected,
  UnknownOutcomeError,
  decodeErrorInfo,
  type ErrorCode,
  type ErrorInfo,
  type ObservedKind,
} from "./errors.js";
export { encodeObject, type JsonObject, type JsonValue } from "./json.js";
/** The generated messages and JournalService descriptor (protoc-gen-es). */
export * as pb from "./gen/opjournal/v1/journal_pb.js";
