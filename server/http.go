package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/proto/openapi"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"github.com/opjournal/opjournal/server/auth"
	"github.com/opjournal/opjournal/server/console"
)

// httpHandler serves the REST mirror (grpc-gateway, calling the service
// in process through the same interceptor as gRPC, see inprocConn),
// /openapi.json, /metrics (unless it has its own listener), /healthz and
// the operators' console under /console/ (package console).
func (s *Server) httpHandler(ctx context.Context) (http.Handler, error) {
	gw := runtime.NewServeMux(
		// Responses use the proto field names (snake_case) and show every
		// field, so `"claimed": false` is visible rather than absent.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, restMarshaler{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}),
		runtime.WithErrorHandler(writeGatewayError),
		// A POST with a form content type must not be treated as another
		// method (the gateway's default "path length fallback").
		runtime.WithDisablePathLengthFallback(),
		// A wrong method on a known route is the client's mistake: 405, not
		// the gateway's default 501 (a 5xx tells clients "maybe, retry").
		runtime.WithRoutingErrorHandler(func(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
			code := opjournal.CodeNotFound
			msg := fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)
			if httpStatus == http.StatusMethodNotAllowed {
				code, msg = "METHOD_NOT_ALLOWED", fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)
			} else if httpStatus != http.StatusNotFound {
				code, msg = opjournal.CodeInvalidArgument, http.StatusText(httpStatus)
			}
			writeError(w, httpStatus, code, "", msg)
		}),
	)
	conn := newInprocConn(&pb.JournalService_ServiceDesc, s.journal, s.interceptor)
	if err := pb.RegisterJournalServiceHandlerClient(ctx, gw, pb.NewJournalServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("register gateway: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.restGuard(gw))
	if !s.cfg.NoConsole {
		con, err := console.New(console.Config{Service: s.svc, Auth: s.cfg.Auth, Allow: s.limits.allow,
			Audit: s.auditDecision, HTTPStatus: HTTPStatus, Purges: s.purgeHistory.list, Logger: s.log,
			PublicURL: s.cfg.PublicURL, TrustProxyHeaders: s.cfg.TrustProxyHeaders})
		if err != nil {
			return nil, err
		}
		mux.Handle(console.Prefix, con)
		mux.Handle("GET /console", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	}
	if s.cfg.MetricsAddr == "" {
		mux.Handle("GET /metrics", s.metricsHandler(true))
	}
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openapi.JSON)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		// A load balancer's probe wants a quick answer, not a hung one.
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.svc.Ping(ctx); err != nil {
			writeError(w, http.StatusServiceUnavailable, opjournal.CodeUnavailable, "", "the database does not answer")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	return mux, nil
}

// metricsHandler serves the Prometheus metrics. The counts are per action
// for every tenant, so on the main listener of a server with
// authentication they need a bearer token with the admin or metrics role;
// on their own listener (--metrics-addr, for a private network) they do not.
func (s *Server) metricsHandler(guarded bool) http.Handler {
	h := promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})
	if !guarded {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Auth != nil {
			p, err := s.cfg.Auth.Authenticate(auth.BearerToken(r.Header.Get("Authorization")))
			switch {
			case err != nil:
				s.log.Warn("authentication failed", "method", "GET /metrics", "peer", r.RemoteAddr, "reason", err.Error())
				writeError(w, http.StatusUnauthorized, opjournal.CodeUnauthenticated, "", "a valid bearer token with the admin or metrics role is required for /metrics (or serve it on --metrics-addr)")
				return
			case !p.MaySeeMetrics():
				writeError(w, http.StatusForbidden, opjournal.CodePermissionDenied, "", fmt.Sprintf("token %q (roles %v) may not read /metrics: it needs the admin or metrics role", p.Name, p.Roles))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// restGuard runs before the gateway reads anything of a request: it finds
// the RPC the route maps to, authenticates the caller, checks its role and
// its tenant's rate (exactly as the gRPC interceptor does), and only then
// reads the body, bounds its size and nesting, and checks the payload's
// numbers on their JSON text. So nobody without a valid token makes the
// server parse a body, and every refusal names its problem rather than a
// decoder's internals.
func (s *Server) restGuard(next http.Handler) http.Handler {
	max := int64(s.cfg.MaxRequestBytes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, ok := restRoutes[r.Method+" "+r.URL.Path]
		if !ok {
			next.ServeHTTP(w, r) // the gateway answers 404 or 405
			return
		}
		ctx, err := s.authorizeToken(r.Context(), method, auth.BearerToken(r.Header.Get("Authorization")), r.RemoteAddr)
		if err != nil {
			writeErr(w, err)
			s.metrics.rpcs.WithLabelValues(servicePrefix+method, string(opjournal.ErrorCode(err))).Inc()
			return
		}
		r = r.WithContext(context.WithValue(ctx, authorizedKey{}, true))
		// Every body-carrying route is a POST; the others take a query,
		// checked here because the gateway skips what it does not know.
		if r.Method != http.MethodPost {
			q, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				writeError(w, http.StatusBadRequest, opjournal.CodeInvalidArgument, "", "the query string is malformed: give NAME=VALUE pairs separated by &, percent-encoded")
				return
			}
			if q, err = checkQuery(method, r.Method+" "+r.URL.Path, q); err != nil {
				writeErr(w, err)
				return
			}
			r.URL.RawQuery = q.Encode()
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > max {
			writeError(w, http.StatusRequestEntityTooLarge, opjournal.CodeTooLarge, "body",
				fmt.Sprintf("request body is %d bytes; the limit is %d", r.ContentLength, max))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, opjournal.CodeTooLarge, "body",
				fmt.Sprintf("request body exceeds the limit of %d bytes", max))
			return
		case err != nil:
			writeError(w, http.StatusBadRequest, opjournal.CodeInvalidArgument, "body", "request body could not be read")
			return
		}
		// One parse of the body serves every check below and, on the fast
		// path (restdecode.go), the request itself.
		members, fast := parseMembers(body)
		if fast && depth(body) > maxBodyDepth {
			fast = false
		}
		if !fast {
			var msg string
			if members, msg = bodyMembers(body); msg != "" {
				writeError(w, http.StatusBadRequest, opjournal.CodeInvalidArgument, "body", msg)
				return
			}
		}
		// The fast path takes only bodies whose every field has the right
		// name and JSON type (TestRESTDecodeMatchesProtojson checks that
		// the field hints find nothing in them), so the hints run only on
		// a body it declines.
		if fast {
			if rb, ok := decodeREST(method, body, members); ok {
				r = r.WithContext(context.WithValue(r.Context(), restBodyKey{}, rb))
				r.Body = rb
				r.ContentLength = int64(len(body))
				next.ServeHTTP(w, r)
				return
			}
		}
		// Misspelt fields and values of the wrong JSON type, named with a
		// suggestion (fieldhint.go), before protojson's terser words.
		if err := checkMembers(method, members); err != nil {
			writeErr(w, err)
			return
		}
		// The slow path: protojson decodes the body. A Struct field
		// (payload, result) would become doubles, so its JSON text rides
		// along for the edge to make canonical (canonical.go): the text is
		// what the client wrote, exactly.
		if texts := structTexts(method, members); texts != nil {
			// protojson would refuse a name given twice in a Struct with
			// its own words and no path; canonjson names the value.
			if err := checkStructTexts(texts); err != nil {
				writeErr(w, err)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), restBodyKey{}, &restBody{structs: texts}))
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// writeErr writes an *opjournal.Error (any other error as INTERNAL).
func writeErr(w http.ResponseWriter, err error) {
	var e *opjournal.Error
	if !errors.As(err, &e) {
		e = &opjournal.Error{Code: opjournal.CodeInternal, Message: "internal error"}
	}
	if e.Code == opjournal.CodeRateLimited {
		w.Header().Set("Retry-After", "1")
	}
	writeErrorDetails(w, HTTPStatus(e.Code), e.Code, e.Field, e.Message, e.Details)
}

// restRoutes maps "METHOD /path" to the JournalService method it serves,
// from the OpenAPI document generated from the same HTTP mapping as the
// gateway's routes (proto/opjournal/v1/journal_http.yaml).
var restRoutes = func() map[string]string {
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapi.JSON, &doc); err != nil {
		panic("server: the generated OpenAPI document does not parse: " + err.Error())
	}
	routes := map[string]string{}
	for path, ops := range doc.Paths {
		for verb, op := range ops {
			routes[strings.ToUpper(verb)+" "+path] = strings.TrimPrefix(op.OperationID, "JournalService_")
		}
	}
	return routes
}()

// inprocConn is the REST mirror's connection to the JournalService: a
// grpc.ClientConnInterface that runs a call through the method's generated
// gRPC handler with the server's own interceptor chain, in process. So a
// REST call takes the path a gRPC call takes once its transport has read
// it (authorization, decoding, metrics, audit log, errors), with no
// per-method forwarding code, no second listener and no bytes in between:
// the gateway's generated client (pb.NewJournalServiceClient) drives it
// like any connection.
type inprocConn struct {
	srv         any
	methods     map[string]grpc.MethodDesc // by full method name
	interceptor grpc.UnaryServerInterceptor
}

// newInprocConn serves the unary methods of desc, implemented by srv,
// through interceptor.
func newInprocConn(desc *grpc.ServiceDesc, srv any, interceptor grpc.UnaryServerInterceptor) *inprocConn {
	c := &inprocConn{srv: srv, methods: map[string]grpc.MethodDesc{}, interceptor: interceptor}
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = m
	}
	return c
}

// Invoke calls method with args and fills reply. The handler gets its own
// copy of args and the caller its own of the answer, as over a real
// connection: the gateway's messages and the service's never alias. The
// gateway's outgoing metadata (the HTTP headers it forwards) becomes the
// call's incoming metadata, as the transport would make it.
func (c *inprocConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	m, ok := c.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "method %s not implemented", method)
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	dec := func(in any) error {
		proto.Merge(in.(proto.Message), args.(proto.Message))
		return nil
	}
	resp, err := m.Handler(c.srv, ctx, dec, c.interceptor)
	if err != nil {
		return err
	}
	proto.Merge(reply.(proto.Message), resp.(proto.Message))
	return nil
}

// NewStream refuses: the JournalService has no streaming methods.
func (c *inprocConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "the REST mirror has no streaming methods")
}

