package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// ClassifyHTTP classifies a provider's HTTP answer (the results of
// http.Client.Do) for Execute:
//
//   - err != nil (a timeout, a reset connection, an EOF): *UnknownError.
//     The request may have reached the provider and taken effect.
//   - 2xx: nil, a success.
//   - 408, 425, 429 and every 5xx: *UnknownError. The provider (or a proxy in
//     front of it) gave no definite answer; a 5xx may come after the effect.
//   - 409: *UnknownError. An idempotent provider answers 409 when a request
//     with the same Idempotency-Key is still being processed: the effect is
//     under way, not rejected.
//   - any other 4xx: Rejected("http_<status>"), a confirmed rejection.
//   - 1xx and 3xx: *UnknownError; a final answer was expected.
//
// ClassifyHTTP does not read or close resp.Body. If a provider documents
// other statuses as definite (or as not definite), classify them yourself
// before calling it.
func ClassifyHTTP(resp *http.Response, err error) error {
	if err != nil {
		return &UnknownError{Code: unknownCode(err), Err: err}
	}
	if resp == nil {
		return &UnknownError{Code: "no_response", Err: errors.New("no HTTP response")}
	}
	sc := resp.StatusCode
	code := fmt.Sprintf("http_%d", sc)
	cause := fmt.Errorf("provider answered %s", resp.Status)
	if resp.Status == "" {
		cause = fmt.Errorf("provider answered %d", sc)
	}
	switch {
	case sc >= 200 && sc <= 299:
		return nil
	case sc == http.StatusRequestTimeout, sc == http.StatusConflict, sc == http.StatusTooEarly, sc == http.StatusTooManyRequests:
		return &UnknownError{Code: code, Err: cause}
	case sc >= 400 && sc <= 499:
		return Rejected(code, cause)
	default: // 1xx, 3xx, 5xx and nonsense
		return &UnknownError{Code: code, Err: cause}
	}
}

// unknownCode names an error that leaves the outcome unknown: "timeout",
// "canceled", the code of an *UnknownError, "transport_error" for another
// network error, else "error".
func unknownCode(err error) string {
	var ue *UnknownError
	var ne net.Error
	switch {
	case errors.As(err, &ue) && ue.Code != "":
		return ue.Code
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &ne):
		return "transport_error"
	}
	return "error"
}

// classify decides how fn's error is recorded: a *RejectedError (and no
// *UnknownError, which is the safer reading) is final; anything else is
// unknown.
func classify(err error) (final bool, code string) {
	var ue *UnknownError
	var re *RejectedError
	if errors.As(err, &re) && !errors.As(err, &ue) {
		return true, sanitizeCode(re.Code, "rejected")
	}
	return false, sanitizeCode(unknownCode(err), "error")
}
