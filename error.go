package opjournal

import (
	"errors"
	"fmt"
	"time"
)

// Code classifies an Error. Transports map each code to one gRPC and one HTTP
// status in a single table (server/errors.go).
type Code string

// The error codes clients see.
const (
	// CodeInvalidArgument: a missing, malformed or out-of-range field.
	CodeInvalidArgument Code = "INVALID_ARGUMENT"
	// CodeUnknownAction: the action type has no policy.
	CodeUnknownAction Code = "UNKNOWN_ACTION"
	// CodeTooLarge: a payload, result or request body over its limit.
	CodeTooLarge Code = "TOO_LARGE"
	// CodePayloadMismatch: the key exists with another request hash.
	CodePayloadMismatch Code = "PAYLOAD_MISMATCH"
	// CodeStaleAttempt: the caller no longer holds the lease it names.
	CodeStaleAttempt Code = "STALE_ATTEMPT"
	// CodeInvalidState: the operation is not in a state that allows the
	// transition (e.g. Resolve of a pending operation, a release before
	// the policy's visibility lag).
	CodeInvalidState Code = "INVALID_STATE"
	// CodeNotFound: no operation with that key.
	CodeNotFound Code = "NOT_FOUND"
	// CodeUnauthenticated: no valid bearer token.
	CodeUnauthenticated Code = "UNAUTHENTICATED"
	// CodePermissionDenied: the token's roles do not allow the call.
	CodePermissionDenied Code = "PERMISSION_DENIED"
	// CodeRateLimited: the tenant's request rate is over its limit; retry later.
	CodeRateLimited Code = "RATE_LIMITED"
	// CodeBudgetExceeded: the registration would pass a budget of the
	// action whose on_exceed is reject; nothing was registered. Details
	// name the budget, its limit and what is used; RetryAfter is when
	// enough frees up (0 when the amount alone is over the limit).
	CodeBudgetExceeded Code = "BUDGET_EXCEEDED"
	// CodeUnavailable: the store cannot be reached; safe to retry the call.
	CodeUnavailable Code = "UNAVAILABLE"
	// CodeInternal: a bug or an unexpected store failure.
	CodeInternal Code = "INTERNAL"
)

// Error is the error type of every opjournal layer. Field names the request
// field at fault ("payload/amount_minor"), if any. Message never contains
// payload values, tokens or other secrets.
type Error struct {
	Code    Code
	Field   string
	Message string
	Err     error // cause, for logs and errors.Is; not shown to clients
	// Details are facts for programs about the refusal (a budget's name,
	// limit and use), sent to clients beside Field: never a payload
	// value or a secret.
	Details map[string]string
	// RetryAfter is when the same request may succeed (0: no hint).
	RetryAfter time.Duration
}

// Error returns "CODE: field: message: cause". It is for logs and the
// command line; clients get only Field and Message (see server/errors.go),
// since a cause may describe the database.
func (e *Error) Error() string {
	s := string(e.Code) + ": "
	if e.Field != "" {
		s += e.Field + ": "
	}
	s += e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Code: c}) match any *Error with code c, so
// the sentinels below work with errors.Is.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Field == "" && t.Code == e.Code
}

// Sentinels for errors.Is(err, opjournal.ErrStaleAttempt) and friends.
var (
	ErrInvalidArgument = &Error{Code: CodeInvalidArgument}
	ErrUnknownAction   = &Error{Code: CodeUnknownAction}
	ErrTooLarge        = &Error{Code: CodeTooLarge}
	ErrPayloadMismatch = &Error{Code: CodePayloadMismatch}
	ErrStaleAttempt    = &Error{Code: CodeStaleAttempt}
	ErrInvalidState    = &Error{Code: CodeInvalidState}
	ErrNotFound        = &Error{Code: CodeNotFound}
	ErrUnavailable     = &Error{Code: CodeUnavailable}
	ErrInternal        = &Error{Code: CodeInternal}
	ErrBudgetExceeded  = &Error{Code: CodeBudgetExceeded}
)

// Errorf returns an *Error with the code, field and formatted message.
func Errorf(code Code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, CodeInternal
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
