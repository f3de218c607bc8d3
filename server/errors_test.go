package server

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal"
)

func TestEveryCodeHasOneMapping(t *testing.T) {
	t.Parallel()
	want := map[opjournal.Code]struct {
		grpc codes.Code
		http int
	}{
		opjournal.CodeInvalidArgument:  {codes.InvalidArgument, 400},
		opjournal.CodeUnknownAction:    {codes.InvalidArgument, 400},
		opjournal.CodeTooLarge:         {codes.InvalidArgument, 413},
		opjournal.CodePayloadMismatch:  {codes.AlreadyExists, 422},
		opjournal.CodeStaleAttempt:     {codes.FailedPrecondition, 409},
		opjournal.CodeInvalidState:     {codes.FailedPrecondition, 409},
		opjournal.CodeNotFound:         {codes.NotFound, 404},
		opjournal.CodeUnauthenticated:  {codes.Unauthenticated, 401},
		opjournal.CodePermissionDenied: {codes.PermissionDenied, 403},
		opjournal.CodeRateLimited:      {codes.ResourceExhausted, 429},
		opjournal.CodeBudgetExceeded:   {codes.ResourceExhausted, 429},
		opjournal.CodeUnavailable:      {codes.Unavailable, 503},
		opjournal.CodeInternal:         {codes.Internal, 500},
	}
	if len(statusOf) != len(want) {
		t.Fatalf("the table maps %d codes, want %d", len(statusOf), len(want))
	}
	for code, w := range want {
		// Wrapped, as the service returns them.
		err := grpcError(fmt.Errorf("claim %q: %w", "k", opjournal.Errorf(code, "operation_key", "detail")))
		st := status.Convert(err)
		if st.Code() != w.grpc || codeOf(err) != code || HTTPStatus(code) != w.http {
			t.Errorf("%s: grpc %s (want %s), CodeOf %q, http %d (want %d)", code, st.Code(), w.grpc, codeOf(err), HTTPStatus(code), w.http)
		}
		if st.Message() != "operation_key: detail" {
			t.Errorf("%s: message %q", code, st.Message())
		}
	}
}

func TestInternalCausesStayInside(t *testing.T) {
	t.Parallel()
	err := grpcError(errors.New("pq: password=hunter2 connection refused"))
	st := status.Convert(err)
	if st.Code() != codes.Internal || codeOf(err) != opjournal.CodeInternal || st.Message() != "internal error" {
		t.Fatalf("plain error became %v", st)
	}
	if HTTPStatus("NO_SUCH_CODE") != http.StatusInternalServerError {
		t.Fatal("unknown code must map to 500")
	}
}
