package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/opjournal/opjournal/client"
)

const (
	success  = "success"
	unknown  = "unknown"
	rejected = "rejected"
)

func TestClassifyHTTP(t *testing.T) {
	t.Parallel()
	statuses := map[int]string{
		100: unknown, 101: unknown,
		200: success, 201: success, 202: success, 204: success, 299: success,
		300: unknown, 301: unknown, 302: unknown, 304: unknown, 307: unknown,
		400: rejected, 401: rejected, 402: rejected, 403: rejected, 404: rejected, 405: rejected,
		410: rejected, 413: rejected, 415: rejected, 422: rejected, 451: rejected, 499: rejected,
		408: unknown, 409: unknown, 425: unknown, 429: unknown,
		500: unknown, 501: unknown, 502: unknown, 503: unknown, 504: unknown, 599: unknown,
	}
	for sc, want := range statuses {
		resp := &http.Response{StatusCode: sc, Status: fmt.Sprintf("%d %s", sc, http.StatusText(sc))}
		check(t, fmt.Sprint(sc), client.ClassifyHTTP(resp, nil), want, fmt.Sprintf("http_%d", sc))
	}

	timeout := &url.Error{Op: "Post", URL: "https://psp.example/payments", Err: &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}}
	reset := &url.Error{Op: "Post", URL: "https://psp.example/payments", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}
	eof := &url.Error{Op: "Post", URL: "https://psp.example/payments", Err: io.EOF}
	canceled := &url.Error{Op: "Post", URL: "https://psp.example/payments", Err: context.Canceled}
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		{"client timeout", timeout, "timeout"},
		{"context deadline", fmt.Errorf("do: %w", context.DeadlineExceeded), "timeout"},
		{"connection reset", reset, "transport_error"},
		{"EOF", eof, "transport_error"},
		{"canceled", canceled, "canceled"},
		{"bare error", errors.New("odd"), "error"},
	} {
		got := client.ClassifyHTTP(nil, tc.err)
		check(t, tc.name, got, unknown, tc.code)
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: %v does not wrap the cause", tc.name, got)
		}
	}
	check(t, "no response", client.ClassifyHTTP(nil, nil), unknown, "no_response")
}

func check(t *testing.T, name string, err error, want, code string) {
	t.Helper()
	var ue *client.UnknownError
	var re *client.RejectedError
	switch {
	case want == success:
		if err != nil {
			t.Errorf("%s: %v, want success", name, err)
		}
	case want == unknown:
		if !errors.As(err, &ue) || ue.Code != code {
			t.Errorf("%s: %#v, want *UnknownError %q", name, err, code)
		}
	case want == rejected:
		if !errors.As(err, &re) || re.Code != code {
			t.Errorf("%s: %#v, want *RejectedError %q", name, err, code)
		}
	}
}