// registerFields describes RegisterRequest's fields.
var registerFields = (&pb.RegisterRequest{}).ProtoReflect().Descriptor().Fields()

// fieldsOf returns a JSON object's members by proto field name, accepting
// each field under either of its names as protojson does. A field given
// under both names is refused, as protojson refuses it.
func fieldsOf(fds protoreflect.FieldDescriptors, members map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		name := string(fd.Name())
		for _, spelling := range []string{name, fd.JSONName()} {
			raw, ok := members[spelling]
			if !ok {
				continue
			}
			if _, dup := out[name]; dup && spelling != name {
				return nil, opjournal.Errorf(opjournal.CodeInvalidArgument, name, "is given twice (as %s and %s)", name, fd.JSONName())
			}
			out[name] = raw
		}
	}
	return out, nil
}

// maxBodyDepth bounds the nesting of a REST body: the payload may nest
// canonjson.MaxDepth levels, inside a few levels of request.
const maxBodyDepth = canonjson.MaxDepth + 4

// bodyMembers parses a REST body once, into its top-level members, or
// says what is wrong with it in checkJSONObject's words. Decoding into raw
// members validates the whole text (syntax, trailing data) without
// building a tree of values; only a body that fails it is decoded again,
// by checkJSONObject, to name the problem.
func bodyMembers(body []byte) (map[string]json.RawMessage, string) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil || members == nil {
		if msg := checkJSONObject(body); msg != "" {
			return nil, msg
		}
		return nil, "request body must be a JSON object"
	}
	if depth(body) > maxBodyDepth {
		return nil, fmt.Sprintf("request body nests deeper than %d levels", maxBodyDepth)
	}
	return members, ""
}

