package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestExplainTLSMismatch(t *testing.T) {
	t.Parallel()
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsSrv.Close()
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	tlsAddr, plainAddr := tlsSrv.Listener.Addr().String(), plain.Listener.Addr().String()
	fix := TLSFix{Give: "give --tls-ca", Drop: "drop --tls-ca"}
	ctx := context.Background()
	preface := status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`)

	err := ExplainTLSMismatch(ctx, tlsAddr, false, fix, preface)
	if status.Code(err) != codes.Unavailable || !strings.HasPrefix(status.Convert(err).Message(), "the journal at "+tlsAddr+" speaks TLS: give --tls-ca (") {
		t.Fatalf("plain text to TLS: %v", err)
	}
	// The same failure from a server that does not speak TLS is not a mismatch.
	if err := ExplainTLSMismatch(ctx, plainAddr, false, fix, preface); err != preface {
		t.Fatalf("plain text to plain text: %v", err)
	}
	notTLS := status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`)
	err = ExplainTLSMismatch(ctx, plainAddr, true, fix, notTLS)
	if !strings.HasPrefix(status.Convert(err).Message(), "the journal at "+plainAddr+" does not speak TLS: drop --tls-ca (") {
		t.Fatalf("TLS to plain text: %v", err)
	}
	// Other errors pass through untouched.
	for _, e := range []error{nil, status.Error(codes.NotFound, "no"), status.Error(codes.Unavailable, "connect: connection refused")} {
		if got := ExplainTLSMismatch(ctx, tlsAddr, false, fix, e); got != e {
			t.Errorf("%v became %v", e, got)
		}
	}
}
