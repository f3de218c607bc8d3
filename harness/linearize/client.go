package linearize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opjournal/opjournal"
	pb "github.com/opjournal/opjournal/proto/opjournal/v1"
	"github.com/opjournal/opjournal/protocol/canonjson"
	"github.com/opjournal/opjournal/protocol/model"
)

// Endpoint is one journal server: its gRPC address and REST base URL.
type Endpoint struct {
	GRPCAddr string
	HTTPURL  string
	// Expire applies the approval timeout of key as the serving process's
	// sweep does (nil for a journal in another process: the workload then
	// draws no Expire).
	Expire func(ctx context.Context, key string) (*opjournal.Operation, error)
}

// Client calls one journal over both of its doors.
type Client struct {
	conn   *grpc.ClientConn
	grpc   pb.JournalServiceClient
	http   *http.Client
	base   string
	expire func(ctx context.Context, key string) (*opjournal.Operation, error)
	// Base is the database clock's time that Input.Now 0 stands for (the
	// zero time when the run's clock is not the test's).
	Base time.Time
}

// Dial connects to e. Close the client when done.
func Dial(e Endpoint, base time.Time) (*Client, error) {
	conn, err := grpc.NewClient(e.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	// No keep-alive pool shared with other clients: a killed server's
	// connections must not linger into the next one's.
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	return &Client{conn: conn, grpc: pb.NewJournalServiceClient(conn), http: &http.Client{Transport: tr},
		base: strings.TrimRight(e.HTTPURL, "/"), Base: base, expire: e.Expire}, nil
}

// Close closes the client's connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return c.conn.Close()
}

// Do sends in over gRPC or, with in.REST, over REST, and returns the
// answer as the model sees it. An error that leaves the outcome open
// (timeout, UNAVAILABLE, a broken connection, a 5xx) is Output.Maybe.
func (c *Client) Do(ctx context.Context, in model.Input) model.Output {
	if in.Kind == model.Expire {
		return c.doExpire(ctx, in)
	}
	req, verb := request(in)
	var resp proto.Message
	var err error
	if in.REST {
		resp, err = c.rest(ctx, in.Kind, verb, req)
	} else {
		resp, err = c.call(ctx, in.Kind, req)
	}
	if err != nil {
		if code, ok := refusal(err); ok {
			return model.Output{Err: code}
		}
		return model.Output{Maybe: true}
	}
	return c.output(resp)
}

// CanExpire reports whether the client can apply approval timeouts.
func (c *Client) CanExpire() bool { return c.expire != nil }

// doExpire applies ExpireApproval in process and answers with the
// operation as Lookup then reads it (the sweep's answer is not on the
// wire; the read after it is).
func (c *Client) doExpire(ctx context.Context, in model.Input) model.Output {
	op, err := c.expire(ctx, in.Key)
	switch code := opjournal.ErrorCode(err); {
	case err == nil:
	case code == opjournal.CodeUnavailable || code == opjournal.CodeInternal || ctx.Err() != nil:
		return model.Output{Maybe: true}
	default:
		return model.Output{Err: string(code)}
	}
	return model.Output{Op: c.viewOf(op)}
}

// viewOf is what the sweep's answer shows of op (its result is not
// compared, as in the agent's answers).
func (c *Client) viewOf(op *opjournal.Operation) model.View {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(c.Base).Milliseconds()
	}
	v := model.View{
		Status: strings.ToUpper(string(op.Status)), Attempts: op.AttemptCount, Owner: op.LeaseOwner, NeedsReview: op.NeedsReview,
		ExternalID: op.ExternalID, DuplicateID: op.DuplicateExternalID, DuplicateIDs: strings.Join(op.DuplicateExternalIDs, ","),
		Reports: op.DuplicateReports, ErrorCode: op.ErrorCode, Checks: op.CheckCount, LeaseUntil: ms(op.LeaseUntil),
		UnknownSince: ms(op.UnknownSince), NextCheck: ms(op.NextCheckAt), LastChecked: ms(op.LastCheckedAt),
		Started: ms(op.AttemptStartedAt), FirstAttempt: ms(op.FirstAttemptAt),
	}
	if a := op.Approval; a != nil {
		v.Deadline = ms(a.Deadline)
		var who []string
		for _, d := range a.Approvals {
			who = append(who, d.Principal)
		}
		v.Approvers = strings.Join(who, ",")
	}
	return v
}