// checkJSONObject returns "" if body is one JSON object, else what is wrong.
func checkJSONObject(body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return "request body is empty; send a JSON object"
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return fmt.Sprintf("request body is not valid JSON: %s at byte offset %d", syn.Error(), syn.Offset)
		}
		return "request body is not valid JSON: " + err.Error()
	}
	if dec.More() {
		return "request body has data after the JSON object"
	}
	if _, ok := v.(map[string]any); !ok {
		return "request body must be a JSON object"
	}
	if depth(body) > maxBodyDepth {
		return fmt.Sprintf("request body nests deeper than %d levels", maxBodyDepth)
	}
	return ""
}

// depth returns the deepest nesting of arrays and objects in valid JSON.
func depth(b []byte) int {
	d, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString:
			if c == '\\' {
				escaped = true
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			d++
			deepest = max(deepest, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return deepest
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field,omitempty"`
		// Details are facts for programs (a budget's name, limit and
		// use), the gRPC ErrorInfo's metadata but the field.
		Details map[string]string `json:"details,omitempty"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, httpStatus int, code opjournal.Code, field, msg string) {
	writeErrorDetails(w, httpStatus, code, field, msg, nil)
}

// writeErrorDetails is writeError with the refusal's details; a
// retry_after_seconds among them is also the Retry-After header.
func writeErrorDetails(w http.ResponseWriter, httpStatus int, code opjournal.Code, field, msg string, details map[string]string) {
	var b errorBody
	b.Error.Code, b.Error.Message, b.Error.Field, b.Error.Details = string(code), msg, field, details
	if ra := details["retry_after_seconds"]; ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(b)
}

// gatewayCodes names the gRPC codes the gateway itself produces (a request
// that does not decode, an unknown route) in opjournal's vocabulary.
var gatewayCodes = map[codes.Code]opjournal.Code{
	codes.InvalidArgument:   opjournal.CodeInvalidArgument,
	codes.NotFound:          opjournal.CodeNotFound,
	codes.ResourceExhausted: opjournal.CodeTooLarge,
	codes.Unavailable:       opjournal.CodeUnavailable,
}

// writeGatewayError writes a gRPC error as {"error": {code, message,
// field}} with the HTTP status from the one table in errors.go.
func writeGatewayError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st := status.Convert(err)
	code, field := opjournal.Code(""), ""
	var details map[string]string
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			code, field = opjournal.Code(info.Reason), info.Metadata["field"]
			details = detailsOf(info.Metadata)
		}
	}
	httpStatus := runtime.HTTPStatusFromCode(st.Code())
	if code != "" {
		httpStatus = HTTPStatus(code)
	} else if c, ok := gatewayCodes[st.Code()]; ok {
		code = c
		if c == opjournal.CodeTooLarge {
			httpStatus = http.StatusRequestEntityTooLarge
		}
	} else {
		code = opjournal.Code(strings.ToUpper(codeName(st.Code())))
	}
	if code == opjournal.CodeRateLimited {
		w.Header().Set("Retry-After", "1")
	}
	msg := st.Message()
	if field != "" {
		msg = strings.TrimPrefix(msg, field+": ")
	} else if m := unknownField.FindStringSubmatch(msg); m != nil {
		// protojson's words for a misspelt field (checkBody names them
		// first; this is for what it does not see): name it instead.
		field, msg = m[1], fmt.Sprintf("unknown field %q", m[1])
		if md := requestMessage(restRoutes[r.Method+" "+r.URL.Path]); md != nil {
			if s := nearestField(md, m[1]); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
		}
	} else if m := invalidValue.FindStringSubmatch(msg); m != nil {
		// A value protojson refuses, such as an int32 out of range: name the
		// field (protojson gives its JSON name) and the type it takes.
		field, msg = snakeCase(m[2]), "must be a valid "+m[1]
	} else if m := duplicateField.FindStringSubmatch(msg); m != nil {
		field, msg = snakeCase(m[1]), "is given twice"
	}
	writeErrorDetails(w, httpStatus, code, field, msg, details)
}

var (
	unknownField   = regexp.MustCompile(`unknown field "([^"]+)"`)
	invalidValue   = regexp.MustCompile(`invalid value for (\w+) field (\w+)`)
	duplicateField = regexp.MustCompile(`duplicate field "?(\w+)"?`)
)

// snakeCase turns a JSON field name (leaseSeconds) into the proto name
// (lease_seconds) that the error bodies use.
func snakeCase(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// codeName returns a gRPC code in UPPER_SNAKE form (FailedPrecondition →
// FAILED_PRECONDITION).
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}
