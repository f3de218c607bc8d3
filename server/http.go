package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/opjournal/opjournal"
	"github.com/opjournal/opjournal/canonjson"
	"github.com/opjournal/opjournal/gen/openapi"
	pb "github.com/opjournal/opjournal/gen/opjournal/v1"
)

// httpHandler serves the REST mirror (grpc-gateway, forwarding to the gRPC
// listener through conn so both transports share one interceptor chain),
// /openapi.json, /metrics and /healthz.
func (s *Server) httpHandler(ctx context.Context, conn *grpc.ClientConn) (http.Handler, error) {
	gw := runtime.NewServeMux(
		// Responses use the proto field names (snake_case) and show every
		// field, so `"claimed": false` is visible rather than absent.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
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
	if err := pb.RegisterJournalServiceHandler(ctx, gw, conn); err != nil {
		return nil, fmt.Errorf("register gateway: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.limitBody(gw))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
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

// limitBody rejects a body over the request limit with 413 and a body that
// is not one JSON object with 400, before the gateway sees it, so both get
// a message that names the problem rather than a decoder's internals.
func (s *Server) limitBody(next http.Handler) http.Handler {
	max := int64(s.cfg.MaxRequestBytes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every body-carrying route is a POST; other methods go straight to
		// the router (which answers 405 where the method is wrong).
		if r.Method != http.MethodPost {
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
		if msg := checkJSONObject(body); msg != "" {
			writeError(w, http.StatusBadRequest, opjournal.CodeInvalidArgument, "body", msg)
			return
		}
		if strings.HasSuffix(r.URL.Path, ":register") {
			if err := s.checkPayloadText(body); err != nil {
				var e *opjournal.Error
				if errors.As(err, &e) {
					writeError(w, HTTPStatus(e.Code), e.Code, e.Field, e.Message)
					return
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// checkPayloadText validates a register body's payload on its JSON TEXT,
// before the gateway decodes it into google.protobuf.Struct (doubles): only
// the text still says that 4900.0000000000000001 is not the integer 4900
// or that 9007199254740993 is not …992. The journal checks again after
// decoding; this check only makes sure nothing was rounded on the way.
func (s *Server) checkPayloadText(body []byte) error {
	var req struct {
		ActionType string          `json:"action_type"`
		Payload    json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(body, &req) != nil || req.Payload == nil || string(req.Payload) == "null" {
		return nil // the gateway and the journal name these problems
	}
	return s.svc.CheckPayload(req.ActionType, req.Payload)
}

// maxBodyDepth bounds the nesting of a REST body: the payload may nest
// canonjson.MaxDepth levels, inside a few levels of request.
const maxBodyDepth = canonjson.MaxDepth + 4

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
	} `json:"error"`
}

func writeError(w http.ResponseWriter, httpStatus int, code opjournal.Code, field, msg string) {
	var b errorBody
	b.Error.Code, b.Error.Message, b.Error.Field = string(code), msg, field
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
func writeGatewayError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	st := status.Convert(err)
	code, field := opjournal.Code(""), ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == ErrorDomain {
			code, field = opjournal.Code(info.Reason), info.Metadata["field"]
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
		// protojson's words for a misspelt field; name it instead.
		field, msg = m[1], "is not a field of this request"
	}
	writeError(w, httpStatus, code, field, msg)
}

var unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)

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
