package client

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TLSFix says what the user of a client should change when it and the
// journal disagree about TLS, in the client's own terms (a flag, an
// option).
type TLSFix struct {
	// Give is the fix when the journal speaks TLS and the client does not,
	// e.g. "give --tls-ca (or OPJOURNAL_TLS_CA)".
	Give string
	// Drop is the fix when the client speaks TLS and the journal does not,
	// e.g. "drop --tls-ca".
	Drop string
}

// sdkFix is what the users of Dial are told.
var sdkFix = TLSFix{
	Give: "Dial is plain text: connect with TLS credentials (grpc.NewClient with credentials.NewTLS) and pass the connection to New",
	Drop: "connect without TLS credentials",
}

// probeTimeout bounds the TLS handshake that decides a mismatch.
const probeTimeout = 2 * time.Second

// WithTLSHint returns dial options under which a call that cannot reach
// the journal at target because one side speaks TLS and the other does
// not fails with an error that says so, and what to change, instead of
// gRPC's "error reading server preface: EOF" or "first record does not
// look like a TLS handshake". usingTLS says whether the connection has
// TLS credentials. The error stays UNAVAILABLE; its message is
//
//	the journal at TARGET speaks TLS: FIX.GIVE (…gRPC's message…)
//	the journal at TARGET does not speak TLS: FIX.DROP (…gRPC's message…)
func WithTLSHint(target string, usingTLS bool, fix TLSFix) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return ExplainTLSMismatch(ctx, target, usingTLS, fix, invoker(ctx, method, req, reply, cc, opts...))
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			return s, ExplainTLSMismatch(ctx, target, usingTLS, fix, err)
		}),
	}
}

// ExplainTLSMismatch returns err, unless err is a failure to connect to
// the journal at target caused by a TLS mismatch: then it returns an
// UNAVAILABLE status whose message says which side speaks TLS and what to
// change (see WithTLSHint). A plain-text client's failure is confirmed by
// a TLS handshake with the address (nothing is sent over it).
func ExplainTLSMismatch(ctx context.Context, target string, usingTLS bool, fix TLSFix, err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok || st.Code() != codes.Unavailable {
		return err
	}
	msg := st.Message()
	if strings.Contains(msg, "the journal at ") {
		return err // already explained
	}
	if usingTLS {
		// The plain-text server's first frame is not a TLS record.
		if strings.Contains(msg, "first record does not look like a TLS handshake") || (strings.Contains(msg, "tls: ") && !speaksTLS(ctx, target)) {
			return status.Error(codes.Unavailable, "the journal at "+target+" does not speak TLS: "+fix.Drop+" ("+msg+")")
		}
		return err
	}
	// A TLS server drops a connection whose first bytes are not a TLS
	// hello: the client reads no server preface.
	if !strings.Contains(msg, "server preface") && !strings.Contains(msg, "EOF") && !strings.Contains(msg, "connection reset") {
		return err
	}
	if !speaksTLS(ctx, target) {
		return err
	}
	return status.Error(codes.Unavailable, "the journal at "+target+" speaks TLS: "+fix.Give+" ("+msg+")")
}

// speaksTLS reports whether a TLS handshake with target succeeds. The
// certificate is not verified: the handshake only tells whether the
// server speaks TLS, and nothing is sent over the connection.
func speaksTLS(ctx context.Context, target string) bool {
	addr := target
	if i := strings.Index(addr, ":///"); i >= 0 {
		if scheme := addr[:i]; scheme != "dns" && scheme != "passthrough" {
			return false
		}
		addr = addr[i+4:]
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}} //nolint:gosec // only asks whether the server speaks TLS
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