const actor = "linearize"

// request builds the protobuf request of in and its REST verb.
func request(in model.Input) (proto.Message, string) {
	k := in.Key
	switch in.Kind {
	case model.Register:
		r := &pb.RegisterRequest{OperationKey: k, ActionType: in.Action, Payload: payload(in.Payload)}
		if in.Claim {
			r.Claim = &pb.ClaimOptions{WorkerId: in.Worker, LeaseSeconds: int32(in.Lease)}
		}
		return r, "register"
	case model.Claim:
		return &pb.ClaimRequest{OperationKey: k, WorkerId: in.Worker, LeaseSeconds: int32(in.Lease)}, "claim"
	case model.ExtendLease:
		return &pb.ExtendLeaseRequest{OperationKey: k, Attempt: int32(in.Attempt), LeaseSeconds: int32(in.Lease)}, "extendLease"
	case model.MarkSucceeded:
		r := &pb.MarkSucceededRequest{OperationKey: k, Attempt: int32(in.Attempt), ExternalId: in.ExternalID}
		if in.ExternalID != "" {
			r.Result = resultStruct(in.ExternalID)
		}
		return r, "markSucceeded"
	case model.MarkUnknown:
		return &pb.MarkUnknownRequest{OperationKey: k, Attempt: int32(in.Attempt), ErrorCode: in.ErrorCode}, "markUnknown"
	case model.MarkFailedFinal:
		return &pb.MarkFailedFinalRequest{OperationKey: k, Attempt: int32(in.Attempt), ErrorCode: in.ErrorCode}, "markFailedFinal"
	case model.RecordCheck:
		return &pb.RecordCheckRequest{OperationKey: k, Attempt: int32(in.Attempt), Actor: actor, Note: "unclear",
			NextCheckAfterSeconds: int32(in.CheckAfter)}, "recordCheck"
	case model.ReleaseForRetry:
		return &pb.ReleaseForRetryRequest{OperationKey: k, Attempt: int32(in.Attempt), Actor: actor, Reason: "absent"}, "releaseForRetry"
	case model.Escalate:
		return &pb.EscalateRequest{OperationKey: k, Actor: actor, Reason: "unknown for too long"}, "escalate"
	case model.Resolve:
		r := &pb.ResolveRequest{OperationKey: k, Actor: actor, Reason: "checked by hand"}
		if in.Resolution == model.Succeeded {
			r.Resolution, r.ExternalId, r.Result = pb.Resolution_RESOLUTION_SUCCEEDED, in.ExternalID, resultStruct(in.ExternalID)
		} else {
			r.Resolution, r.ErrorCode = pb.Resolution_RESOLUTION_FAILED_FINAL, in.ErrorCode
		}
		return r, "resolve"
	case model.Acknowledge:
		return &pb.AcknowledgeRequest{OperationKey: k, Actor: actor, Reason: "duplicate refunded"}, "acknowledge"
	case model.Lookup:
		return &pb.LookupRequest{OperationKey: k}, "lookup"
	case model.Approve:
		return &pb.ApproveRequest{OperationKey: k, RequestHash: requestHash(in.Action, in.Payload), Actor: in.Worker, Reason: "checked"}, "approve"
	case model.Reject:
		return &pb.RejectRequest{OperationKey: k, RequestHash: requestHash(in.Action, in.Payload), Actor: in.Worker, Reason: "not wanted",
			ErrorCode: in.ErrorCode}, "reject"
	}
	panic("linearize: unknown command " + string(in.Kind))
}

// requestHash is the request hash of payload n of action, as the journal
// computes it for an action without redact_fields (docs/spec.md).
func requestHash(action string, n int) string {
	b, err := protojson.Marshal(payload(n))
	if err != nil {
		panic(err)
	}
	env, _, err := canonjson.Request(action, b, canonjson.Options{})
	if err != nil {
		panic(err)
	}
	return canonjson.Hash(env)
}

