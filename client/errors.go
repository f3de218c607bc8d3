package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal"
)

// Sentinels for Outcome.Err, usable with errors.Is. Each names an outcome
// in which fn was not (or could not safely be) completed.
var (
	// ErrConflict: the key is registered with other parameters. Nothing was
	// called and nothing changed; a new intent needs a new key.
	ErrConflict = errors.New("opjournal: operation key is registered with other parameters")
	// ErrInProgressElsewhere: another worker holds a live lease on the
	// operation; ask again after Outcome.RetryAfter.
	ErrInProgressElsewhere = errors.New("opjournal: operation is in progress elsewhere")
	// ErrVerificationRequired: the outcome is unknown (the effect may have
	// happened); reconciliation or a person must settle it before any retry.
	ErrVerificationRequired = errors.New("opjournal: operation outcome is unknown; verification required before any retry")
	// ErrFailedFinal: the provider confirmed a rejection (or a person
	// rejected the request); no automatic retry.
	ErrFailedFinal = errors.New("opjournal: operation failed finally")
	// ErrAwaitingApproval: a person must approve the request before it
	// runs, and has not yet; ask again after Outcome.RetryAfter.
	ErrAwaitingApproval = errors.New("opjournal: operation awaits a person's approval")
	// ErrBudgetExceeded: the operation would pass one of its action's
	// budgets whose on_exceed is reject; nothing was registered or called.
	ErrBudgetExceeded = errors.New("opjournal: operation would pass a budget")
)

// RejectedError is a provider's confirmed rejection: proof that no effect
// happened (a validation error, a declined card). Execute records it as
// failed_final, which no retry of the same key will call again. Create one
// with Rejected.
type RejectedError struct {
	// Code is recorded as the operation's error_code, e.g. "card_declined"
	// or "http_400". No secrets.
	Code string
	// Err is the provider's error, for logs; it is not recorded.
	Err error
	// Refusal, if set, is the refusal as the provider gave it (anything
	// that encodes as a JSON object): stored with the operation (redacted
	// like a result) and returned as Outcome.Result on every replay, so
	// that a retry sees the same answer. No secrets.
	Refusal any
}

// Rejected wraps cause as a confirmed rejection with the given code. Return
// it from Execute's fn ONLY when the provider proved that nothing happened;
// when in doubt return the plain error, which Execute treats as unknown.
func Rejected(code string, cause error) error {
	return &RejectedError{Code: code, Err: cause}
}

// RejectedWith is Rejected that also stores the provider's refusal (see
// RejectedError.Refusal), e.g. the HTTP status and body of a 4xx.
func RejectedWith(code string, refusal any, cause error) error {
	return &RejectedError{Code: code, Err: cause, Refusal: refusal}
}

// Error returns "rejected (code): cause".
func (e *RejectedError) Error() string {
	if e.Err == nil {
		return "rejected (" + e.Code + ")"
	}
	return "rejected (" + e.Code + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *RejectedError) Unwrap() error { return e.Err }

// UnknownError is an attempt without a definite answer: a timeout, a
// dropped connection, a 5xx, a 409 or 429. The effect may have happened.
// Execute records any error that is not a RejectedError as unknown;
// UnknownError only names the observation (Code) and wins over a
// RejectedError deeper in the chain.
type UnknownError struct {
	// Code is recorded as the operation's error_code, e.g. "timeout" or
	// "http_503". No secrets.
	Code string
	// Err is what was observed, for logs; it is not recorded.
	Err error
}

// Error returns "outcome unknown (code): cause".
func (e *UnknownError) Error() string {
	if e.Err == nil {
		return "outcome unknown (" + e.Code + ")"
	}
	return "outcome unknown (" + e.Code + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *UnknownError) Unwrap() error { return e.Err }

// NotRecordedError means fn ran but the journal could not record its
// outcome (unreachable, or it refused the request). The operation keeps its
// lease until it expires, then shows as unknown and goes to reconciliation:
// that is the journal's safety net. A success the journal has not recorded
// is never reported as an Outcome.
type NotRecordedError struct {
	// Key and Attempt name the attempt whose outcome was lost.
	Key     string
	Attempt int
	// Observed is what fn's outcome would have recorded: Succeeded,
	// FailedFinal or VerificationRequired.
	Observed OutcomeKind
	// ExternalID is the provider's identifier when Observed is Succeeded.
	ExternalID string
	// Err is the journal's error.
	Err error
}

