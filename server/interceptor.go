package server

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/internal/tracing"
	"github.com/opjournal/opjournal/journal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
)

// The one interceptor chain of every JournalService call, gRPC and REST
// alike: authentication and authorisation (auth.go), the error table
// (errors.go), panics recovered, metrics, the audit log and the RPC's span.

// mutations are the JournalService methods that may change an operation:
// each successful call is logged with its principal (audit).
var mutations = map[string]bool{
	"Register": true, "Claim": true, "ExtendLease": true, "MarkSucceeded": true, "MarkUnknown": true,
	"MarkFailedFinal": true, "ReleaseForRetry": true, "RecordCheck": true, "Escalate": true,
	"Resolve": true, "Acknowledge": true, "SetNote": true, "Approve": true, "Reject": true,
}

// audit logs a successful call of a mutating method: the method, the key,
// the principal and tenant (from authentication) and the status after.
// Never a payload, result or token.
func (s *Server) audit(ctx context.Context, mm *methodMetrics, req, resp any) {
	if !mm.audited {
		return
	}
	key := ""
	if r, ok := req.(interface{ GetOperationKey() string }); ok {
		key = r.GetOperationKey()
	}
	st := ""
	if r, ok := resp.(interface{ GetOperation() *pb.Operation }); ok {
		st = r.GetOperation().GetStatus().String()
	}
	s.auditLine(ctx, mm.name, callerOf(ctx), key, st, "")
}

// auditDecision records a decision taken in the console as an API call's
// is recorded: the same audit line, marked as from the console, and an
// approval's decision in the same metrics as Approve and Reject over the
// API (decisionOutcome).
func (s *Server) auditDecision(ctx context.Context, method string, c journal.Caller, op *opjournal.Operation) {
	s.auditLine(ctx, method, c, op.Key, string(op.Status), "console")
	if outcome := decisionOutcome(method, op.Status); outcome != "" {
		s.metrics.decision(op.Action, outcome)
	}
}

func (s *Server) auditLine(ctx context.Context, method string, c journal.Caller, key, status, via string) {
	// LogAttrs: no boxing of the values into a []any, once per mutation.
	attrs := []slog.Attr{slog.String("method", method), slog.String("key", key),
		slog.String("principal", c.Principal), slog.String("tenant", c.Tenant), slog.String("status", status)}
	if via != "" {
		attrs = append(attrs, slog.String("via", via))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "journal call", attrs...)
}

// unaryInterceptor authenticates and authorises the caller (auth.go),
// turns errors into gRPC statuses (one table, errors.go),
// recovers panics so bad input can never take the server down, and records
// metrics and logs. It never logs payloads or results.
func (s *Server) unaryInterceptor() grpc.UnaryServerInterceptor {
	log, m := s.log, s.metrics
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if s.procs != nil {
			s.procs.Enter()
			defer s.procs.Exit()
		}
		start := time.Now()
		method := info.FullMethod
		mm := s.methodOf(method)
		// The call's server span (tracing off: none, and nothing else).
		// JournalService calls only: a load balancer's health checks
		// would bury them.
		var span trace.Span
		if tracing.Enabled() && strings.HasPrefix(method, servicePrefix) {
			transport := "grpc"
			if ctx.Value(restCallKey{}) != nil {
				transport = "http"
			}
			ctx, span = tracing.StartServerRPC(ctx, method, transport)
		}
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ctx, "panic in handler", "method", method, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, grpcError(opjournal.Errorf(opjournal.CodeInternal, "", "internal error"))
			}
			code := "OK"
			if err != nil {
				if code = string(codeOf(err)); code == "" {
					code = status.Code(err).String()
				}
				m.rpcs.WithLabelValues(method, code).Inc()
			}
			series := mm.series()
			if err == nil {
				series.ok.Inc()
			}
			series.latency.Observe(time.Since(start).Seconds())
			if span != nil {
				endSpan(span, req, resp, err, code)
			}
		}()
		ctx, err = s.authorize(ctx, method)
		if err == nil {
			// Parsed only now that the caller is known (codec.go).
			if derr := decodeRequest(req); derr != nil {
				err = opjournal.Errorf(opjournal.CodeInvalidArgument, "", "the request is not a valid %s message: %s",
					strings.TrimPrefix(method, servicePrefix), strings.TrimPrefix(derr.Error(), "proto: "))
			}
		}
		if err == nil {
			resp, err = handler(ctx, req)
		}
		if err == nil {
			s.audit(ctx, mm, req, resp)
			return resp, nil
		}
		switch c := opjournal.ErrorCode(err); c {
		case opjournal.CodeInternal, opjournal.CodeUnavailable:
			log.ErrorContext(ctx, "request failed", "method", method, "code", c, "err", err)
		default:
			log.DebugContext(ctx, "request refused", "method", method, "code", c, "err", err)
		}
		return nil, grpcError(err)
	}
}

// restCallKey marks the context of a request to the REST mirror (set by
// the HTTP listener while tracing is on): its RPC span says so.
type restCallKey struct{}

// endSpan ends an RPC's server span with what may be said of the call:
// the operation key (an identifier the audit log records too), the action
// type and the status after, and the outcome's codes. Never a payload, a
// result, a message or a token.
func endSpan(span trace.Span, req, resp any, err error, code string) {
	if span.IsRecording() {
		if r, ok := req.(interface{ GetOperationKey() string }); ok && r.GetOperationKey() != "" {
			span.SetAttributes(tracing.KeyOperationKey.String(r.GetOperationKey()))
		}
		action := ""
		if r, ok := req.(interface{ GetActionType() string }); ok {
			action = r.GetActionType()
		}
		if r, ok := resp.(interface{ GetOperation() *pb.Operation }); ok && r.GetOperation() != nil {
			op := r.GetOperation()
			if action == "" {
				action = op.GetActionType()
			}
			span.SetAttributes(tracing.KeyStatus.String(strings.ToLower(strings.TrimPrefix(op.GetStatus().String(), "STATUS_"))))
		}
		if action != "" {
			span.SetAttributes(tracing.KeyActionType.String(action))
		}
	}
	if err == nil {
		code = ""
	}
	tracing.EndRPC(span, err, code)
}
