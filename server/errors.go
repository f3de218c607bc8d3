package server

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opjournal/opjournal"
)

// ErrorDomain is the ErrorInfo domain of opjournal's errors.
const ErrorDomain = "opjournal"

// statusOf is THE table: every opjournal error code maps to exactly one gRPC
// code and one HTTP status, for both transports.
var statusOf = map[opjournal.Code]struct {
	grpc codes.Code
	http int
}{
	opjournal.CodeInvalidArgument:  {codes.InvalidArgument, http.StatusBadRequest},
	opjournal.CodeUnknownAction:    {codes.InvalidArgument, http.StatusBadRequest},
	opjournal.CodeTooLarge:         {codes.InvalidArgument, http.StatusRequestEntityTooLarge},
	opjournal.CodePayloadMismatch:  {codes.AlreadyExists, http.StatusUnprocessableEntity},
	opjournal.CodeStaleAttempt:     {codes.FailedPrecondition, http.StatusConflict},
	opjournal.CodeInvalidState:     {codes.FailedPrecondition, http.StatusConflict},
	opjournal.CodeNotFound:         {codes.NotFound, http.StatusNotFound},
	opjournal.CodeUnauthenticated:  {codes.Unauthenticated, http.StatusUnauthorized},
	opjournal.CodePermissionDenied: {codes.PermissionDenied, http.StatusForbidden},
	opjournal.CodeRateLimited:      {codes.ResourceExhausted, http.StatusTooManyRequests},
	opjournal.CodeBudgetExceeded:   {codes.ResourceExhausted, http.StatusTooManyRequests},
	opjournal.CodeUnavailable:      {codes.Unavailable, http.StatusServiceUnavailable},
	opjournal.CodeInternal:         {codes.Internal, http.StatusInternalServerError},
}

// HTTPStatus returns the HTTP status of an opjournal error code (500 for an
// unknown code).
func HTTPStatus(c opjournal.Code) int {
	if s, ok := statusOf[c]; ok {
		return s.http
	}
	return http.StatusInternalServerError
}

// grpcError converts err to a gRPC status carrying an ErrorInfo whose
// reason is the opjournal code and whose metadata names the field. Internal
// causes are not sent to the client (they may hold details of the
// database); the caller logs them.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if opjournal.ErrorCode(err) != opjournal.CodeUnavailable {
			return status.FromContextError(err).Err()
		}
	}
	var e *opjournal.Error
	if !errors.As(err, &e) {
		e = &opjournal.Error{Code: opjournal.CodeInternal, Message: "internal error", Err: err}
	}
	m, ok := statusOf[e.Code]
	if !ok {
		m = statusOf[opjournal.CodeInternal]
	}
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	info := &errdetails.ErrorInfo{Reason: string(e.Code), Domain: ErrorDomain}
	if e.Field != "" || len(e.Details) > 0 {
		info.Metadata = make(map[string]string, len(e.Details)+1)
		for k, v := range e.Details {
			info.Metadata[k] = v
		}
		if e.Field != "" {
			info.Metadata["field"] = e.Field
		}
	}
	details := []protoadapt.MessageV1{info}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	st, derr := status.New(m.grpc, msg).WithDetails(details...)
	if derr != nil {
		return status.Error(m.grpc, msg)
	}
	return st.Err()
}

// detailsOf is an ErrorInfo's metadata without the field: the details a
// REST error body carries (nil for none).
func detailsOf(md map[string]string) map[string]string {
	var out map[string]string
	for k, v := range md {
		if k == "field" {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(md))
		}
		out[k] = v
	}
	return out
}

// codeOf returns the opjournal code carried by a gRPC status error (from its
// ErrorInfo), or "" if it carries none.
func codeOf(err error) opjournal.Code {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			return opjournal.Code(info.Reason)
		}
	}
	return ""
}

// HTTPStatuses returns a copy of the table's HTTP side: every opjournal error
// code and its HTTP status. The OpenAPI generator (internal/cmd/openapi3)
// derives the error responses it documents from it.
func HTTPStatuses() map[opjournal.Code]int {
	m := make(map[opjournal.Code]int, len(statusOf))
	for c, s := range statusOf {
		m[c] = s.http
	}
	return m
}