func payload(n int) *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"order_id": "817", "amount_minor": float64(100 + n)})
	return s
}

func resultStruct(id string) *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"id": "r-" + id})
	return s
}

func (c *Client) call(ctx context.Context, k model.Kind, req proto.Message) (proto.Message, error) {
	g := c.grpc
	switch r := req.(type) {
	case *pb.RegisterRequest:
		return g.Register(ctx, r)
	case *pb.ClaimRequest:
		return g.Claim(ctx, r)
	case *pb.ExtendLeaseRequest:
		return g.ExtendLease(ctx, r)
	case *pb.MarkSucceededRequest:
		return g.MarkSucceeded(ctx, r)
	case *pb.MarkUnknownRequest:
		return g.MarkUnknown(ctx, r)
	case *pb.MarkFailedFinalRequest:
		return g.MarkFailedFinal(ctx, r)
	case *pb.RecordCheckRequest:
		return g.RecordCheck(ctx, r)
	case *pb.ReleaseForRetryRequest:
		return g.ReleaseForRetry(ctx, r)
	case *pb.EscalateRequest:
		return g.Escalate(ctx, r)
	case *pb.ResolveRequest:
		return g.Resolve(ctx, r)
	case *pb.AcknowledgeRequest:
		return g.Acknowledge(ctx, r)
	case *pb.LookupRequest:
		return g.Lookup(ctx, r)
	case *pb.ApproveRequest:
		return g.Approve(ctx, r)
	case *pb.RejectRequest:
		return g.Reject(ctx, r)
	}
	return nil, fmt.Errorf("linearize: no gRPC method for %s", k)
}

// restError is the REST error body.
type restError struct {
	Error struct {
		Code    string            `json:"code"`
		Details map[string]string `json:"details"`
	} `json:"error"`
}

// statusError is a REST answer that is not 200.
type statusError struct {
	status  int
	code    string
	details map[string]string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d %s", e.status, e.code) }

func (c *Client) rest(ctx context.Context, k model.Kind, verb string, req proto.Message) (proto.Message, error) {
	var data []byte
	var err error
	if k == model.Lookup {
		q := url.Values{"operation_key": {req.(*pb.LookupRequest).GetOperationKey()}}
		data, err = c.restRaw(ctx, http.MethodGet, "/v1/operations:lookup?"+q.Encode(), nil)
	} else {
		body, merr := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
		if merr != nil {
			return nil, merr
		}
		data, err = c.restRaw(ctx, http.MethodPost, "/v1/operations:"+verb, body)
	}
	if err != nil {
		return nil, err
	}
	var out proto.Message
	switch k {
	case model.Register:
		out = &pb.RegisterResponse{}
	case model.Claim:
		out = &pb.ClaimResponse{}
	case model.ExtendLease:
		out = &pb.ExtendLeaseResponse{}
	case model.MarkSucceeded:
		out = &pb.MarkSucceededResponse{}
	case model.MarkUnknown:
		out = &pb.MarkUnknownResponse{}
	case model.MarkFailedFinal:
		out = &pb.MarkFailedFinalResponse{}
	case model.RecordCheck:
		out = &pb.RecordCheckResponse{}
	case model.ReleaseForRetry:
		out = &pb.ReleaseForRetryResponse{}
	case model.Escalate:
		out = &pb.EscalateResponse{}
	case model.Resolve:
		out = &pb.ResolveResponse{}
	case model.Acknowledge:
		out = &pb.AcknowledgeResponse{}
	case model.Lookup:
		out = &pb.LookupResponse{}
	case model.Approve:
		out = &pb.ApproveResponse{}
	case model.Reject:
		out = &pb.RejectResponse{}
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("linearize: REST %s answer: %w", verb, err)
	}
	return out, nil
}

// restRaw sends one REST request (body, if not nil, as JSON) and returns
// the answer's body, or a *statusError for an answer that is not 200.
func (c *Client) restRaw(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e restError
		_ = json.Unmarshal(data, &e)
		return nil, &statusError{status: resp.StatusCode, code: e.Error.Code, details: e.Error.Details}
	}
	return data, nil
}