// Error explains what was lost and what happens next.
func (e *NotRecordedError) Error() string {
	what := e.Observed.String()
	if e.ExternalID != "" {
		what += fmt.Sprintf(", external_id %q", e.ExternalID)
	}
	return fmt.Sprintf("opjournal: the outcome of operation %q attempt %d (%s) could not be recorded in the journal: %v; "+
		"the journal will show the operation as unknown once its lease expires, so that it is verified rather than retried blindly",
		e.Key, e.Attempt, what, e.Err)
}

// Unwrap returns the journal's error.
func (e *NotRecordedError) Unwrap() error { return e.Err }

// journalError converts an error of a JournalService call into an
// *opjournal.Error, so that errors.Is(err, opjournal.ErrUnknownAction) and
// opjournal.ErrorCode(err) work on the client as on the server; the gRPC
// status stays in the chain (status.Code(err) works). A call ended by the
// caller's context wraps ctx.Err() instead.
func journalError(ctx context.Context, what, key string, err error) error {
	st, _ := status.FromError(err)
	if cerr := ctx.Err(); cerr != nil && (st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded) {
		return fmt.Errorf("opjournal: %s %q: %w: %w", what, key, cerr, err)
	}
	e := &opjournal.Error{Code: opjournal.CodeInternal, Message: st.Message()}
	if info := errorInfo(st); info != nil {
		e.Code = opjournal.Code(info.GetReason())
		e.Field = info.GetMetadata()["field"]
		e.Message = strings.TrimPrefix(e.Message, e.Field+": ")
		for k, v := range info.GetMetadata() {
			if k != "field" {
				if e.Details == nil {
					e.Details = map[string]string{}
				}
				e.Details[k] = v
			}
		}
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				e.RetryAfter = ri.GetRetryDelay().AsDuration()
			}
		}
	} else {
		switch st.Code() {
		case codes.Unavailable:
			e.Code, e.Message = opjournal.CodeUnavailable, "journal unreachable: "+st.Message()
		case codes.DeadlineExceeded:
			e.Code, e.Message = opjournal.CodeUnavailable, "journal did not answer in time: "+st.Message()
		default:
			e.Message = fmt.Sprintf("%s: %s", st.Code(), st.Message())
		}
	}
	return &callError{prefix: fmt.Sprintf("opjournal: %s %q: ", what, key), journal: e, status: err}
}

// callError reads as its *opjournal.Error and also unwraps to the gRPC
// status error, without repeating the status's text.
type callError struct {
	prefix  string
	journal *opjournal.Error
	status  error
}

func (e *callError) Error() string   { return e.prefix + e.journal.Error() }
func (e *callError) Unwrap() []error { return []error{e.journal, e.status} }

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "opjournal" {
			return info
		}
	}
	return nil
}

// CodeOf returns the opjournal error code a JournalService call's error
// carries (its google.rpc.ErrorInfo in the "opjournal" domain, or the
// *opjournal.Error of this package's calls), or "" if it carries none.
func CodeOf(err error) opjournal.Code {
	if c := codeOf(err); c != "" {
		return c
	}
	if st, ok := status.FromError(err); ok {
		if info := errorInfo(st); info != nil {
			return opjournal.Code(info.GetReason())
		}
	}
	return ""
}

// codeOf returns the opjournal code of a journal call's error ("" if none).
func codeOf(err error) opjournal.Code {
	var e *opjournal.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// maxErrorCode is the journal's limit on error_code (bytes of UTF-8).
const maxErrorCode = 100

// sanitizeCode makes code acceptable to the journal (≤ 100 bytes of UTF-8,
// no control characters), so a rejection is never lost to a malformed code.
func sanitizeCode(code, fallback string) string {
	if code == "" {
		return fallback
	}
	code = strings.ToValidUTF8(code, "?")
	code = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, code)
	for len(code) > maxErrorCode {
		_, n := utf8.DecodeLastRuneInString(code)
		code = code[:len(code)-n]
	}
	return code
}