// refusal returns the opjournal code of an answer that refused the call
// (nothing changed), or false when the outcome is open: UNAVAILABLE,
// INTERNAL, a deadline, a broken connection, any 5xx.
func refusal(err error) (string, bool) {
	var se *statusError
	if errors.As(err, &se) {
		if se.status >= 500 || se.code == "" || se.code == "UNAVAILABLE" || se.code == "INTERNAL" {
			return "", false
		}
		return se.code, true
	}
	st, ok := status.FromError(err)
	if !ok {
		return "", false
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Internal, codes.Unknown, codes.Aborted:
		return "", false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == "opjournal" {
			if info.Reason == "UNAVAILABLE" || info.Reason == "INTERNAL" {
				return "", false
			}
			return info.Reason, true
		}
	}
	return "", false
}

type opAnswer interface{ GetOperation() *pb.Operation }

// output converts an answer to the model's Output.
func (c *Client) output(resp proto.Message) model.Output {
	var o model.Output
	if a, ok := resp.(opAnswer); ok {
		_, basic := resp.(interface{ GetLeaseSeconds() int32 })
		switch resp.(type) {
		case *pb.MarkSucceededResponse, *pb.MarkUnknownResponse, *pb.MarkFailedFinalResponse:
			basic = true
		case *pb.RegisterResponse, *pb.ClaimResponse:
			basic = false // BASIC, but with the stored result
		}
		o.Op = c.view(a.GetOperation(), !basic)
	}
	switch r := resp.(type) {
	case *pb.RegisterResponse:
		o.Created, o.Claimed, o.Attempt, o.Next = r.GetCreated(), r.GetClaimed(), int(r.GetAttempt()), nextName(r.GetNext())
		o.RetryAfter, o.LeaseSeconds, o.LeaseUntil = int(r.GetRetryAfterSeconds()), int(r.GetLeaseSeconds()), c.ms(r.GetLeaseUntil())
	case *pb.ClaimResponse:
		o.Claimed, o.Attempt, o.Next = r.GetClaimed(), int(r.GetAttempt()), nextName(r.GetNext())
		o.RetryAfter, o.LeaseSeconds, o.LeaseUntil = int(r.GetRetryAfterSeconds()), int(r.GetLeaseSeconds()), c.ms(r.GetLeaseUntil())
	}
	return o
}

func nextName(n pb.NextStep) string { return strings.TrimPrefix(n.String(), "NEXT_STEP_") }

func (c *Client) view(op *pb.Operation, result bool) model.View {
	v := model.View{
		Status: strings.TrimPrefix(op.GetStatus().String(), "STATUS_"), Attempts: int(op.GetAttemptCount()),
		Owner: op.GetLeaseOwner(), NeedsReview: op.GetNeedsReview(), ExternalID: op.GetExternalId(),
		DuplicateID: op.GetDuplicateExternalId(), DuplicateIDs: strings.Join(op.GetDuplicateExternalIds(), ","),
		Reports: int(op.GetDuplicateReports()), ErrorCode: op.GetErrorCode(), Checks: int(op.GetCheckCount()),
		LeaseUntil: c.ms(op.GetLeaseUntil()), UnknownSince: c.ms(op.GetUnknownSince()), NextCheck: c.ms(op.GetNextCheckAt()),
		LastChecked: c.ms(op.GetLastCheckedAt()), Started: c.ms(op.GetAttemptStartedAt()), FirstAttempt: c.ms(op.GetFirstAttemptAt()),
		HasResult: result, Deadline: c.ms(op.GetApproval().GetDeadline()),
	}
	var who []string
	for _, d := range op.GetApproval().GetApprovals() {
		who = append(who, d.GetPrincipal())
	}
	v.Approvers = strings.Join(who, ",")
	if r := op.GetResult(); r != nil {
		v.Result = r.GetFields()["id"].GetStringValue()
	}
	return v
}

// ms is t in milliseconds since the base (0 for unset).
func (c *Client) ms(t *timestamppb.Timestamp) int64 {
	if t == nil {
		return 0
	}
	return t.AsTime().Sub(c.Base).Milliseconds()
}
